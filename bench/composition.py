"""The papers' policies composed (issue 7): AugServe / INFERCEPT interception over MB, EB and
EB⁺ batching on one instance, INFERCEPT's six-type mixture (the issue-4 protocol: GPT-J-6B on
one A100-80GB, INFERCEPT's measured step times and swap budget, 128 GB host swap, Poisson
arrivals for an 1800 s window, TTFT SLO 1 s).

    nice python bench/composition.py [--rates 2,3,4] [--window 1800]

Prints one Markdown table (effective req/s, p99 TTFT, p50 normalized latency, EB⁺'s mode
switches and share of time in EB) and writes ``bench/out/composition.json``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _common import PINNED_PERF_MODEL, md_table, save

from tidal.sim.config import load_config
from tidal.sim.run import run_simulation


def run_one(rate: float, window: float, batching: str, policy: str) -> dict[str, Any]:
    cfg = load_config(
        {
            "model": "gpt-j-6b",
            "gpu": "a100-80gb",
            "perf_model": PINNED_PERF_MODEL,
            "workload": {
                "augmented": "infercept-mix",
                "num_requests": round(rate * window),
                "rate": rate,
            },
            "scheduler": {"batching": batching},
            "augment": {"serving_policy": policy, "swap_space_gb": 128},
            "slo": {"ttft_s": 1.0},
        }
    )
    t0 = time.perf_counter()
    m = run_simulation(cfg).metrics
    return {
        "rate": rate,
        "batching": batching,
        "policy": policy,
        "effective_throughput": m["effective_throughput"],
        "ttft_p99_s": m["ttft_p99_s"],
        "normalized_latency_p50_s": m["normalized_latency_p50_s"],
        "mode_switches": m.get("mode_switches"),
        "eb_time_share": m.get("eb_time_share"),
        "num_preemptions": m.get("num_preemptions"),
        "wall_s": time.perf_counter() - t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rates", default="2,3,4")
    ap.add_argument("--window", type=float, default=1800.0)
    ap.add_argument("--policies", default="infercept,augserve")
    args = ap.parse_args()
    rows = []
    for rate in (float(r) for r in args.rates.split(",")):
        for policy in args.policies.split(","):
            base = None
            for batching in ("mb", "eb", "ebplus"):
                r = run_one(rate, args.window, batching, policy)
                base = base or r["effective_throughput"]
                r["vs_mb"] = r["effective_throughput"] / base - 1 if base else 0.0
                rows.append(r)
                print(r, flush=True)
    table = md_table(
        [
            "rate",
            "serving",
            "batching",
            "effective req/s",
            "vs MB",
            "TTFT p99 s",
            "norm. latency p50 ms/tok",
            "EB⁺ switches",
            "time in EB",
            "sim wall s",
        ],
        [
            [
                f"{r['rate']:g}",
                r["policy"],
                r["batching"],
                f"{r['effective_throughput']:.3f}",
                f"{r['vs_mb']:+.1%}",
                f"{r['ttft_p99_s']:.3g}",
                f"{r['normalized_latency_p50_s'] * 1e3:.1f}",
                "—" if r["mode_switches"] is None else r["mode_switches"],
                "—" if r["eb_time_share"] is None else f"{r['eb_time_share']:.2f}",
                f"{r['wall_s']:.1f}",
            ]
            for r in rows
        ],
    )
    print(table)
    save("composition", {"rows": rows, "args": vars(args)})


if __name__ == "__main__":
    main()
