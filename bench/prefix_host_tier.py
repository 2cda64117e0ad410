"""The prefix cache's host-memory tier (vLLM's CPU KV offload), issue 14: hit rates (GPU +
host), TTFT and load time with and without the tier, in three settings.

* ``traces``: the Mooncake traces at ``--rate-scale``, Llama-3.1-8B on one H100 (the memory
  plan's GPU cache), vLLM defaults, ``--gib`` of host tier (default 0 / 64 / 256).
* ``augmented``: INFERCEPT's six-type tool-calling mixture on GPT-J-6B / A100-80GB at
  ``--aug-rate`` req/s for ``--window`` s (``bench/augmented.py``'s setting, 128 GB of swap
  space), the augmented contexts cached (``augment.prefix_caching``), host tier 0 vs
  ``--aug-gib`` GiB, for vLLM-style, INFERCEPT and AugServe; effective throughput at TTFT ≤ 1 s.
* ``cluster``: a small cluster (``1x2:h100``, Llama-2-7B and Llama-3.1-8B dedicated) serving
  a shared-prefix workload (``--groups`` system prompts of 1,024 tokens before 128-token
  questions, Poisson at ``--cluster-rate``, models alternating), host tier 0 vs ``--aug-gib``.

    python bench/prefix_host_tier.py [traces|augmented|cluster|all] [--rate-scale 0.25]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import time
from typing import Any

import numpy as np
from _common import PINNED_PERF_MODEL, md_table, save
from prefix_cache import TRACES, config

from tidal.sim.config import load_config
from tidal.sim.run import load_requests, run_simulation
from tidal.workload.base import RequestSet
from tidal.workload.build import build_workload
from tidal.workload.config import WorkloadConfig

WARMUP_S = 30
HOST_KEYS = ("prefix_cache_host_hit_rate", "prefix_cache_host_load_s")


def _f(m: dict[str, Any], k: str, fmt: str = "{:.3f}") -> str:
    v = m.get(k)
    return "—" if v is None else fmt.format(v)


def traces(args: argparse.Namespace, data: dict[str, Any]) -> None:
    rows = []
    for name in TRACES:
        reqs = None
        for gib in [float(g) for g in args.gib.split(",")]:
            cfg = config(name, args.rate_scale, host_cache_gib=gib)
            reqs = reqs if reqs is not None else load_requests(cfg)
            m = run_simulation(cfg, reqs).metrics
            keep = ("prefix_cache_hit_rate", "ttft_p50_s", "ttft_p90_s", "ttft_mean_s")
            data[f"{name}/{gib:g}"] = {k: v for k, v in m.items() if k in keep or "host" in k}
            rows.append([name, f"{gib:g}", _f(m, "prefix_cache_hit_rate")])
            rows[-1] += [f"{m.get(k, 0.0):.3f}" for k in HOST_KEYS]
            rows[-1] += [_f(m, k, "{:.2f}") for k in ("ttft_p50_s", "ttft_p90_s", "ttft_mean_s")]
    header = ["trace", "host GiB", "hit rate", "of it host", "load s", "TTFT p50", "p90", "mean"]
    print(md_table(header, rows))


AUG_KEYS = (
    "effective_throughput",
    "ttft_p50_s",
    "ttft_p99_s",
    "normalized_latency_p50_s",
    "prefix_cache_hit_rate",
    "prefix_cache_host_hit_rate",
    "prefix_cache_host_load_s",
    "recompute_tokens",
    "recompute_hit_tokens",
    "intercepts_discarded",
    "num_completed",
    "swap_link_gbs",
)


def augmented(args: argparse.Namespace, data: dict[str, Any]) -> None:
    rows = []
    for link, policy, gib in itertools.product(
        args.links.split(","), ("vllm", "infercept", "augserve"), (0.0, args.aug_gib)
    ):
        eff = None if link == "measured" else float(link)
        cfg = load_config(
            {
                "model": "gpt-j-6b",
                "gpu": "a100-80gb",
                "perf_model": PINNED_PERF_MODEL,
                "workload": {
                    "augmented": "infercept-mix",
                    "rate": args.aug_rate,
                    "num_requests": round(args.aug_rate * args.window),
                },
                "augment": {
                    "serving_policy": policy,
                    "prefix_caching": True,
                    "swap_space_gb": 128.0,
                    "host_link_efficiency": eff,
                },
                "memory": {"host_cache_gib": gib},
                "slo": {"ttft_s": 1.0},
            }
        )
        t0 = time.process_time()
        m = run_simulation(cfg).metrics
        cpu = time.process_time() - t0
        data[f"augmented/{link}/{policy}/{gib:g}"] = {k: m.get(k) for k in AUG_KEYS} | {
            "cpu_s": cpu
        }
        rows.append(
            [
                f"{m['swap_link_gbs']:.1f}",
                policy,
                f"{gib:g}",
                _f(m, "effective_throughput"),
                _f(m, "prefix_cache_hit_rate"),
                _f(m, "prefix_cache_host_hit_rate"),
                _f(m, "prefix_cache_host_load_s", "{:.1f}"),
                _f(m, "recompute_tokens", "{:,}"),
                _f(m, "ttft_p50_s"),
                _f(m, "ttft_p99_s"),
                _f(m, "normalized_latency_p50_s", "{:.4f}"),
            ]
        )
    header = ["link GB/s", "policy", "host GiB", "eff. req/s", "hit rate", "of it host", "load s"]
    header += ["recomputed tok", "TTFT p50", "p99", "norm. lat. p50 s/tok"]
    print(md_table(header, rows))


def shared_prefix_mix(groups: int, rate: float, n: int, seed: int) -> RequestSet:
    """The single-instance shared-prefix generator's requests, alternating between the
    cluster's two models, arriving after the cluster's warm-up (its instances' cold starts)."""
    w = WorkloadConfig(
        num_requests=n,
        rate=rate,
        shared_prefix_groups=groups,
        shared_prefix_len=1024,
        prompt_len=128,
        output_len=64,
    )
    rs = build_workload(w, np.random.default_rng(seed))
    extra = {**rs.extra, "model": np.arange(len(rs), dtype=np.int64) % 2}
    return dataclasses.replace(rs, arrival_ns=rs.arrival_ns + WARMUP_S * 10**9, extra=extra)


def cluster(args: argparse.Namespace, data: dict[str, Any]) -> None:
    rows = []
    reqs = shared_prefix_mix(args.groups, args.cluster_rate, args.cluster_requests, 0)
    for gib in (0.0, args.aug_gib):
        cfg = load_config(
            {
                "workload": {"trace": "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"},
                "memory": {"host_cache_gib": gib},
                "cluster": {
                    "spec": "1x2:h100",
                    "perf_model": PINNED_PERF_MODEL,
                    "models": ["llama-2-7b", "llama-3.1-8b"],
                    "placement": "dedicated",
                    "warmup_s": WARMUP_S,
                    "mix": {"rate": 1.0, "replay_s": 60},
                },
            }
        )
        res = run_simulation(cfg, reqs)
        m = res.metrics
        keep = ("prefix_cache_hit_rate", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s")
        data[f"cluster/{gib:g}"] = {k: v for k, v in m.items() if k in keep or "host" in k}
        rows.append([f"{gib:g}", _f(m, "prefix_cache_hit_rate")])
        rows[-1] += [_f(m, k, "{:.3f}") for k in HOST_KEYS]
        rows[-1] += [_f(m, k) for k in ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s")]
    header = ["host GiB", "hit rate", "of it host", "load s", "TTFT p50", "p90", "p99"]
    print(md_table(header, rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "what", nargs="?", default="traces", choices=["traces", "augmented", "cluster", "all"]
    )
    ap.add_argument("--rate-scale", type=float, default=0.25)
    ap.add_argument("--gib", default="0,64,256")
    ap.add_argument("--aug-rate", type=float, default=4.0)
    ap.add_argument("--window", type=float, default=300.0)
    ap.add_argument("--aug-gib", type=float, default=64.0)
    ap.add_argument(
        "--links",
        default="measured,0.8",
        help="augmented: host-link efficiencies (measured: INFERCEPT's profiled swap budget)",
    )
    ap.add_argument("--groups", type=int, default=400)
    ap.add_argument("--cluster-rate", type=float, default=8.0)
    ap.add_argument("--cluster-requests", type=int, default=4000)
    args = ap.parse_args()
    data: dict[str, Any] = {"load": os.getloadavg(), "args": vars(args)}
    for what, fn in (("traces", traces), ("augmented", augmented), ("cluster", cluster)):
        if args.what in (what, "all"):
            fn(args, data)
    print(f"load average at the end: {os.getloadavg()}")
    save(f"prefix_host_tier_{args.what}" if args.what != "traces" else "prefix_host_tier", data)


if __name__ == "__main__":
    main()
