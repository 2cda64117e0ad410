"""Side by side with the peer simulator Vidur (microsoft/vidur, MLSys 2024) on one workload.

Vidur is not a dependency and none of its code is here: it runs from its own venv outside the
repository, in a peer folder set up as ``docs/research/vidur.md`` §2 describes (``$VIDUR_PEER``,
default ``../vidur-peer`` beside the checkout). Its snapshot only ships an attention profile for
CodeLlama-34B on A100 (TP 2), so both simulators model that deployment: Sarathi-style chunked
prefill with chunk (token budget) 512 and a batch cap of 128, 10,000 requests with ShareGPT lengths
(capped at 4,096 tokens the way Vidur does), Poisson arrivals at ~80% of Vidur's measured capacity.
Tidal replays Vidur's exact arrival times and lengths (its ``requests_used.csv``).

    python bench/vidur_compare.py [--vidur-run DIR] [--rerun-vidur] [--repeats 5]

``--rerun-vidur`` re-times Vidur (warm predictor cache) in the same session via the peer's
``run_vidur.sh``; otherwise the timings recorded in DIR are used.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
from _common import PINNED_PERF_MODEL, md_table, median_time, save

from tidal.sim.config import SimulationConfig
from tidal.sim.run import run_simulation
from tidal.workload.base import RequestSet

PEER = Path(os.environ.get("VIDUR_PEER", Path(__file__).resolve().parents[2] / "vidur-peer"))
DEFAULT_RUN = PEER / "results" / "qps1.47_c512_n10000"


def load_vidur_workload(run: Path) -> RequestSet:
    df = pl.read_csv(run / "requests_used.csv").sort("arrived_at", maintain_order=True)
    t = np.rint(df["arrived_at"].to_numpy() * 1e9).astype(np.int64)
    return RequestSet(
        t,
        df["num_prefill_tokens"].to_numpy().astype(np.int64),
        df["num_decode_tokens"].to_numpy().astype(np.int64),
        f"vidur {run.name}",
    )


def vidur_timings(run: Path) -> dict[str, float]:
    phases = json.loads((run / "phases.json").read_text()) if (run / "phases.json").exists() else {}
    out = {k: float(v) for k, v in phases.items() if isinstance(v, int | float)}
    cli = run / "time_cli.txt"
    if cli.exists():
        text = cli.read_text()
        m = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", text)
        if m:
            h, mnt, sec = m.groups()
            out["process_wall_s"] = int(h or 0) * 3600 + int(mnt) * 60 + float(sec)
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
        if rss:
            out["peak_rss_mib"] = int(rss.group(1)) / 1024
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vidur-run", type=Path, default=DEFAULT_RUN)
    ap.add_argument("--rerun-vidur", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    run = args.vidur_run
    if args.rerun_vidur:
        out = PEER / "results" / "bench_rerun"
        subprocess.run([str(PEER / "run_vidur.sh"), str(out)], check=True, capture_output=True)
        run = out
    vidur = json.loads((run / "summary.json").read_text())
    vt = vidur_timings(run)
    reqs = load_vidur_workload(run)
    cfg = SimulationConfig.model_validate(
        {
            "model": "codellama-34b",
            "gpu": "a100-80gb",
            "tp": 2,
            "perf_model": PINNED_PERF_MODEL,
            "scheduler": {"batching": "mb", "token_budget": 512, "max_seqs": 128},
            "workload": {"num_requests": len(reqs), "rate": 1.0},  # replaced by `reqs`
        }
    )
    med, times, res = median_time(lambda: run_simulation(cfg, reqs), args.repeats)
    sim_s = res.run_info["simulate_s"]
    m = res.metrics
    n = len(reqs)
    v_run = vt.get("run_s") or vt.get("sim_run_s")
    rows = [
        [
            "simulated requests / wall s (event loop)",
            f"{n / v_run:,.0f}" if v_run else "—",
            f"{n / sim_s:,.0f}",
        ],
        ["wall s, event loop", f"{v_run:.2f}" if v_run else "—", f"{sim_s:.3f}"],
        [
            "wall s, whole run (median)",
            f"{vt.get('process_wall_s', float('nan')):.1f}",
            f"{med:.3f}",
        ],
        ["one-off predictor training", "21 min 47 s (cached after)", "none"],
        [
            "TTFT p50 / p90 / p99 s",
            "{p50:.2f} / {p90:.2f} / {p99:.2f}".format(**vidur["ttft_s"]),
            f"{m['ttft_p50_s']:.2f} / {m['ttft_p90_s']:.2f} / {m['ttft_p99_s']:.2f}",
        ],
        [
            "E2E p50 / p90 / p99 s",
            "{p50:.1f} / {p90:.1f} / {p99:.1f}".format(**vidur["e2e_s"]),
            f"{m['e2e_p50_s']:.1f} / {m['e2e_p90_s']:.1f} / {m['e2e_p99_s']:.1f}",
        ],
        [
            "TPOT p50 / p99 ms",
            "{p50:.1f} / {p99:.1f}".format(**vidur["tpot_ms"]),
            f"{m['tpot_p50_s'] * 1e3:.1f} / {m['tpot_p99_s'] * 1e3:.1f}",
        ],
        ["throughput req/s", f"{vidur['throughput_req_s']:.3f}", f"{m['request_throughput']:.3f}"],
        ["preemptions", str(vidur.get("restarts_total", "—")), str(m["num_preemptions"])],
    ]
    speedup = (sim_s and v_run) and (v_run / sim_s)
    print(f"workload: {n:,} requests replayed from {run}")
    print(md_table(["", "Vidur", "Tidal"], rows))
    if speedup:
        print(f"event-loop speed ratio Tidal / Vidur: {speedup:.0f}x")
    save(
        "vidur_compare",
        {
            "vidur": vidur,
            "vidur_timings": vt,
            "tidal_metrics": m,
            "tidal_wall_s": times,
            "tidal_simulate_s": sim_s,
            "speedup_event_loop": speedup,
        },
    )


if __name__ == "__main__":
    main()
