"""A checkpoint's precision → (gemm_quant, moe_quant, kv_cache_dtype) in the operator tables'
dtype names (:mod:`tidal.hardware.precision`).

Sources, as vLLM reads them: ``quantization_config`` in ``config.json`` (``quant_method``
``fp8`` — per-tensor, or ``fp8_block`` when it gives a ``weight_block_size``; ``mxfp4`` —
experts only, gpt-oss; ``compressed-tensors`` — from its weight groups and ``ignore`` list;
``modelopt``) or ModelOpt's ``hf_quant_config.json`` (``quant_algo`` FP8 / NVFP4 /
MIXED_PRECISION, ``kv_cache_quant_algo``). A checkpoint whose KV algorithm is FP8 gets an FP8
KV cache under ``--kv-cache-dtype auto``, as vLLM resolves ``auto`` from the checkpoint.

ModelOpt NVFP4 checkpoints leave some attention projections in bf16 (``exclude_modules``);
like the silicon sample's ``gemm_quant_mode``, ``gemm_quant`` names the dtype the checkpoint is
quantized to, not each excluded module.
"""

from __future__ import annotations

from typing import Any

from tidal.hardware.precision import MODEL_DTYPE

Precision = tuple[str, str, str]

ALGOS = {"fp8": "fp8", "nvfp4": "nvfp4", "w4a16_nvfp4": "nvfp4", "fp8_pb_wo": "fp8_block"}
"""ModelOpt ``quant_algo`` → table dtype."""


def checkpoint_precision(
    quant: dict[str, Any] | None, hf_quant: dict[str, Any] | None
) -> Precision:
    """(gemm_quant, moe_quant, kv_cache_dtype) of a checkpoint; bf16 and ``auto`` without one."""
    if hf_quant is not None:
        return _modelopt(hf_quant.get("quantization") or hf_quant)
    if not quant:
        return MODEL_DTYPE, MODEL_DTYPE, "auto"
    method = str(quant.get("quant_method", "")).lower()
    if method == "fp8":
        dtype = "fp8_block" if quant.get("weight_block_size") else "fp8"
        return dtype, dtype, "auto"
    if method == "mxfp4":
        return MODEL_DTYPE, "w4a16_mxfp4", "auto"
    if method == "compressed-tensors":
        return _compressed(quant)
    if method == "modelopt":
        return _modelopt(quant)
    return MODEL_DTYPE, MODEL_DTYPE, "auto"


def _modelopt(q: dict[str, Any]) -> Precision:
    algo = str(q.get("quant_algo") or "").lower()
    kv = "fp8" if str(q.get("kv_cache_quant_algo") or "").lower() == "fp8" else "auto"
    if algo == "mixed_precision":
        layers = q.get("quantized_layers") or {}
        experts = {ALGOS.get(str(v.get("quant_algo", "")).lower()) for k, v in layers.items()
                   if "expert" in k and "shared" not in k}  # fmt: skip
        others = {ALGOS.get(str(v.get("quant_algo", "")).lower()) for k, v in layers.items()
                  if "expert" not in k or "shared" in k}  # fmt: skip
        return _one(others), _one(experts), kv
    dtype = ALGOS.get(algo, MODEL_DTYPE)
    return dtype, dtype, kv


def _one(dtypes: set[str | None]) -> str:
    """The dtype of a group of layers (the lowest-precision one when they differ)."""
    known = [d for d in dtypes if d]
    if not known:
        return MODEL_DTYPE
    return "nvfp4" if "nvfp4" in known else sorted(known)[0]


def _compressed(q: dict[str, Any]) -> Precision:
    """compressed-tensors: the first weight group's type; attention and dense/shared MLPs stay
    in the model dtype when the ``ignore`` list names them (Kimi-K2's int4 experts)."""
    groups = list((q.get("config_groups") or {}).values())
    w = (groups[0].get("weights") or {}) if groups else {}
    bits, kind = int(w.get("num_bits") or 16), str(w.get("type") or "")
    if bits == 4:
        dtype = "int4_wo" if kind == "int" else "nvfp4"
    elif bits == 8:
        dtype = "fp8" if kind == "float" else "int8_wo"
    else:
        dtype = MODEL_DTYPE
    ignore = " ".join(map(str, q.get("ignore") or []))
    gemm = MODEL_DTYPE if "self_attn" in ignore else dtype
    kv = "fp8" if q.get("kv_cache_scheme") else "auto"
    return gemm, dtype, kv
