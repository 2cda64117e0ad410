"""A sweep of 100 cells of 10,000 requests each on this machine: wall time, process pool vs
serial, and a resumed re-run (issue 7).

    python bench/sweep_100.py [--repeats 3] [--workers 2] [--requests 10000]

Cells: Llama-3.1-8B on one H100, ShareGPT lengths, Poisson arrivals; the grid is
workload.rate ∈ {1, 2, …, 10} req/s × scheduler.token_budget ∈ {512, 1024, 2048, 4096, 8192}
× scheduler.max_seqs ∈ {128, 256} (the instance saturates at about 7 req/s, so the upper
rates are overloaded). Every repeat starts from an empty directory, except the resume run,
which re-runs the finished sweep (every cell reused). The serial and pool sweeps must give
byte-identical ``results.parquet``; the benchmark checks it.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _common import PINNED_PERF_MODEL, md_table, save

from tidal.experiments.sweep import run_sweep

GRID = {
    "workload.rate": list(range(1, 11)),
    "scheduler.token_budget": [512, 1024, 2048, 4096, 8192],
    "scheduler.max_seqs": [128, 256],
}


def base(requests: int) -> dict:
    return {
        "model": "llama-3.1-8b",
        "gpu": "h100",
        "perf_model": PINNED_PERF_MODEL,
        "workload": {"num_requests": requests, "length_dist": "empirical:sharegpt"},
        "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
        "seed": 1,
    }


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process and its reaped children."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(cfg: dict, out: Path, backend: str, workers: int | None) -> tuple[float, float, object]:
    t0, c0 = time.perf_counter(), _cpu_s()
    res = run_sweep(cfg, GRID, out, backend=backend, workers=workers)
    return time.perf_counter() - t0, _cpu_s() - c0, res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--skip-serial", action="store_true")
    args = ap.parse_args()
    cfg = base(args.requests)
    root = Path(tempfile.mkdtemp(prefix="tidal-sweep-bench-"))
    modes = [("process", args.workers)] + ([] if args.skip_serial else [("serial", None)])
    times: dict[str, list[float]] = {m: [] for m, _ in modes}
    cpu: dict[str, list[float]] = {m: [] for m, _ in modes}
    resume: list[float] = []
    results: dict[str, bytes] = {}
    try:
        for rep in range(args.repeats):
            for mode, workers in modes:
                out = root / f"{mode}-{rep}"
                wall, used, res = timed(cfg, out, mode, workers)
                assert len(res.ran) == 100, (len(res.ran), res.failed)
                times[mode].append(wall)
                cpu[mode].append(used)
                results[mode] = (out / "results.parquet").read_bytes()
                print(f"repeat {rep} {mode}: {wall:.1f} s wall, {used:.1f} s CPU", flush=True)
            wall, _, res = timed(cfg, root / f"process-{rep}", "process", args.workers)
            assert len(res.reused) == 100
            resume.append(wall)
        if "serial" in results:
            assert results["serial"] == results["process"], "pool and serial results differ"
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load = os.getloadavg()
    rows = []
    for mode, workers in modes:
        med = statistics.median(times[mode])
        label = f"process pool, {workers} workers" if mode == "process" else "serial"
        rows.append(
            [
                label,
                f"{med:.1f}",
                ", ".join(f"{t:.1f}" for t in times[mode]),
                f"{statistics.median(cpu[mode]):.1f}",
                f"{100 * args.requests / med:,.0f}",
            ]
        )
    rows.append(
        [
            "re-run (all 100 cells reused)",
            f"{statistics.median(resume):.2f}",
            ", ".join(f"{t:.2f}" for t in resume),
            "—",
            "—",
        ]
    )
    head = ["sweep of 100 cells", "median wall s", "runs", "median CPU s", "simulated req / wall s"]
    print(md_table(head, rows))
    print(f"load average after: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; cpus: {os.cpu_count()}")
    save(
        "sweep_100",
        {
            "requests_per_cell": args.requests,
            "times": times,
            "cpu_s": cpu,
            "resume": resume,
            "workers": args.workers,
            "loadavg": load,
        },
    )


if __name__ == "__main__":
    main()
