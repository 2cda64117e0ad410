"""One disaggregated silicon row's decode step, operator by operator: Tidal's engine step model
of the decode pool next to AIConfigurator's decode-step ops (issue 29,
docs/design/disagg-silicon-decode.md §1).

    python bench/decode_ops.py ROW_ID [ROW_ID ...] [--aic-python /tmp/aic-venv/bin/python]

Tidal: the decode pool's ``EnginePerfModel`` (``pool_config(cfg, "decode")``) at the row's batch
(decode batch × attention DP) and context ISL + OSL/2, µs per layer and per step. AIConfigurator
(its own virtual environment: ``python3 -m venv /tmp/aic-venv && /tmp/aic-venv/bin/pip install
aiconfigurator==0.12.0``): ``cli estimate --estimate-mode disagg`` with ``bench/aic_compare.py``'s
arguments for the row, then every leaf of the decode model's ``generation_ops`` evaluated alone
at the same batch and context (``_evaluate_single_op``), in ms over its scale (layers).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import silicon
from aic_compare import AIC_PRELUDE, _moe, aic_argv
from silicon_disagg_rows import DisaggRow, plan_disagg_row, pool_fields, read_disagg_rows
from silicon_rows import Plan, config_fields, sample_path

AIC_DRIVER = AIC_PRELUDE + r"""
with contextlib.redirect_stdout(io.StringIO()) as out:
    main(job["argv"])
rows, b, s = [], job["batch"], job["ctx"]
def walk(op, depth):
    try:
        scale = float(op._scale_factor)
    except Exception:
        scale = None
    try:
        r = _evaluate_single_op(db, op, is_context=False, batch_size=b, s=s, prefix=0, x=b,
                                imbalance_correction_scale=1.0)
        ms = float(r.latency if hasattr(r, "latency") else r)
    except Exception as err:
        ms = None
    rows.append([depth, op._name, type(op).__name__, scale, ms])
    for attr in ("_primary", "_fallback", "_group_a", "_group_b"):
        kids = getattr(op, attr, None)
        if kids is not None:
            for kid in kids if isinstance(kids, (list, tuple)) else [kids]:
                walk(kid, depth + 1)
for model, db in seen:
    c = model.config
    if c.tp_size * c.attention_dp_size == job["gpus"]:
        for op in model.generation_ops:
            walk(op, 0)
        break
text = out.getvalue()
print(json.dumps({"rows": rows, "tpot": [l for l in text.splitlines() if "TPOT" in l]}))
"""
"""Runs in AIConfigurator's environment: the decode model's ops of one row, as JSON."""


def plan_of(row_id: str) -> tuple[DisaggRow, Plan]:
    d = next(x for x in read_disagg_rows(sample_path()) if x.row.id == row_id)
    p = plan_disagg_row(d, config_fields(), pool_fields())
    if not isinstance(p, Plan):
        raise SystemExit(f"{row_id}: {p.group}: {p.reason}")
    return d, p


def tidal_ops(d: DisaggRow, p: Plan) -> list[str]:
    """Tidal's decode pool at the row's batch and mid-run context, µs."""
    from tidal.hardware.interp import Curve
    from tidal.sim.config import SimulationConfig
    from tidal.sim.deployment import pool_config
    from tidal.sim.single import build_instance

    cfg, _ = silicon.load_or_default_version(p.config)
    assert isinstance(cfg, SimulationConfig)
    dc = pool_config(cfg, "decode")
    _, perf, _ = build_instance(dc, d.row.isl + d.row.osl)
    base = getattr(perf, "base", perf)
    b = (d.decode.batch or 1) * dc.data_parallel_size
    ctx = d.row.isl + d.row.osl // 2
    lin, m = base.dep.linear, dc.model_spec()
    out = [f"{d.row.id}: decode tp {dc.tp} dp {dc.data_parallel_size} ep "
           f"{dc.enable_expert_parallel}, kv {m.kv_cache_dtype}, batch {b}, context {ctx}"]
    for k, v in {**lin.layer_us, **lin.step_us}.items():
        per = "step" if k in lin.step_us else "layer"
        out.append(f"  {k:20s} {Curve([float(t) for t in lin.tokens], v).at(b):9.2f} µs/{per}")
    nbytes = b * m.hidden_size * m.dtype_bytes
    if base._ar is not None:
        out.append(f"  {'2 all-reduces':20s} {2e6 * base._ar.at(nbytes):9.2f} µs/layer")
    att = base._dec_curve(b).at(b * ctx) / m.num_layers * 1e6
    out.append(f"  {'attention_decode':20s} {att:9.2f} µs/layer")
    out.append(f"  {'host':20s} {1e6 * base.fb.host_s(b):9.2f} µs/step")
    out.append(f"  step {1e3 * base.step_seconds(b, b * ctx, 0, 0, 0, 0):.3f} ms")
    return out


def aic_ops(d: DisaggRow, python: str) -> list[str]:
    """AIConfigurator's decode ops of the row (its default database version)."""
    argv = aic_argv(d, _moe(d))[1]  # without --backend-version: its database's default
    q = d.decode
    job = {"argv": argv, "batch": q.batch or 1, "ctx": d.row.isl + d.row.osl // 2,
           "gpus": q.tp * q.attention_dp}  # fmt: skip
    proc = subprocess.run([python, "-c", AIC_DRIVER], input=json.dumps(job), text=True,
                          capture_output=True, check=False)  # fmt: skip
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if not lines:
        return [f"  AIConfigurator failed: {proc.stderr.strip().splitlines()[-1:]}"]
    res = json.loads(lines[-1])
    out = ["  AIConfigurator " + "; ".join(t.strip() for t in res["tpot"])]
    rows = res["rows"]
    for i, (depth, name, kind, scale, ms) in enumerate(rows):
        if scale is None:  # a composite (overlap, fallback): its first child's scale
            scale = next((r[3] for r in rows[i + 1 :] if r[0] > depth and r[3]), 1.0)
        per = "" if ms is None or not scale else f"{1e3 * ms / scale:9.2f} µs/unit"
        out.append(f"  {'  ' * depth}{name:36s} {kind:14s} ×{scale:g}  {per}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", nargs="+")
    ap.add_argument("--aic-python", default="/tmp/aic-venv/bin/python")
    ap.add_argument("--no-aic", action="store_true")
    a = ap.parse_args(argv)
    for rid in a.rows:
        d, p = plan_of(rid)
        print("\n".join(tidal_ops(d, p)))
        if not a.no_aic:
            print("\n".join(aic_ops(d, a.aic_python)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
