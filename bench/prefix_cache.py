"""Prefix caching on the Mooncake FAST'25 traces (issue 14): hit rates, TTFT with and without
caching, and the simulator's speed with caching on against off, measured in one run.

Setting: Llama-3.1-8B on one H100 (the memory plan's KV cache), vLLM defaults (token budget
8192, 256 sequences), both traces replayed at their timestamps (synthetic prompts capped at
120k tokens to fit the model's context). Three caches per trace: off (``--no-prefix-caching``),
on (the real cache), and an infinite one (20M blocks). Speed: median over ``--repeats`` of the
simulation phase alone (workload loading excluded, identical for both), off and on interleaved.

    python bench/prefix_cache.py [--repeats 3] [--rate-scale 1.0]
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

from _common import PINNED_PERF_MODEL, md_table, save

from tidal.sim.config import load_config
from tidal.sim.run import load_requests, run_simulation
from tidal.workload.paths import traces_dir

TRACES = ("conversation", "synthetic")


def config(name: str, rate_scale: float, **memory: Any) -> Any:
    path = traces_dir() / "mooncake_fast25" / f"{name}_trace.jsonl.gz"
    workload = {"trace": str(path), "max_prompt_len": 120_000, "rate_scale": rate_scale}
    return load_config({"workload": workload, "memory": memory, "perf_model": PINNED_PERF_MODEL})


def row(name: str, cache: str, res: Any) -> list[Any]:
    m = res.metrics
    return [
        name,
        cache,
        f"{m['prefix_cache_hit_rate']:.3f}",
        f"{m['ttft_p50_s']:.2f}",
        f"{m['ttft_p90_s']:.2f}",
        f"{m['ttft_mean_s']:.2f}",
        m["num_preemptions"],
        f"{m['request_throughput']:.3f}",
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rate-scale", type=float, default=1.0)
    args = ap.parse_args()
    rows, data = [], {"load": os.getloadavg(), "rate_scale": args.rate_scale}
    for name in TRACES:
        cfgs = {
            "off": config(name, args.rate_scale, prefix_caching=False),
            "on": config(name, args.rate_scale),
            "infinite": config(name, args.rate_scale, num_blocks=20_000_000),
        }
        reqs = load_requests(cfgs["on"])
        times: dict[str, list[float]] = {"off": [], "on": []}
        results = {}
        for _ in range(args.repeats):
            for cache in ("off", "on"):
                res = run_simulation(cfgs[cache], reqs)
                times[cache].append(res.run_info["simulate_s"])
                results[cache] = res
        results["infinite"] = run_simulation(cfgs["infinite"], reqs)
        med = {k: statistics.median(v) for k, v in times.items()}
        data[name] = {
            "simulate_s": times,
            "median_simulate_s": med,
            "speed_on_over_off": med["off"] / med["on"],
            **{
                cache: {
                    k: results[cache].metrics[k]
                    for k in (
                        "prefix_cache_hit_rate",
                        "prefix_cache_hits",
                        "prefix_cache_queries",
                        "ttft_p50_s",
                        "ttft_p90_s",
                        "ttft_mean_s",
                        "num_preemptions",
                        "request_throughput",
                    )
                }
                for cache in results
            },
        }
        for cache in ("off", "on", "infinite"):
            rows.append(row(name, cache, results[cache]))
        print(
            f"{name}: simulate median off {med['off']:.2f} s, on {med['on']:.2f} s, "
            f"speed on/off {med['off'] / med['on']:.2f}x"
        )
    header = ["trace", "cache", "hit rate", "TTFT p50 s", "p90 s", "mean s", "preempt", "req/s"]
    print(md_table(header, rows))
    print(f"load average at the end: {os.getloadavg()}")
    save("prefix_cache", data)


if __name__ == "__main__":
    main()
