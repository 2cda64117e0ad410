"""One aggregated silicon row's single-prompt prefill, operator by operator: Tidal's engine
step model against first-principles bounds and AIConfigurator's context-step ops (issue 28).

    python bench/prefill_ops.py ROW_ID [ROW_ID ...] [--aic-python /tmp/aic-venv/bin/python]
    python bench/prefill_ops.py --find 'Llama-3.1-70B.*b200_sxm.*fp8' --isl 8192 --tp 8

Tidal: the row's ``EnginePerfModel`` (``build_instance`` of the row's config), one prompt of
ISL tokens cut into chunks of the scheduler's token budget; per chunk, ms per op summed over
the layers (GEMMs by op, elementwise, two all-reduces, context attention), per step the
embedding, LM head and host time. Bounds: the GEMM FLOPs at the tables' own best FP8/bf16
rate for the largest measured shape, and the all-reduce bytes at the NCCL tables' bus rate.
AIConfigurator (its own virtual environment, as ``bench/decode_ops.py``): every leaf of the
model's ``context_ops`` evaluated alone at batch 1 and the chunk (``_evaluate_single_op``).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import silicon
from aic_compare import AIC_PRELUDE
from silicon_rows import Plan, Row, config_fields, plan_row, read_rows, sample_path

AIC_DRIVER = AIC_PRELUDE + r"""
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main(job["argv"])
    except SystemExit:
        pass
rows, s = [], job["chunk"]
def walk(op, depth):
    try:
        scale = float(op._scale_factor)
    except Exception:
        scale = None
    try:
        r = _evaluate_single_op(db, op, is_context=True, batch_size=1, s=s, prefix=0, x=s,
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
    for op in model.context_ops:
        walk(op, 0)
    break
text = out.getvalue()
print(json.dumps({"rows": rows, "ttft": [l for l in text.splitlines() if "TTFT" in l]}))
"""
"""Runs in AIConfigurator's environment: the context model's ops of one row, as JSON."""


AIC_MODELS = {"meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B"}
"""Sample model names → the id AIConfigurator ships a config for (it cannot download)."""


def find_rows(regex: str, isl: int | None, tp: int | None) -> list[Row]:
    """Rows whose ``id model gpu precision engine`` text matches, at the ISL and TP given."""
    out = []
    for r in read_rows(sample_path()):
        text = f"{r.id} {r.model} {r.system} {r.gemm_quant} {r.engine}"
        if re.search(regex, text) and (isl is None or r.isl == isl) and (tp is None or r.tp == tp):
            out.append(r)
    return out


def plan_of(row: Row) -> Plan:
    p = plan_row(row, config_fields())
    if not isinstance(p, Plan):
        raise SystemExit(f"{row.id}: {p.group}: {p.reason}")
    return p


def tidal_parts(row: Row, p: Plan) -> tuple[Any, Any, list[dict[str, float]]]:
    """The row's config, its step model and, per chunk of one ISL-token prompt (the
    scheduler's token budget), the step's parts in ms: each per-layer op times the layers,
    the embedding, the two all-reduces a layer, the context attention over the cached and
    new tokens, the LM head and host time of the one sequence, and the step itself."""
    from tidal.hardware.interp import Curve
    from tidal.sim.config import SimulationConfig
    from tidal.sim.single import build_instance

    cfg, _ = silicon.load_or_default_version(p.config)
    assert isinstance(cfg, SimulationConfig)
    _, perf, _ = build_instance(cfg, row.isl + row.osl)
    base = getattr(perf, "base", perf)
    m = cfg.model_spec()
    budget = cfg.scheduler.token_budget
    lin, L = base.dep.linear, m.num_layers
    xs = [float(t) for t in lin.tokens]
    out, done = [], 0
    while done < row.isl:
        c = min(budget, row.isl - done)
        parts = {"tokens": float(c), "cached": float(done)}
        for k, v in lin.layer_us.items():
            parts[k] = L * Curve(xs, v).at(c) / 1e3
        parts["emb"] = Curve(xs, lin.step_us["emb"]).at(c) / 1e3
        nbytes = c * m.hidden_size * m.dtype_bytes
        parts["all_reduce"] = 2e3 * L * base._ar.at(nbytes) if base._ar is not None else 0.0
        work = c * (2 * done + c)  # the chunk's causal work Σ c·(2s + c) (StepPlan.prefill_attn)
        parts["attention_prefill"] = 1e3 * base.attn_prefill_s(c, done + c, 1, work)
        parts["head_host"] = 1e3 * base.seqs_s(1)
        parts["step"] = 1e3 * base.step_seconds(0, 0, c, work, done + c, 1)
        out.append(parts)
        done += c
    return cfg, base, out


OPS = ("attention_proj", "mlp", "elementwise", "emb", "all_reduce", "attention_prefill",
       "head_host")  # fmt: skip
"""The parts a prefill step sums (``step`` is their sum, or the weight-read floor)."""


def bounds(cfg: Any, base: Any, parts: dict[str, float]) -> list[str]:
    """First-principles checks of one chunk: the GEMMs' FLOPs a GPU at the rate the step
    model gives them (against the GPU's dense peak), the all-reduce's bus bandwidth (ring:
    2(n−1)/n of the message), and the bytes the norms, residual adds and gated activation
    must move at the HBM peak (no FP8 activation quantization or RoPE counted)."""
    m, g, tp = cfg.model_spec(), base.gpu, cfg.tp
    t, L, h = parts["tokens"], m.num_layers, m.hidden_size
    q, kv, d = m.num_heads // tp, max(m.num_kv_heads // tp, 1), m.d_head
    inter = (m.moe_intermediate_size or m.intermediate_size) // tp
    up = 2 if m.gated_mlp else 1
    per_tok = 2 * h * ((q + 2 * kv) * d + q * d + (up + 1) * inter)
    flops = t * L * per_tok if not m.is_moe else float("nan")
    gemm_ms = parts["attention_proj"] + parts["mlp"]
    peak = (g.fp8_tflops if m.gemm_quant.startswith("fp8") and g.fp8_tflops else g.bf16_tflops)
    out = [f"    GEMMs {flops / 1e12:.1f} TFLOP a GPU in {gemm_ms:.1f} ms: "
           f"{flops / gemm_ms / 1e9:.0f} TFLOP/s ({flops / gemm_ms / 1e9 / peak:.0%} of the "
           f"{peak:.0f} TFLOP/s {m.gemm_quant} peak)"]
    if tp > 1 and parts["all_reduce"]:
        msg = t * h * 2
        one = parts["all_reduce"] / (2 * L)
        bus = 2 * (tp - 1) / tp * msg / (one * 1e-3) / 1e9
        out.append(f"    all-reduce {msg / 1e6:.1f} MB in {1e3 * one:.0f} µs: bus {bus:.0f} GB/s "
                   f"(NVLink {g.nvlink_gbs:.0f} GB/s a direction)")
    norm = 2 * 4 * t * h * 2  # two add+RMSNorm: read x and residual, write both
    act = 3 * t * inter * 2  # SiLU·mul: read gate and up, write the product
    el = L * (norm + act) / g.mem_bw * 1e3
    out.append(f"    elementwise ≥ {el:.1f} ms at {g.mem_bw_tbs:.2f} TB/s "
               f"(step model {parts['elementwise']:.1f} ms)")
    return out


def tidal_ops(row: Row, p: Plan) -> tuple[list[str], list[int]]:
    """Tidal's single-prompt prefill of the row, op by op (ms), and its chunks."""
    cfg, base, chunks = tidal_parts(row, p)
    out = [f"{row.id}: {row.model} {row.system} {row.gemm_quant} tp {cfg.tp} isl {row.isl} "
           f"budget {cfg.scheduler.token_budget}; parts " + json.dumps(base.parts)]
    for parts in chunks:
        out.append(f"  chunk {parts['tokens']:.0f} tokens after {parts['cached']:.0f} cached "
                   f"(ms, all {cfg.model_spec().num_layers} layers)")
        out += [f"    {k:20s} {parts[k]:9.3f}" for k in OPS]
        out.append(f"    step {parts['step']:.3f} ms")
        out += bounds(cfg, base, parts)
    out.append(f"  prefill total {sum(x['step'] for x in chunks):.3f} ms")
    return out, [int(x["tokens"]) for x in chunks]


def aic_ops(row: Row, chunk: int, python: str) -> list[str]:
    """AIConfigurator's context ops of the row at one chunk (its default database version)."""
    model = AIC_MODELS.get(row.model, row.model)
    argv = ["cli", "estimate", "--model-path", model, "--system", row.system,
            "--backend", row.engine, "--isl", str(row.isl), "--osl", str(row.osl),
            "--tp-size", str(row.tp), "--batch-size", "1"]  # fmt: skip
    if row.gemm_quant:
        argv += ["--gemm-quant-mode", row.gemm_quant]
    if row.moe_quant and row.moe_quant != "0":
        argv += ["--moe-quant-mode", row.moe_quant, "--moe-tp-size", str(row.moe_tp),
                 "--moe-ep-size", str(row.moe_ep)]  # fmt: skip
    job = {"argv": argv, "chunk": chunk}
    proc = subprocess.run([python, "-c", AIC_DRIVER], input=json.dumps(job), text=True,
                          capture_output=True, check=False)  # fmt: skip
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if not lines:
        return [f"  AIConfigurator failed: {proc.stderr.strip().splitlines()[-3:]}"]
    res = json.loads(lines[-1])
    out = [f"  AIConfigurator context ops at {chunk} tokens (ms × scale = ms of the step); "
           + "; ".join(t.strip() for t in res["ttft"])]
    tot = 0.0
    for depth, name, kind, scale, ms in res["rows"]:
        s = scale if scale else 1.0
        if depth == 0 and ms is not None:
            tot += ms
        txt = "" if ms is None else f"{ms:9.3f} ms (×{s:g})"
        out.append(f"  {'  ' * depth}{name:36s} {kind:22s} {txt}")
    out.append(f"  AIConfigurator sum of top-level ops {tot:.3f} ms")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", nargs="*")
    ap.add_argument("--find", help="regex on 'id model gpu precision engine'")
    ap.add_argument("--isl", type=int)
    ap.add_argument("--tp", type=int)
    ap.add_argument("--aic-python", default="/tmp/aic-venv/bin/python")
    ap.add_argument("--no-aic", action="store_true")
    a = ap.parse_args(argv)
    rows = [r for r in read_rows(sample_path()) if r.id in set(a.rows)]
    if a.find:
        rows += find_rows(a.find, a.isl, a.tp)[:1]
    for row in rows:
        lines, chunks = tidal_ops(row, plan_of(row))
        print("\n".join(lines))
        if not a.no_aic:
            print("\n".join(aic_ops(row, chunks[0], a.aic_python)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
