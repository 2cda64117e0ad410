"""Replay of NVIDIA's measured disaggregated serving points (issue 29): every vLLM and SGLang
``disagg`` row of ``systems/silicon_sample.csv`` (aiconfigurator-core) that Tidal can express as
a prefill pool + decode pool deployment, as a closed loop at the row's concurrency, against the
measured mean TTFT and TPOT.

    python bench/silicon_disagg.py [--perf-model engine] [--engine row|vllm|sglang|default]
                                   [--engine-version row|default|X] [--limit N]
                                   [--filter REGEX] [--range-ratio 0.8] [--workers 2]
                                   [--prefill-batch row|engine]
                                   [--request-overhead dynamo|auto|vllm-proxy|0|MS]
                                   [--row-timeout 600] [--max-concurrency N] [--tag NAME]

The client is ``bench/silicon.py``'s (InferenceX's ``benchmark_serving.py``: C clients, ``10·C``
prompts, lengths uniform on ``[⌊0.8·L⌋, L]``); the 2·C warm-ups are not replayed: the
simulator's deployment refuses warm-up phases, and with prefix caching off and the
engine's own (stateless) step model a drained warm-up leaves the pools as they start. The row
→ config mapping (pools, DP/EP, batch sizes, KV connector) and the skip groups are
``bench/silicon_disagg_rows.py``'s. TTFT compared: the client-side one where the run reports it
(``perf_model: engine``), which includes the KV transfer and the decode side's first step;
``--request-overhead`` sets the deployments' ``request_overhead_ms`` (default ``dynamo``: the
rows were served by NVIDIA Dynamo — InferenceX's ``dynamo-sglang`` / ``dynamo-vllm``
frameworks — whose disaggregated path's per-request latency is measured,
``sim/disagg_overhead.py``; ``auto`` takes each engine's own measurement; ``0`` replays as
session 30 did).

Prints coverage (rows run / rows, skipped rows by group and reason), the median |error| of TTFT
and TPOT and the rows off by more than 2×, overall and by engine, GPU, model, precision,
ISL/OSL and P:D split; writes ``bench/results/silicon/<tag>.csv.gz`` and ``<tag>.json``. A row
that fails or runs past ``--row-timeout`` is reported under ``error``, never fatal; rows above
``--max-concurrency`` are reported under ``size`` (a 10·C-request closed loop of 100 k requests
on a shared machine).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import silicon
from _common import md_table
from silicon import base_record, finish, plan_ratio, write
from silicon_disagg_rows import DisaggRow, plan_disagg_row, pool_fields, read_disagg_rows
from silicon_rows import Plan, Skip, config_fields, sample_path

GROUPS = ("engine", "gpu", "model", "precision", "isl_osl", "split", "concurrency_recorded")


def run_disagg_plan(args: tuple[Plan, float, int, int]) -> dict[str, Any]:
    """Simulate one row's deployment; errors and timeouts become an ``error`` result."""
    plan, ratio, seed, timeout = args
    row = plan.row
    t0 = time.perf_counter()
    if timeout > 0:
        silicon.signal.signal(silicon.signal.SIGALRM, silicon._alarm)
        silicon.signal.alarm(timeout)
    try:
        from tidal.sim.run import run_simulation

        cfg, note = silicon.load_or_default_version(plan.config)
        if note:
            plan.notes.append(note)
        reqs, _ = silicon.client_requests(row.isl, row.osl, row.concurrency, ratio, seed)
        res = run_simulation(cfg, reqs)
        ttft, tpot = silicon.client_metrics(res.columns)
        client = res.metrics.get("ttft_client_mean_s")
        m = res.metrics
        return {
            "status": "ok",
            "sim_ttft_ms": ttft if client is None else 1e3 * client,
            "sim_tpot_ms": tpot,
            "sim_ttft_engine_ms": ttft,
            "ttft_side": "engine" if client is None else "client",
            "kv_transfer_bytes": m.get("kv_transfer_bytes"),
            "kv_transfer_stall_s": m.get("kv_transfer_stall_s"),
            "perf_model": m.get("perf_model", ""),
            "wall_s": time.perf_counter() - t0,
            "notes": ";".join(plan.notes),
        }
    except Exception as err:  # a row that errors is reported, not fatal
        group = "config" if type(err).__name__ == "ConfigError" else "error"
        msg = str(err).strip().splitlines()
        return {"status": group, "reason": f"{type(err).__name__}: {' '.join(msg)[:300]}"}
    finally:
        if timeout > 0:
            silicon.signal.alarm(0)


def record(d: DisaggRow) -> dict[str, Any]:
    """The row's columns in the per-row CSV."""
    p, q = d.prefill, d.decode
    return {
        **base_record(d.row),
        "isl_osl": f"{d.row.isl}/{d.row.osl}",
        "split": d.split,
        "concurrency_recorded": d.concurrency_recorded,
        "prefill_workers": p.workers, "prefill_tp": p.tp, "prefill_dp": p.attention_dp,
        "prefill_ep": p.moe_ep, "prefill_batch": p.batch,
        "decode_workers": q.workers, "decode_tp": q.tp, "decode_dp": q.attention_dp,
        "decode_ep": q.moe_ep, "decode_batch": q.batch,
    }  # fmt: skip


def summarize(recs: list[dict[str, Any]], total: int) -> dict[str, Any]:
    """Coverage, skip reasons by group, accuracy overall and per :data:`GROUPS`."""
    return silicon.summarize(recs, total, None, GROUPS)


def report(summary: dict[str, Any]) -> str:
    lines = [
        f"rows run: {summary['ran']} of {summary['rows']} vLLM/SGLang disaggregated rows",
        "",
        md_table(["skipped: group", "rows"], [[g, n] for g, n in summary["skipped"].items()]),
        "",
    ]
    for g, reasons in summary["reasons"].items():
        lines.append(f"{g}:")
        lines += [f"  {n:5d}  {why}" for why, n in list(reasons.items())[:12]]
    lines += ["", "overall: " + silicon._acc_line(summary["accuracy"])]
    for g in GROUPS:
        rows = [
            [k, a["rows"], silicon._pct(a.get("ttft_median_abs_err")),
             silicon._pct(a.get("tpot_median_abs_err")), a.get("off_2x", "—")]
            for k, a in summary["by"][g].items()
            if a["rows"]
        ]  # fmt: skip
        if rows:
            head = [g, "rows run", "TTFT |err| med", "TPOT |err| med", "> 2×"]
            lines += ["", md_table(head, rows)]
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--perf-model", default="engine")
    p.add_argument("--engine", default="row", help="row (each row's), default, vllm, sglang")
    p.add_argument("--engine-version", default="row", help="row, default, or a version")
    p.add_argument("--limit", type=int, default=None, help="run at most N of the runnable rows")
    p.add_argument("--filter", default=None, help="regex on id/engine/version/model/gpu/precision")
    p.add_argument("--range-ratio", type=float, default=0.8)
    p.add_argument("--prefill-batch", choices=("row", "engine"), default="row",
                   help="prefill pool max_seqs: the row's prefill batch size, or the engine's "
                   "default")
    p.add_argument("--request-overhead", default="dynamo",
                   help="deployment.request_overhead_ms: dynamo (the rows' serving path, "
                   "measured), auto (by engine: sglang 180, vllm 110), 0 (none: session 30's "
                   "runs) or ms")
    p.add_argument("--max-concurrency", type=int, default=2048,
                   help="rows of a larger C are reported under 'size' (0: no limit)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--row-timeout", type=int, default=600, help="seconds per row (0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tag", default="silicon_disagg")
    return p.parse_args(argv)


def plan_all(a: argparse.Namespace) -> tuple[list[Plan], list[dict[str, Any]], dict, int]:
    """(plans to run, records of the skipped rows, each plan's row record, rows considered)."""
    rows = read_disagg_rows(sample_path())
    if a.filter:
        rows = [d for d in rows if re.search(a.filter, d.text)]
    fields, pfields = config_fields(), pool_fields()
    plans: list[Plan] = []
    recs: list[dict[str, Any]] = []
    base: dict[str, dict[str, Any]] = {}
    for d in rows:
        p = plan_disagg_row(d, fields, pfields, a.perf_model, a.engine, a.engine_version,
                            a.prefill_batch == "row", a.request_overhead)  # fmt: skip
        rec = record(d)
        if isinstance(p, Skip):
            recs.append({**rec, "status": p.group, "reason": p.reason})
        elif a.max_concurrency and d.row.concurrency > a.max_concurrency:
            recs.append({**rec, "status": "size",
                         "reason": f"C {d.row.concurrency} > --max-concurrency"})  # fmt: skip
        else:
            plans.append(p)
            base[d.row.id] = rec
    if a.limit is not None:
        for p in plans[a.limit :]:
            recs.append({**base[p.row.id], "status": "limit", "reason": f"--limit {a.limit}"})
        plans = plans[: a.limit]
    return plans, recs, base, len(rows)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    plans, recs, base, total = plan_all(a)
    t0 = time.perf_counter()
    work = [(p, plan_ratio(p, a.range_ratio), a.seed, a.row_timeout) for p in plans]
    with mp.get_context("spawn").Pool(max(1, a.workers), maxtasksperchild=10) as pool:
        for i, res in enumerate(pool.imap(run_disagg_plan, work, chunksize=1)):
            notes = ";".join(plans[i].notes)
            recs.append(finish({**base[plans[i].row.id], "notes": notes, **res}))
            print(f"  {i + 1}/{len(plans)} rows, {time.perf_counter() - t0:.0f} s", flush=True)
    summary = summarize(recs, total)
    summary["wall_s"] = time.perf_counter() - t0
    print(report(summary))
    write(a.tag, recs, summary, vars(a))
    print(f"\nwrote {silicon.RESULTS / a.tag}.csv.gz and .json ({summary['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
