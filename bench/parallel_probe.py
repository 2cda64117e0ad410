"""Parallel-Probe's saved tokens against all branches to completion (majority voting).

The paper's setting (SC@64 on AIME/HMMT, Qwen3, 32k-token budget): 30 questions × 64 branches,
branch lengths lognormal (median 14k, σ 0.6) capped at 32,768 tokens; probes every 500 tokens,
T = 40, patience 7, warm-up 15. Part 1: token counts from the controller (5 seeds × agreement
0.5/0.7/0.9 of the answer model); part 2: the same workload through the simulator (Llama-3.1-8B
on one H100, prefix caching on, one question every 2000 s on average), all vs parallel-probe.

    python bench/parallel_probe.py
"""

from __future__ import annotations

import os
from statistics import median

import numpy as np
from _common import md_table, save

from tidal.sim.config import load_config
from tidal.sim.run import run_simulation
from tidal.workload.parallel_probe import ParallelProbeOptions, probe_groups, token_savings

QUESTIONS, WIDTH, BUDGET = 30, 64, 32_768
WORKLOAD = {
    "num_requests": QUESTIONS,
    "rate": 0.0005,
    "prompt_len": 200,
    "output_len": 14_000,
    "length_dist": "lognormal",
    "length_sigma": 0.6,
    "max_output_len": BUDGET,
    "n": WIDTH,
}


def controller_table(data: dict) -> list[list[str]]:
    rows = []
    for agreement in (0.5, 0.7, 0.9):
        seqs, tots = [], []
        for seed in range(5):
            rng = np.random.default_rng(seed)
            full = np.minimum(
                rng.lognormal(np.log(14_000), 0.6, (QUESTIONS, WIDTH)).astype(np.int64), BUDGET
            )
            done = probe_groups(full, ParallelProbeOptions(agreement=agreement), rng)
            s, t = token_savings(full, done)
            seqs.append(s)
            tots.append(t)
        data[f"agreement {agreement}"] = {"sequential": seqs, "total": tots}
        rows.append(
            [
                f"{agreement}",
                f"{median(seqs):.1%}",
                f"{min(seqs):.1%}–{max(seqs):.1%}",
                f"{median(tots):.1%}",
                f"{min(tots):.1%}–{max(tots):.1%}",
            ]
        )
    return rows


def simulator_table(data: dict) -> list[list[str]]:
    rows, base = [], {}
    for policy in ("all", "parallel-probe"):
        cfg = load_config({"workload": {**WORKLOAD, "branch_policy": policy}, "seed": 1,
                           "perf_model": "auto-vidur"})  # the recorded results' step model
        res = run_simulation(cfg)
        c, m = res.columns, res.metrics
        out = c["output_tokens"].reshape(QUESTIONS, WIDTH)
        lat = (c["finish_ns"] - c["arrival_ns"]).reshape(QUESTIONS, WIDTH).max(axis=1) / 1e9
        rec = {
            "decode_tokens": int(out.sum()),
            "sequential_tokens": int(out.max(axis=1).sum()),
            "question_latency_mean_s": float(lat.mean()),
            "hit_rate": m["prefix_cache_hit_rate"],
        }
        base.setdefault("ref", rec)
        data[f"sim {policy}"] = rec
        ref = base["ref"]
        rows.append(
            [
                policy,
                f"{rec['decode_tokens']:,}",
                f"{rec['sequential_tokens']:,}",
                f"{1 - rec['sequential_tokens'] / ref['sequential_tokens']:.1%}",
                f"{1 - rec['decode_tokens'] / ref['decode_tokens']:.1%}",
                f"{rec['question_latency_mean_s']:.1f}",
                f"{rec['hit_rate']:.3f}",
            ]
        )
    return rows


def main() -> None:
    data: dict = {"load": os.getloadavg()}
    print(
        md_table(
            ["agreement", "seq saved (median)", "range", "total saved", "range"],
            controller_table(data),
        )
    )
    print()
    print(
        md_table(
            [
                "policy",
                "decode tokens",
                "sequential",
                "seq saved",
                "total saved",
                "question latency s",
                "hit rate",
            ],
            simulator_table(data),
        )
    )
    print(f"load average: {os.getloadavg()}")
    save("parallel_probe", data)


if __name__ == "__main__":
    main()
