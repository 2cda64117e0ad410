"""Replay of NVIDIA's measured serving points (issue 28): every vLLM and SGLang aggregated row of
``systems/silicon_sample.csv`` (aiconfigurator-core) that Tidal can run, as a closed loop at the
row's concurrency, against the measured mean TTFT and TPOT.

    python bench/silicon.py [--perf-model auto] [--engine row|vllm|sglang|default]
                            [--engine-version row|default|X] [--limit N] [--filter REGEX]
                            [--range-ratio 0.8] [--no-source-clients] [--workers 2]
                            [--row-timeout 900] [--bf16-fallback] [--override JSON]
                            [--max-prefill-isl-plus N] [--recorded-layout]
                            [--tag NAME] [--moe-distribution balanced|power_law_1.01|power_law_1.2]

Per row: C = ``batch_size`` clients of ``vllm bench serve --max-concurrency C --request-rate
inf`` (all C sent at t = 0, each completion releases its slot to the next request), as the
client that measured the rows ran (InferenceX's ``benchmark_serving.py``; AIConfigurator's own
replay of the sample uses the same workload): ``10·C`` requests with input and output lengths
uniform on ``[⌊r·L⌋, L]``, r = ``--range-ratio`` (0.8 there; 0: fixed lengths; a source whose
measurements show a fixed-length client runs with one: ``silicon_rows.FIXED_LENGTH_SOURCES``,
``--no-source-clients`` turns that off), after ``2·C``
warm-up requests of the first prompt's lengths (``--num-warmups 2·C``) that are not measured.
TTFT and TPOT as vLLM's client computes them: means over requests of ``first token − send`` and
``(E2E − TTFT) / (output − 1)``; the TTFT compared is the simulator's client-side one
(``ttft_client_mean_s``: the engine-side TTFT plus the API server's request path,
``tidal.hardware.api_server``) where the run reports it (the engine tables), else the
engine-side one; both are written per row (``sim_ttft_ms``, ``sim_ttft_engine_ms``, and
``ttft_side`` says which one ``sim_ttft_ms`` is). Server settings the sample does not record:
prefix caching off (InferenceX's recipes of both engines); the engine's defaults once the
simulator has an
``engine`` setting, until then ``silicon_rows.scheduler_defaults``: vLLM 8192 batched tokens
(``vllm serve``'s default on ≥ 70 GiB GPUs but A100; InferenceX sets it too) and C running
requests (InferenceX's ``--max-num-seqs C``), SGLang's ``chunked_prefill_size`` by GPU memory
(8192 below 160 GB, 16384 above) and max(256, C) running. An ``engine_version`` the simulator
refuses is dropped (its newest version then), noted per row.

Prints coverage (rows run / rows, and the skipped rows grouped by reason: gpu, model, arch,
precision, parallelism, config, error), the median |error| of TTFT and TPOT and the rows off
by more than 2× overall and by engine, GPU, model and precision; writes per-row results to
``bench/results/silicon/<tag>.csv.gz`` and a summary ``<tag>.json``. ``--bf16-fallback`` runs
quantized rows with bf16 weights (a smoke test of the harness, not an accuracy number). A row
that fails, or runs past ``--row-timeout`` seconds, is reported under ``error``, never fatal.
``--engine`` / ``--engine-version`` / quantization / PP / DP / EP are passed only where the
config schema has them (the version with ``--perf-model engine`` or ``auto`` only: it selects
tables).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import multiprocessing as mp
import re
import signal
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import md_table
from silicon_rows import Plan, Row, Skip, config_fields, plan_row, read_rows, sample_path

RESULTS = Path(__file__).resolve().parent / "results" / "silicon"
GROUPS = ("engine", "gpu", "model", "precision")


def client_lengths(length: int, n: int, ratio: float, rng: np.random.Generator) -> np.ndarray:
    """InferenceX's ``sample_uniform``: integers uniform on ``[int(L·r), L]`` (r = 0: all L)."""
    if ratio <= 0:
        return np.full(n, length, dtype=np.int64)
    return rng.integers(max(1, int(length * ratio)), length + 1, size=n, dtype=np.int64)


def client_requests(isl: int, osl: int, c: int, ratio: float, seed: int) -> tuple[Any, Any]:
    """(measured, warm-up) request sets of the benchmark client: 10·C and 2·C requests."""
    from tidal.workload.base import RequestSet

    rng = np.random.default_rng(seed)
    n = 10 * c
    prompt = client_lengths(isl, n, ratio, rng)
    output = client_lengths(osl, n, ratio, rng)
    zeros = np.zeros(n, dtype=np.int64)
    reqs = RequestSet(zeros, prompt, output, f"silicon client r={ratio}")
    w = 2 * c
    warm = RequestSet(
        np.zeros(w, np.int64), np.full(w, prompt[0]), np.full(w, output[0]), "warm-up"
    )
    return reqs, warm


def client_metrics(cols: dict[str, np.ndarray]) -> tuple[float, float]:
    """(mean TTFT ms, mean TPOT ms) as ``vllm bench serve`` computes them."""
    ttft = (cols["first_token_ns"] - cols["arrival_ns"]) / 1e6
    out = cols["output_tokens"] if "output_tokens" in cols else cols["output_len"]
    e2e = (cols["finish_ns"] - cols["arrival_ns"]) / 1e6
    many = out > 1
    tpot = (e2e[many] - ttft[many]) / (out[many] - 1)
    return float(ttft.mean()), float(tpot.mean()) if many.any() else 0.0


def plan_ratio(plan: Plan, default: float, by_source: bool = True) -> float:
    """The client's range ratio for a row: its source's where the source fixes it
    (``silicon_rows.FIXED_LENGTH_SOURCES``, noted on the plan) and ``by_source``, else
    ``default`` (``--range-ratio``)."""
    if plan.client_ratio is None or not by_source:
        return float(default)
    plan.notes.append(f"client of the source: range ratio {plan.client_ratio:g}")
    return plan.client_ratio


def apply_override(plan: Plan, override: dict[str, Any]) -> None:
    """``--override``: its keys replace the plan's config keys; a mapping merges one level into
    the plan's mapping of that key (``{"scheduler": {"batching": "mb"}}`` keeps the other
    scheduler keys). Noted on the plan. For what-if replays of a server setting the sample
    does not record (docs/design/sglang_rows.md); the shipped replay uses none."""
    for key, value in override.items():
        old = plan.config.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            plan.config[key] = {**old, **value}
        else:
            plan.config[key] = value
    plan.notes.append("override " + json.dumps(override, sort_keys=True))


def apply_max_prefill_isl_plus(plan: Plan, plus: int) -> None:
    """``--max-prefill-isl-plus N``: an SGLang row's ``scheduler.max_prefill_tokens`` = its
    ISL + N (AIConfigurator's generator launches SGLang with ISL + 1500; whether a source's
    server had it the sample does not record: a what-if, noted). Other engines' rows keep
    their config (vLLM refuses SGLang's flag)."""
    if plan.config.get("engine") == "sglang":
        apply_override(plan, {"scheduler": {"max_prefill_tokens": plan.row.isl + plus}})


def load_or_default_version(config: dict[str, Any]) -> tuple[Any, str]:
    """The validated config; if it names an ``engine_version`` that the simulator refuses,
    the config without it (the simulator's default version) and a note saying so."""
    from tidal.core.errors import ConfigError
    from tidal.sim.config import load_config

    try:
        return load_config(config), ""
    except ConfigError as err:
        if "engine_version" not in config or "engine_version" not in str(err):
            raise
    rest = {k: v for k, v in config.items() if k != "engine_version"}
    return load_config(rest), f"engine_version {config['engine_version']} refused: default used"


class RowTimeoutError(Exception):
    """A row ran past ``--row-timeout``."""


def _alarm(signum: int, frame: Any) -> None:
    raise RowTimeoutError("ran past --row-timeout")


def run_plan(args: tuple[Plan, float, int, int]) -> dict[str, Any]:
    """Simulate one row; any exception (or ``timeout`` s of wall time, 0: none) becomes an
    ``error`` result, never raised."""
    plan, ratio, seed, timeout = args
    row = plan.row
    t0 = time.perf_counter()
    if timeout > 0:
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(timeout)
    try:
        from tidal.sim.phased import run_phases

        cfg, note = load_or_default_version(plan.config)
        if note:
            plan.notes.append(note)
        reqs, warm = client_requests(row.isl, row.osl, row.concurrency, ratio, seed)
        res = run_phases(cfg, [(reqs, row.concurrency)], warm)
        ttft, tpot = client_metrics(res.columns)
        client = res.metrics.get("ttft_client_mean_s")
        return {
            "status": "ok",
            "sim_ttft_ms": ttft if client is None else 1e3 * client,
            "sim_tpot_ms": tpot,
            "sim_ttft_engine_ms": ttft,
            "ttft_side": "engine" if client is None else "client",
            "perf_model": res.metrics.get("perf_model", ""),
            "wall_s": time.perf_counter() - t0,
            "notes": ";".join(plan.notes),
        }
    except Exception as err:  # a row that errors is reported, not fatal
        group = "config" if type(err).__name__ == "ConfigError" else "error"
        msg = str(err).strip().splitlines()
        return {"status": group, "reason": f"{type(err).__name__}: {' '.join(msg)[:300]}"}
    finally:
        if timeout > 0:
            signal.alarm(0)


def base_record(row: Row) -> dict[str, Any]:
    return {
        "id": row.id,
        "source": row.source.split(";")[0].split("/")[-1],
        "engine": row.engine,
        "version": row.version,
        "model": row.model,
        "gpu": row.system,
        "precision": row.precision,
        "isl": row.isl,
        "osl": row.osl,
        "concurrency": row.concurrency,
        "tp": row.tp,
        "pp": row.pp,
        "attention_dp": row.attention_dp,
        "moe_tp": row.moe_tp,
        "moe_ep": row.moe_ep,
        "silicon_ttft_ms": row.ttft_ms,
        "silicon_tpot_ms": row.tpot_ms,
    }


def finish(rec: dict[str, Any]) -> dict[str, Any]:
    """Adds the signed relative errors and the over-2× flag to an ``ok`` record."""
    if rec.get("status") != "ok":
        return rec
    for k in ("ttft", "tpot"):
        sim, real = rec[f"sim_{k}_ms"], rec[f"silicon_{k}_ms"]
        rec[f"{k}_err"] = sim / real - 1.0
    rec["off_2x"] = any(
        not 0.5 <= rec[f"sim_{k}_ms"] / rec[f"silicon_{k}_ms"] <= 2.0 for k in ("ttft", "tpot")
    )
    return rec


def accuracy(recs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in recs if r.get("status") == "ok"]
    if not ok:
        return {"rows": 0}
    return {
        "rows": len(ok),
        "ttft_median_abs_err": statistics.median(abs(r["ttft_err"]) for r in ok),
        "tpot_median_abs_err": statistics.median(abs(r["tpot_err"]) for r in ok),
        "off_2x": sum(r["off_2x"] for r in ok),
    }


def reason_key(reason: str) -> str:
    """A reason with its stand-alone numbers replaced by ``#`` (token counts, GiB), so that
    rows failing the same way group together."""
    return re.sub(r"(?<![\w.-])\d[\d.]*", "#", reason)


def summarize(
    recs: list[dict[str, Any]], total: int, in_catalog: int | None,
    groups: tuple[str, ...] = GROUPS,
) -> dict[str, Any]:  # fmt: skip
    """Coverage, skip reasons by group, and accuracy overall and per ``groups`` (engine, GPU,
    model, precision); ``in_catalog`` None leaves that count out (the disaggregated rows)."""
    status = Counter(r["status"] for r in recs)
    reasons: dict[str, Counter] = defaultdict(Counter)
    for r in recs:
        if r["status"] != "ok":
            reasons[r["status"]][reason_key(r.get("reason", ""))] += 1
    by = {
        g: {k: accuracy([r for r in recs if r[g] == k]) for k in sorted({r[g] for r in recs})}
        for g in groups
    }
    return {
        "rows": total,
        **({} if in_catalog is None else {"rows_gpu_in_catalog": in_catalog}),
        "ran": status.get("ok", 0),
        "skipped": {g: n for g, n in status.items() if g != "ok"},
        "reasons": {g: dict(c.most_common()) for g, c in reasons.items()},
        "accuracy": accuracy(recs),
        "by": by,
    }


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def report(summary: dict[str, Any]) -> str:
    lines = [
        f"rows run: {summary['ran']} of {summary['rows']} vLLM/SGLang aggregated rows "
        f"({summary['ran']} of {summary['rows_gpu_in_catalog']} whose GPU Tidal knows)",
        "",
        md_table(["skipped: group", "rows"], [[g, n] for g, n in summary["skipped"].items()]),
        "",
    ]
    for g, reasons in summary["reasons"].items():
        lines.append(f"{g}:")
        lines += [f"  {n:5d}  {why}" for why, n in list(reasons.items())[:12]]
        if len(reasons) > 12:
            lines.append(f"  … {len(reasons) - 12} more reasons")
    acc = summary["accuracy"]
    lines += ["", "overall: " + _acc_line(acc)]
    for g in GROUPS:
        rows = [
            [k, a["rows"], _pct(a.get("ttft_median_abs_err")), _pct(a.get("tpot_median_abs_err")),
             a.get("off_2x", "—")]
            for k, a in summary["by"][g].items()
            if a["rows"]
        ]  # fmt: skip
        if rows:
            head = [g, "rows run", "TTFT |err| med", "TPOT |err| med", "> 2×"]
            lines += ["", md_table(head, rows)]
    return "\n".join(lines)


def _acc_line(a: dict[str, Any]) -> str:
    if not a.get("rows"):
        return "no rows run"
    return (
        f"{a['rows']} rows: median |error| TTFT {_pct(a['ttft_median_abs_err'])}, "
        f"TPOT {_pct(a['tpot_median_abs_err'])}; off by > 2×: {a['off_2x']}"
    )


def write_csv(path: Path, recs: list[dict[str, Any]]) -> None:
    """``recs`` as a gzipped CSV (columns in first-seen order; byte-identical across runs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    keys: list[str] = []
    for r in recs:
        keys += [k for k in r if k not in keys]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    w.writeheader()
    w.writerows(recs)
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(buf.getvalue().encode())


def write(tag: str, recs: list[dict[str, Any]], summary: dict[str, Any], argv: dict) -> None:
    write_csv(RESULTS / f"{tag}.csv.gz", recs)
    doc = {"args": argv, "summary": summary}
    (RESULTS / f"{tag}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--perf-model", default="auto")
    p.add_argument("--engine", default="row", help="row (each row's), default, vllm, sglang")
    p.add_argument("--engine-version", default="row", help="row, default, or a version")
    p.add_argument("--limit", type=int, default=None, help="run at most N of the runnable rows")
    p.add_argument("--filter", default=None, help="regex on id/engine/version/model/gpu/precision")
    p.add_argument("--range-ratio", type=float, default=0.8)
    p.add_argument("--no-source-clients", dest="source_clients", action="store_false",
                   help="use --range-ratio for every row, also where the source fixes the "
                   "client (silicon_rows.FIXED_LENGTH_SOURCES)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--row-timeout", type=int, default=900, help="seconds per row (0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bf16-fallback", action="store_true")
    p.add_argument("--recorded-layout", action="store_true", help="run the parallel columns as "
                   "written, not the layout that ran (silicon_layout; a what-if)")
    p.add_argument("--moe-distribution", default=None,
                   help="the MoE tables' routing distribution for every row (power_law_1.01, "
                   "balanced, power_law_1.2); default: the simulator's")
    p.add_argument("--override", type=json.loads, default=None,
                   help='JSON merged into every runnable row\'s config, e.g. '
                   '\'{"scheduler": {"batching": "mb"}}\' (a what-if, noted per row)')
    p.add_argument("--max-prefill-isl-plus", type=int, default=None,
                   help="SGLang rows: scheduler.max_prefill_tokens = the row's ISL + N "
                   "(AIConfigurator's generator launches SGLang with ISL + 1500; a what-if, "
                   "noted per row)")
    p.add_argument("--tag", default="silicon")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    rows = read_rows(sample_path())
    if a.filter:
        rows = [r for r in rows if re.search(a.filter, r.text)]
    fields = config_fields()
    plans: list[Plan] = []
    recs: list[dict[str, Any]] = []
    for row in rows:
        p = plan_row(row, fields, a.perf_model, a.engine, a.engine_version, a.bf16_fallback,
                     a.recorded_layout)
        if isinstance(p, Skip):
            recs.append({**base_record(row), "status": p.group, "reason": p.reason})
        else:
            if a.moe_distribution and "moe_distribution" in fields:
                p.config["moe_distribution"] = a.moe_distribution
            if a.override:
                apply_override(p, a.override)
            if a.max_prefill_isl_plus is not None:
                apply_max_prefill_isl_plus(p, a.max_prefill_isl_plus)
            plans.append(p)
    if a.limit is not None:
        for p in plans[a.limit :]:
            recs.append({**base_record(p.row), "status": "limit", "reason": f"--limit {a.limit}"})
        plans = plans[: a.limit]
    t0 = time.perf_counter()
    work = [(p, plan_ratio(p, a.range_ratio, a.source_clients), a.seed, a.row_timeout)
            for p in plans]  # fmt: skip
    with mp.get_context("spawn").Pool(max(1, a.workers), maxtasksperchild=20) as pool:
        for i, res in enumerate(pool.imap(run_plan, work, chunksize=1)):
            notes = ";".join(plans[i].notes)
            recs.append(finish({**base_record(plans[i].row), "notes": notes, **res}))
            if (i + 1) % 10 == 0:
                print(f"  {i + 1}/{len(plans)} rows, {time.perf_counter() - t0:.0f} s", flush=True)
    in_catalog = sum(r["status"] != "gpu" for r in recs)
    summary = summarize(recs, len(rows), in_catalog)
    summary["wall_s"] = time.perf_counter() - t0
    print(report(summary))
    write(a.tag, recs, summary, vars(a))
    print(f"\nwrote {RESULTS / a.tag}.csv.gz and .json ({summary['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
