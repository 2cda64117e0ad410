"""AIConfigurator's own estimate next to Tidal's and the silicon, per disaggregated row (issue 29,
docs/design/disaggregation-speculation.md §6).

    python3 -m venv /tmp/aic-venv && /tmp/aic-venv/bin/pip install aiconfigurator==0.12.0
    python bench/aic_compare.py [--aic-python /tmp/aic-venv/bin/python]
                                [--tidal-tag silicon_disagg] [--filter REGEX] [--tag NAME]

AIConfigurator lives in its own virtual environment (never the project's); this script only
builds each row's ``aiconfigurator cli estimate --estimate-mode disagg`` command line (the
row's model, system, backend and version, ISL/OSL, and per pool TP, attention DP, MoE TP/EP,
batch size and workers, GEMM/MoE quantization) and runs them in one process of that
environment (``aiconfigurator.main.main(argv)`` per row, so its databases load once), parsing
the printed ``TTFT:`` and ``TPOT:``. A version its database refuses is retried without
``--backend-version`` (its default, noted). The rows are those the Tidal run ``--tidal-tag``
(``bench/silicon_disagg.py``'s results) simulated; the join is by row id.

Writes ``bench/results/silicon/<tag>.csv.gz`` (silicon, Tidal and AIConfigurator TTFT/TPOT per
row) and ``<tag>.json``: median |error| of both against the silicon over the same rows, and for
the rows where Tidal and AIConfigurator differ by more than 10 %, how often the silicon is
closer to each.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from silicon import RESULTS, write
from silicon_disagg_rows import DisaggRow, Pool, read_disagg_rows
from silicon_rows import _is_moe, resolve_model, sample_path

DRIVER = r"""
import contextlib, io, json, re, sys
from aiconfigurator.main import main
for line in sys.stdin:
    job = json.loads(line)
    out = {"id": job["id"]}
    for argv in job["tries"]:
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                main(argv)
        except BaseException as err:  # argparse exits, database errors: try the next
            out["error"] = f"{type(err).__name__}: {str(err)[:200]}"
            continue
        text = buf.getvalue()
        for k in ("TTFT", "TPOT"):
            m = re.search(k + r":\s*([0-9.,]+)\s*ms", text)
            out[k.lower()] = float(m.group(1).replace(",", "")) if m else None
        out["argv"] = " ".join(argv)
        out.pop("error", None)
        break
    print(json.dumps(out), flush=True)
"""
"""Runs in AIConfigurator's environment: one JSON job per stdin line → one JSON result."""

AIC_PRELUDE = r"""
import contextlib, io, json, sys
import aiconfigurator.sdk.inference_session as isess
from aiconfigurator_core.sdk.engine import _evaluate_single_op
from aiconfigurator.main import main
job = json.loads(sys.stdin.read())
seen = []
init = isess.InferenceSession.__init__
def spy(self, model, database, backend, *a, **k):
    seen.append((model, database))
    return init(self, model, database, backend, *a, **k)
isess.InferenceSession.__init__ = spy
"""
"""The start of the scripts bench/decode_ops.py and bench/prefill_ops.py run in AIConfigurator's
venv: its CLI with InferenceSession spied on, so the (model, database) it built is kept."""



def _pool_args(side: str, p: Pool, moe: bool) -> list[str]:
    out = [f"--{side}-tp-size", str(p.tp), f"--{side}-num-workers", str(p.workers or 1)]
    out += [f"--{side}-batch-size", str(p.batch or 1)]
    if p.attention_dp > 1:
        out += [f"--{side}-attention-dp-size", str(p.attention_dp)]
    if moe:  # AIConfigurator wants the MoE layout of a MoE model, also EP 1
        out += [f"--{side}-moe-ep-size", str(p.moe_ep), f"--{side}-moe-tp-size", str(p.moe_tp)]
    return out


def aic_argv(d: DisaggRow, moe: bool) -> list[list[str]]:
    """The row's ``aiconfigurator cli estimate`` arguments: with the row's version first, then
    without it (AIConfigurator's default), then also with an FP8 KV cache (where the model
    does not fit its memory check otherwise; the sample does not record the KV dtype)."""
    r = d.row
    argv = ["cli", "estimate", "--model-path", r.model, "--system", r.system]
    argv += ["--backend", r.engine, "--isl", str(r.isl), "--osl", str(r.osl)]
    argv += ["--estimate-mode", "disagg"]
    argv += _pool_args("prefill", d.prefill, moe) + _pool_args("decode", d.decode, moe)
    if r.gemm_quant:
        argv += ["--gemm-quant-mode", r.gemm_quant]
    if r.moe_quant and r.moe_quant != "0":
        argv += ["--moe-quant-mode", r.moe_quant]
    tries = [[*argv, "--backend-version", r.version]] if r.version else []
    return [*tries, argv, [*argv, "--kvcache-quant-mode", "fp8"]]


def run_aic(python: str, rows: list[DisaggRow], log: Path) -> dict[str, dict[str, Any]]:
    """AIConfigurator's results by row id (one subprocess for all rows)."""
    jobs = "".join(
        json.dumps({"id": d.row.id, "tries": aic_argv(d, _moe(d))}) + "\n" for d in rows
    )
    with log.open("w") as err:
        proc = subprocess.run(
            [python, "-c", DRIVER], input=jobs, capture_output=False, text=True,
            stdout=subprocess.PIPE, stderr=err, check=False,
        )  # fmt: skip
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            res = json.loads(line)
            out[res["id"]] = res
    return out


def earlier_aic(tag: str) -> dict[str, dict[str, Any]]:
    """AIConfigurator's results of an earlier run of this script, by row id."""
    out: dict[str, dict[str, Any]] = {}
    with gzip.open(RESULTS / f"{tag}.csv.gz", "rt") as f:
        for r in csv.DictReader(f):
            got = {"argv": r["aic_argv"], "error": r["aic_error"]}
            for k in ("ttft", "tpot"):
                got[k] = float(r[f"aic_{k}_ms"]) if r[f"aic_{k}_ms"] else None
            out[r["id"]] = {k: v for k, v in got.items() if v not in ("", None)}
    return out


def _moe(d: DisaggRow) -> bool:
    """Whether Tidal's catalog holds the row's model as a MoE model."""
    model, _, _ = resolve_model(d.row)
    return model is not None and _is_moe(model)


def tidal_results(tag: str) -> dict[str, dict[str, str]]:
    with gzip.open(RESULTS / f"{tag}.csv.gz", "rt") as f:
        return {r["id"]: r for r in csv.DictReader(f) if r["status"] == "ok"}


def compare(rec: dict[str, Any]) -> dict[str, Any]:
    """Errors of both against the silicon, and which one the silicon is closer to where they
    differ by more than 10 %."""
    for k in ("ttft", "tpot"):
        real, tid, aic = rec[f"silicon_{k}_ms"], rec[f"tidal_{k}_ms"], rec.get(f"aic_{k}_ms")
        rec[f"tidal_{k}_err"] = tid / real - 1
        if aic is None:
            continue
        rec[f"aic_{k}_err"] = aic / real - 1
        if abs(tid / aic - 1) > 0.10:
            closer = abs(tid / real - 1) < abs(aic / real - 1)
            rec[f"{k}_closer"] = "tidal" if closer else "aic"
    return rec


def summary(recs: list[dict[str, Any]]) -> dict[str, Any]:
    both = [r for r in recs if r.get("aic_ttft_ms") is not None]
    out: dict[str, Any] = {"rows": len(recs), "aic_estimated": len(both)}
    for k in ("ttft", "tpot"):
        if both:
            for who in ("tidal", "aic"):
                out[f"{who}_{k}_median_abs_err"] = statistics.median(
                    abs(r[f"{who}_{k}_err"]) for r in both)  # fmt: skip
        differ = [r for r in both if f"{k}_closer" in r]
        out[f"{k}_differ_gt_10pct"] = len(differ)
        out[f"{k}_silicon_closer_to_tidal"] = sum(r[f"{k}_closer"] == "tidal" for r in differ)
        out[f"{k}_silicon_closer_to_aic"] = sum(r[f"{k}_closer"] == "aic" for r in differ)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--aic-python", default="/tmp/aic-venv/bin/python")
    p.add_argument("--tidal-tag", default="silicon_disagg")
    p.add_argument("--filter", default=None, help="regex on the row id/engine/model/gpu")
    p.add_argument("--tag", default="aic_compare")
    p.add_argument("--reuse", default=None, metavar="TAG",
                   help="take AIConfigurator's results from an earlier run's CSV (no venv)")
    a = p.parse_args(argv)
    tidal = tidal_results(a.tidal_tag)
    rows = [d for d in read_disagg_rows(sample_path()) if d.row.id in tidal]
    if a.filter:
        rows = [d for d in rows if re.search(a.filter, d.text)]
    if a.reuse:
        aic = earlier_aic(a.reuse)
    else:
        aic = run_aic(a.aic_python, rows, Path(tempfile.gettempdir()) / f"{a.tag}.aic.log")
    recs = []
    for d in rows:
        t, r = tidal[d.row.id], aic.get(d.row.id, {})
        rec = {
            "id": d.row.id, "engine": d.row.engine, "model": d.row.model, "gpu": d.row.system,
            "split": d.split, "concurrency": d.row.concurrency,
            "silicon_ttft_ms": d.row.ttft_ms, "silicon_tpot_ms": d.row.tpot_ms,
            "tidal_ttft_ms": float(t["sim_ttft_ms"]), "tidal_tpot_ms": float(t["sim_tpot_ms"]),
            "aic_ttft_ms": r.get("ttft"), "aic_tpot_ms": r.get("tpot"),
            "aic_error": r.get("error", "" if r else "no result"), "aic_argv": r.get("argv", ""),
        }  # fmt: skip
        recs.append(compare(rec))
    s = summary(recs)
    print(json.dumps(s, indent=1))
    write(a.tag, recs, s, vars(a))
    return 0


if __name__ == "__main__":
    sys.exit(main())
