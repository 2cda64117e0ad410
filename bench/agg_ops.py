"""One aggregated silicon row's decode step, operator by operator: Tidal's engine step model next
to AIConfigurator's decode-step ops (issue 28; ``bench/decode_ops.py`` does the same for the
disaggregated rows' decode pools, docs/design/minimax_silicon.md §4 used this one).

    python bench/agg_ops.py ROW_ID [--batch B] [--aic-python /tmp/aic-venv/bin/python] [--no-aic]

Tidal: the row's planned deployment (the layout that ran, ``silicon_layout``) at batch B (default
the row's concurrency) and context ISL + OSL/2, µs per layer and per step, and which tables gave
each part. AIConfigurator: ``cli estimate --estimate-mode agg`` at the same TP, MoE split and
batch (its default database version), then every leaf of its ``generation_ops`` alone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import silicon
from decode_ops import AIC_DRIVER
from silicon_layout import served_layout
from silicon_rows import Row, config_fields, plan_row, read_rows, sample_path


def tidal_ops(row: Row, batch: int) -> list[str]:
    """Tidal's decode step of the row's deployment at ``batch`` requests, µs."""
    from tidal.hardware.interp import Curve
    from tidal.sim.single import build_instance

    plan = plan_row(row, config_fields())
    if not hasattr(plan, "config"):
        raise SystemExit(f"{row.id}: skipped: {plan}")
    cfg, _ = silicon.load_or_default_version(plan.config)  # type: ignore[union-attr]
    _, perf, _ = build_instance(cfg, row.isl + row.osl)
    base = getattr(perf, "base", perf)
    ctx, m, lin = row.isl + row.osl // 2, cfg.model_spec(), base.dep.linear
    out = [f"{row.id}: tp {cfg.tp} dp {cfg.data_parallel_size} ep {cfg.enable_expert_parallel}, "
           f"version {cfg.engine_version}, batch {batch}, context {ctx}"]  # fmt: skip
    for k, v in {**lin.layer_us, **lin.step_us}.items():
        per = "step" if k in lin.step_us else "layer"
        out.append(f"  {k:20s} {Curve([float(t) for t in lin.tokens], v).at(batch):9.2f} µs/{per}")
    if base._ar is not None:
        nbytes = batch * m.hidden_size * m.dtype_bytes
        out.append(f"  {'2 all-reduces':20s} {2e6 * base._ar.at(nbytes):9.2f} µs/layer")
    att = base._dec_curve(batch).at(batch * ctx) / m.num_layers * 1e6
    out.append(f"  {'attention_decode':20s} {att:9.2f} µs/layer")
    out.append(f"  {'host':20s} {1e6 * base.fb.host_s(batch):9.2f} µs/step")
    out.append(f"  parts {getattr(perf, 'engine_parts', {})}")
    step = base.step_seconds(batch, batch * ctx, 0, 0, 0, 0)
    out.append(f"  step {1e3 * step:.3f} ms; silicon TPOT {row.tpot_ms:.2f} ms")
    return out


def aic_ops(row: Row, batch: int, python: str) -> list[str]:
    """AIConfigurator's decode ops of the row's served layout (its default database)."""
    served, _ = served_layout(row)
    argv = ["cli", "estimate", "--model-path", row.model, "--system", row.system,
            "--backend", row.engine, "--isl", str(row.isl), "--osl", str(row.osl),
            "--estimate-mode", "agg", "--tp-size", str(served.tp), "--batch-size", str(batch),
            "--moe-tp-size", str(served.moe_tp), "--moe-ep-size", str(served.moe_ep)]  # fmt: skip
    if served.attention_dp > 1:
        argv += ["--attention-dp-size", str(served.attention_dp)]
    if row.gemm_quant:
        argv += ["--gemm-quant-mode", row.gemm_quant]
    if row.moe_quant:
        argv += ["--moe-quant-mode", row.moe_quant]
    job = {"argv": argv, "batch": batch, "ctx": row.isl + row.osl // 2,
           "gpus": served.tp * served.attention_dp}  # fmt: skip
    proc = subprocess.run([python, "-c", AIC_DRIVER], input=json.dumps(job), text=True,
                          capture_output=True, check=False)  # fmt: skip
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if not lines:
        return [f"  AIConfigurator failed: {proc.stderr.strip().splitlines()[-1:]}"]
    res = json.loads(lines[-1])
    out = ["  AIConfigurator " + "; ".join(t.strip() for t in res["tpot"])]
    for depth, name, kind, scale, ms in res["rows"]:
        per = "" if ms is None or not scale else f"{1e3 * ms / scale:9.2f} µs/unit"
        out.append(f"  {'  ' * depth}{name:36s} {kind:20s} ×{scale}  {per}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("row")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--aic-python", default="/tmp/aic-venv/bin/python")
    ap.add_argument("--no-aic", action="store_true")
    a = ap.parse_args(argv)
    row = next((r for r in read_rows(sample_path()) if r.id == a.row), None)
    if row is None:
        raise SystemExit(f"{a.row}: no such aggregated vLLM/SGLang row")
    batch = a.batch or row.concurrency
    print("\n".join(tidal_ops(row, batch)))
    if not a.no_aic:
        print("\n".join(aic_ops(row, batch, a.aic_python)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
