"""Augmented serving on a disaggregated deployment (issue 29 item 5A): INFERCEPT's six-type
mixture under vLLM-style / INFERCEPT / AugServe serving, on 2 GPUs three ways — 1 prefill +
1 decode instance (TP1 each, KV over NVLink), two aggregated TP1 replicas (least-loaded), one
aggregated TP2 instance. Prints a Markdown table and appends JSON lines to ``--out``.

    nice python bench/augmented_disagg.py --model llama-2-7b --gpu h100 --rates 2,4,6 \
        --num-requests 300 --out bench/results/augmented_disagg.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from tidal.core.augmented_metrics import augmented_metrics
from tidal.experiments.replicas import run_replicated
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

KEYS = (
    "effective_throughput", "ttft_p50_s", "ttft_p99_s", "normalized_latency_p50_s",
    "normalized_latency_p99_s", "num_completed", "intercepts_preserved",
    "intercepts_discarded", "intercepts_swapped", "num_preemptions",
)  # fmt: skip
SHAPES = ("1P:1D", "2x TP1", "1x TP2")


def run(args: argparse.Namespace, shape: str, policy: str, rate: float) -> dict[str, Any]:
    data: dict[str, Any] = {
        "seed": args.seed,
        "model": args.model,
        "gpu": args.gpu,
        "tp": 2 if shape == "1x TP2" else 1,
        "augment": {"serving_policy": policy, "swap_space_gb": args.swap_gb},
        "workload": {"augmented": "infercept-mix", "num_requests": args.num_requests,
                     "rate": rate},
    }  # fmt: skip
    if shape == "1P:1D":
        data["deployment"] = {"prefill": {"instances": 1}, "decode": {"instances": 1}}
    cfg = load_config(data)
    t0 = time.perf_counter()
    res = run_replicated(cfg, 2) if shape == "2x TP1" else run_simulation(cfg)
    m = dict(res.metrics)
    if "effective_throughput" not in m:  # replicas: the augmented metrics from the columns
        m.update(augmented_metrics(res.columns, cfg.slo.ttft_s, cfg.slo.norm_latency_s))
    row = {"shape": shape, "policy": policy, "rate": rate, "wall_s": time.perf_counter() - t0}
    row.update({k: m.get(k) for k in KEYS})
    if row["num_preemptions"] is None and "pools" in m:
        row["num_preemptions"] = sum(p["num_preemptions"] for p in m["pools"].values())
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-2-7b")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--rates", default="2,4,6")
    ap.add_argument("--policies", default="vllm,infercept,augserve")
    ap.add_argument("--num-requests", type=int, default=300)
    ap.add_argument("--swap-gb", type=float, default=64.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    print("| rate | policy | shape | eff. req/s | TTFT p50 s | TTFT p99 s | norm. lat p50 ms "
          "| norm. lat p99 ms | preserved / discarded / swapped | preemptions |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rate in (float(r) for r in args.rates.split(",")):
        for policy in args.policies.split(","):
            for shape in SHAPES:
                r = run(args, shape, policy, rate)
                rows.append(r)
                print(
                    f"| {rate:g} | {policy} | {shape} | {r['effective_throughput']:.3f} "
                    f"| {r['ttft_p50_s']:.3f} | {r['ttft_p99_s']:.3f} "
                    f"| {r['normalized_latency_p50_s'] * 1e3:.1f} "
                    f"| {r['normalized_latency_p99_s'] * 1e3:.1f} "
                    f"| {r['intercepts_preserved']} / {r['intercepts_discarded']} / "
                    f"{r['intercepts_swapped']} | {r['num_preemptions']} |",
                    flush=True,
                )
    if args.out is not None:
        with args.out.open("a") as f:
            for r in rows:
                f.write(json.dumps({"model": args.model, "gpu": args.gpu, **r}) + "\n")


if __name__ == "__main__":
    main()
