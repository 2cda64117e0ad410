"""Precision as a planner axis: the weight and KV dtypes of an option, named and checked.

``search: {quantization: [bf16, fp8, modelopt_fp4]}`` (or ``tidal plan --quantization
bf16,fp8,modelopt_fp4``) compares deployments of one model under several precisions. The
values are vLLM's ``--quantization`` methods (``fp8``, ``modelopt``, ``modelopt_fp4``,
``mxfp4``, …) plus two of the planner's own:

- ``bf16`` (aliases ``bfloat16``, ``none``): the unquantized weights — every linear layer and
  routed expert in the model dtype (``gemm_quant`` / ``moe_quant`` ``bfloat16``), whatever
  the checkpoint stores (vLLM serves the unquantized release of the model);
- ``auto``: the checkpoint's own precision (vLLM run without ``--quantization``: its
  ``quantization_config``, else bf16).

Each option's precision (weights, and the KV dtype where it is not the model's) is shown in
its label, ``plan.json``, ``evaluations.parquet`` and the printed table. A precision whose
GEMM or fused-MoE rows the GPU's measured tables lack (NVFP4 on H100: FP4 tensor cores are
Blackwell's) is refused for that option, with the dtypes the tables do hold, rather than
priced with another dtype's kernels (:func:`missing_tables`).
"""

from __future__ import annotations

from typing import Any

from tidal.hardware.model_spec import ModelSpec
from tidal.hardware.precision import MODEL_DTYPE

UNQUANTIZED = ("bf16", "bfloat16", "none")
"""Planner values meaning the unquantized weights (module docstring)."""
CHECKPOINT = "auto"
"""Planner value meaning the checkpoint's own precision (no ``--quantization``)."""
PRECISION_KEYS = ("quantization", "kv_cache_dtype", "gemm_quant", "moe_quant")
"""Config keys that set an option's precision (axes the label names)."""
NO_TABLES = "no-tables"
"""Status of an option whose precision the GPU's measured tables do not hold."""

_SHORT = {MODEL_DTYPE: "bf16", "w4a16_mxfp4": "mxfp4", "fp8_block": "fp8 (block)"}


def resolve_precision(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a config mapping, changed in place and returned) with the planner's own
    ``quantization`` values made config keys: ``bf16`` → no method and both weight parts
    ``bfloat16`` (an explicit ``gemm_quant`` / ``moe_quant`` is kept); ``auto`` → no method."""
    q = data.get("quantization")
    if not isinstance(q, str):
        return data
    if q.lower() in UNQUANTIZED:
        data["quantization"] = None
        for key in ("gemm_quant", "moe_quant"):
            if data.get(key) is None:
                data[key] = MODEL_DTYPE
    elif q.lower() == CHECKPOINT:
        data["quantization"] = None
    return data


def precision_label(spec: ModelSpec) -> str:
    """The deployed precision in a few words: the weight dtype (``fp8``, ``nvfp4``, ``bf16``;
    ``bf16 + mxfp4 experts`` where a MoE's experts differ), then ``KV fp8`` where the KV cache
    is quantized."""
    gemm, moe = _SHORT.get(spec.gemm_quant, spec.gemm_quant), spec.moe_quant
    text = gemm
    if spec.is_moe and moe != spec.gemm_quant:
        text += f" + {_SHORT.get(moe, moe)} experts"
    if spec.kv_cache_dtype not in ("auto", "bfloat16", "float16"):
        text += f" · KV {spec.kv_cache_dtype}"
    return text


def missing_tables(cfg: Any) -> str | None:
    """Why the measured tables cannot time ``cfg``'s weight precision, or None (they can, or
    the step model reads no tables: another ``perf_model``, or a GPU without tables, where the
    roofline prices any dtype by its bytes). ``cfg`` is a ``SimulationConfig``."""
    from tidal.hardware.auto_perf import tables_system
    from tidal.hardware.engine_data import fallbacks, resolve_versions, table
    from tidal.hardware.engine_deployment import GEMM_ROWS
    from tidal.hardware.gpus import get_gpu

    if cfg.cluster is not None or cfg.perf_model not in ("auto", "engine"):
        return None
    system = tables_system(get_gpu(cfg.gpu), cfg.engine)
    if system is None:
        return None
    spec = cfg.model_spec()
    ts = resolve_versions(system, cfg.engine, cfg.engine_version)
    where = f"the {system} tables of {cfg.engine} {ts.version}"
    gemm = GEMM_ROWS.get(spec.gemm_quant, spec.gemm_quant)
    if gemm != MODEL_DTYPE:
        have = _dtypes([table(ts, "gemm", "gemm_perf.parquet")], "gemm_dtype")
        if gemm not in have:
            return f"{where} hold no {gemm} GEMM (they hold {', '.join(sorted(have))})"
    if spec.is_moe and spec.moe_quant != MODEL_DTYPE:
        frames = [table(t, "moe", "moe_perf.parquet") for t in fallbacks(ts, "moe")]
        have = _dtypes(frames, "moe_dtype")
        if spec.moe_quant not in have:
            held = ", ".join(sorted(have))
            return f"{where} hold no {spec.moe_quant} fused MoE (they hold {held})"
    return None


def _dtypes(frames: list[Any], column: str) -> set[str]:
    out: set[str] = set()
    for df in frames:
        if df is not None and column in df.columns:
            out |= set(df[column].unique().to_list())
    return out
