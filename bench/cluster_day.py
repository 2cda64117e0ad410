"""A day of a multi-model cluster at production density (issue 19). Prints Markdown.

    python bench/cluster_day.py day              # 1M requests, 2x8 H100, 4 models, WarmServe
    python bench/cluster_day.py day --requests 200000 --repeats 1   # quicker iteration
    python bench/cluster_day.py rss              # peak RSS: 1 day vs 14 days of ServeGen
    python bench/cluster_day.py scale            # cost vs days (1/2/4) and GPUs (16/64/256)

Every run is a fresh subprocess (so ``ru_maxrss`` is that run's peak RSS) and prints its wall
time, CPU time (``time.process_time``: robust to the other jobs on a shared machine), events,
peak RSS and the digest of its results (:func:`tidal.report.digest.result_digest`: equal
digests before and after a change mean identical results). Medians of ``--repeats`` runs;
``uptime`` load averages beside them. Workload: the ServeGen mix (one pool's 10-minute rate
series per model, Poisson arrivals, the pools' length quantiles), total rate
``requests / (days · 86400)``, α = 1, seed 0.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

from _common import PINNED_PERF_MODEL

FOUR = ["llama-2-7b", "llama-2-7b", "llama-2-13b", "llama-2-70b"]


def fleet_models(num_models: int) -> list[str]:
    """``num_models`` models cycling through the four of the 16-GPU fleet (distinct names)."""
    return [FOUR[i % 4] for i in range(num_models)]


def raw_config(
    spec: str, models: list[str], days: float, rate: float, placement: str
) -> dict[str, Any]:
    return {
        "workload": {"trace": "servegen/servegen_aggregate_rate_10min.csv.gz"},
        "cluster": {
            "spec": spec,
            "perf_model": PINNED_PERF_MODEL,
            "models": models,
            "placement": placement,
            "mix": {"kind": "servegen", "days": days, "rate": rate, "alpha": 1.0},
        },
    }


def config(spec: str, models: list[str], days: float, rate: float, placement: str) -> Any:
    from tidal.sim.config import load_config

    return load_config(raw_config(spec, models, days, rate, placement))


def once(args: argparse.Namespace) -> None:
    from tidal.report.digest import result_digest
    from tidal.sim.run import run_simulation

    models = fleet_models(args.models)
    cfg = config(args.spec, models, args.days, args.rate, args.placement)
    w0, c0 = time.perf_counter(), time.process_time()
    res = run_simulation(cfg)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = {
        "wall_s": wall,
        "cpu_s": cpu,
        "simulate_s": res.run_info["simulate_s"],
        "requests": res.metrics["num_requests"],
        "events": res.run_info["num_events"],
        "peak_rss_mib": rss / 2**20,
        "digest": result_digest(res)[:16],
        "instance_starts": res.metrics["instance_starts"],
        "ttft_p99_s": res.metrics["ttft_p99_s"],
    }
    print(json.dumps(out))


def run_once(spec: str, models: int, days: float, rate: float, placement: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "once", "--spec", spec, "--models", str(models)]
    cmd += ["--days", str(days), "--rate", repr(rate), "--placement", placement]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ)
    return json.loads(out.stdout.strip().splitlines()[-1])


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def measured(spec: str, models: int, days: float, rate: float, placement: str, repeats: int):
    runs = [run_once(spec, models, days, rate, placement) for _ in range(repeats)]
    digests = {r["digest"] for r in runs}
    if len(digests) != 1:
        raise SystemExit(f"runs disagree: {digests}")
    med = {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "cpu_s", "peak_rss_mib")}
    return runs, med


HEADER = "| fleet | models | days | requests | events | wall s (median) | CPU s | peak RSS MiB | "
HEADER += "req / CPU-s | digest |\n|---|---|---|---|---|---|---|---|---|---|"


def row(spec: str, models: int, days: float, runs: list[dict[str, Any]], med: dict) -> str:
    r = runs[0]
    walls = ", ".join(f"{x['wall_s']:.1f}" for x in runs)
    return (
        f"| {spec} | {models} | {days:g} | {r['requests']:,} | {r['events']:,} | "
        f"{med['wall_s']:.1f} ({walls}) | {med['cpu_s']:.1f} | {med['peak_rss_mib']:.0f} | "
        f"{r['requests'] / med['cpu_s']:,.0f} | {r['digest']} |"
    )


def day(args: argparse.Namespace) -> None:
    rate = args.requests / (args.days * 86400)
    print(f"load before: {load()}\n")
    print(HEADER)
    runs, med = measured(args.spec, args.models, args.days, rate, args.placement, args.repeats)
    print(row(args.spec, args.models, args.days, runs, med))
    print(f"\nload after: {load()}")


def rss(args: argparse.Namespace) -> None:
    """Peak RSS of 1 and 14 days at the same rate (the long-run bench's 0.5 req/s default),
    and of 14 days with the 1-day run's request count (rate / 14): the span alone."""
    print(f"load before: {load()}\n")
    print(HEADER)
    for days, rate in ((1.0, args.rate), (14.0, args.rate), (14.0, args.rate / 14)):
        if args.only_span and rate == args.rate:
            continue
        runs, med = measured(args.spec, args.models, days, rate, args.placement, 1)
        print(row(args.spec, args.models, days, runs, med))
        sys.stdout.flush()
    print(f"\nload after: {load()}")


def scale(args: argparse.Namespace) -> None:
    """Cost vs simulated days on 16 GPUs, and vs fleet size (GPUs and models grow together,
    requests per GPU fixed) for one day: linear means constant requests per CPU-second."""
    per_gpu_day = args.requests / 16
    print(f"load before: {load()}\n")
    print(HEADER)
    cells = [("2x8:h100", 4, d) for d in (1.0, 2.0, 4.0)]
    cells += [("8x8:h100", 16, 1.0), ("32x8:h100", 32, 1.0)]
    for spec, models, days in cells:
        gpus = int(spec.split("x")[0]) * 8
        rate = per_gpu_day * gpus / 86400
        runs, med = measured(spec, models, days, rate, args.placement, 1)
        print(row(spec, models, days, runs, med))
        sys.stdout.flush()
    print(f"\nload after: {load()}")


FLEET_PLACEMENTS = ["warmserve", "serverlessllm", "muxserve", "dedicated"]


def fleet(args: argparse.Namespace) -> None:
    """The four placements on one fleet (default 32 nodes of 8 H100, 32 models, one day at
    50,000 requests per 16 GPUs), run as a sweep (``tidal.experiments.sweep``: a process pool
    or Ray, resumable; ``--out`` keeps the cells). Prints each placement's P99 TTFT, SLO
    attainment and GPU-hours beside the sweep's wall time and each cell's CPU time."""
    from tidal.experiments.sweep import run_sweep

    spec = args.spec if args.spec != "2x8:h100" else "32x8:h100"
    models = args.models if args.models != 4 else 32
    gpus = int(spec.split("x")[0]) * int(spec.split("x")[1].split(":")[0])
    rate = args.requests / 16 * gpus / (args.days * 86400)
    base = raw_config(spec, fleet_models(models), args.days, rate, "warmserve")
    print(f"load before: {load()}\n")
    out = run_sweep(
        base, {"cluster.placement": FLEET_PLACEMENTS}, args.out, args.backend, args.workers
    )
    print(
        "| placement | requests | P99 TTFT s | SLO attainment | GPU-hours | instance starts "
        "| events | cell wall s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for cell in out.cells:
        cell_dir = out.out_dir / "cells" / cell.cell_id
        m = json.loads((cell_dir / "summary.json").read_text())["metrics"]
        info = json.loads((cell_dir / "run.json").read_text())
        print(
            f"| {cell.values['cluster.placement']} | {m['num_requests']:,} | "
            f"{m['ttft_p99_s']:.3f} | {m['slo_attainment']:.3f} | "
            f"{m['gpu_seconds'] / 3600:,.0f} | {m['instance_starts']:,} | "
            f"{info['num_events']:,} | {info['wall_s']:.1f} |"
        )
    print(
        f"\n{spec}, {models} models, {args.days:g} day(s), {rate:.2f} req/s; sweep wall "
        f"{out.wall_s:.1f} s ({args.backend}, {args.workers} workers; {len(out.ran)} ran, "
        f"{len(out.reused)} reused)\nload after: {load()}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["day", "rss", "scale", "once", "fleet"])
    ap.add_argument(
        "--requests",
        type=int,
        default=None,
        help="requests per day (day, scale: default 1,000,000; fleet: per 16 GPUs, default 50,000)",
    )
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--rate", type=float, default=0.5, help="req/s (rss, once)")
    ap.add_argument("--spec", default="2x8:h100")
    ap.add_argument("--models", type=int, default=4)
    ap.add_argument("--placement", default="warmserve")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="bench/out/fleet-sweep", help="fleet: sweep directory")
    ap.add_argument("--backend", default="process", choices=["process", "ray", "serial"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only-span", action="store_true", help="rss: only the equal-count run")
    args = ap.parse_args()
    if args.requests is None:
        args.requests = 50_000 if args.what == "fleet" else 1_000_000
    {"day": day, "rss": rss, "scale": scale, "once": once, "fleet": fleet}[args.what](args)


if __name__ == "__main__":
    main()
