"""Prefix caching on the synthetic workloads of issue 14, caching on against off in one run:
shared system prompts, multi-turn sessions, parallel sampling n, agent chains (KV vs text).

Llama-3.1-8B on one H100, vLLM defaults. Each row: hit rate, TTFT p50/p90/mean, prefill
tokens computed (Σ prompt − Σ cached at first admission), throughput.

    python bench/prefix_workloads.py
"""

from __future__ import annotations

import os
from typing import Any

from _common import PINNED_PERF_MODEL, md_table, save

from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

BASE = {"length_dist": "empirical:sharegpt", "num_requests": 2000}
CASES: dict[str, dict[str, Any]] = {
    "shared prefix G=8, L=2048, 5 req/s": {
        "rate": 5.0,
        "shared_prefix_groups": 8,
        "shared_prefix_len": 2048,
    },
    "sessions 5 turns, think 5 s, 0.5 sessions/s": {"rate": 0.5, "turns": 5, "think_time_s": 5.0},
    "parallel n=4, 2 prompts/s": {"rate": 2.0, "n": 4, "num_requests": 500},
    "agents 4, handoff kv, 0.7 chains/s": {"rate": 0.7, "turns": 4, "handoff": "kv"},
    "agents 4, handoff text, 0.7 chains/s": {"rate": 0.7, "turns": 4, "handoff": "text"},
}


def main() -> None:
    rows, data = [], {"load": os.getloadavg()}
    for name, w in CASES.items():
        for caching in (False, True):
            cfg = load_config(
                {"workload": {**BASE, **w}, "memory": {"prefix_caching": caching}, "seed": 1,
                 "perf_model": PINNED_PERF_MODEL}
            )
            res = run_simulation(cfg)
            m, c = res.metrics, res.columns
            computed = int(c["prompt_len"].sum() - c["cached_tokens"].sum())
            data[f"{name} / {'on' if caching else 'off'}"] = {**m, "prefill_computed": computed}
            rows.append(
                [
                    name,
                    "on" if caching else "off",
                    f"{m['prefix_cache_hit_rate']:.3f}",
                    f"{m['ttft_p50_s']:.3f}",
                    f"{m['ttft_p90_s']:.3f}",
                    f"{m['ttft_mean_s']:.3f}",
                    f"{computed:,}",
                    f"{m['request_throughput']:.2f}",
                ]
            )
    header = ["workload", "cache", "hit rate", "TTFT p50 s", "p90 s", "mean s", "prefill", "req/s"]
    print(md_table(header, rows))
    print(f"load average: {os.getloadavg()}")
    save("prefix_workloads", data)


if __name__ == "__main__":
    main()
