"""Cache-aware routing (issue 14, item 6): R replicas behind round-robin, least-loaded and
prefix-aware routers, on a shared-system-prompt workload (Llama-3.1-8B on H100 replicas).

    python bench/prefix_router.py [--replicas 4] [--groups 200] [--rate 12]
"""

from __future__ import annotations

import argparse
import os

from _common import PINNED_PERF_MODEL, md_table, save

from tidal.experiments.replicas import run_replicated
from tidal.sim.config import load_config


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--groups", type=int, default=200)
    ap.add_argument("--prefix", type=int, default=4096)
    ap.add_argument("--rate", type=float, default=12.0)
    ap.add_argument("--requests", type=int, default=6000)
    args = ap.parse_args()
    workload = {
        "num_requests": args.requests,
        "rate": args.rate,
        "length_dist": "empirical:sharegpt",
        "shared_prefix_groups": args.groups,
        "shared_prefix_len": args.prefix,
    }
    rows, data = [], {"args": vars(args)}
    for router in ("round-robin", "least-loaded", "prefix-aware"):
        cfg = load_config({"workload": workload, "seed": 1, "perf_model": PINNED_PERF_MODEL})
        res = run_replicated(cfg, args.replicas, router)
        m, c = res.metrics, res.columns
        data[router] = {k: m[k] for k in ("ttft_p50_s", "ttft_p90_s", "ttft_mean_s")}
        data[router]["cached_share"] = float(c["cached_tokens"].sum() / c["prompt_len"].sum())
        rows.append(
            [
                router,
                f"{data[router]['cached_share']:.3f}",
                f"{m['ttft_p50_s']:.3f}",
                f"{m['ttft_p90_s']:.3f}",
                f"{m['ttft_mean_s']:.3f}",
                f"{m['request_throughput']:.2f}",
            ]
        )
    print(md_table(["router", "cached / prompt", "TTFT p50 s", "p90 s", "mean s", "req/s"], rows))
    print(f"load average: {os.getloadavg()}")
    save("prefix_router", data)


if __name__ == "__main__":
    main()
