"""Precision names: the operator tables' weight dtypes, vLLM's ``--quantization`` methods and
``--kv-cache-dtype`` values, and the bytes each stores per parameter or per KV element.

Weight dtypes are the ``gemm_dtype`` / ``moe_dtype`` values of NVIDIA's measured operator tables
(``aiconfigurator-core``): ``bfloat16``, ``fp8`` (per-tensor scales), ``fp8_block`` (one fp32
scale per 128×128 block, DeepSeek-V3's format), ``nvfp4`` (4-bit E2M1, one FP8 scale per 16
values), ``w4a16_mxfp4`` (4-bit E2M1, one E8M0 scale per 32 values, gpt-oss), ``int4_wo``
(4-bit integers, one bf16 scale per group of 32 — the group of Kimi-K2's compressed-tensors
checkpoints, the int4 model of the silicon sample) and the tables' rarer ``int8_wo``, ``sq``,
``w4afp8``, ``w4a8_mxfp4_mxfp8``.

A model's weights are split in two: the routed experts (``moe_quant``) and every other linear
layer (``gemm_quant``); embeddings, the LM head, norms and routers stay in the model dtype, as
in the quantized checkpoints (their ``exclude_modules`` / ``modules_to_not_convert`` lists).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import TYPE_CHECKING

from tidal.core.errors import ConfigError, unknown_name

if TYPE_CHECKING:
    from tidal.hardware.models import ModelSpec

MODEL_DTYPE = "bfloat16"
"""The unquantized weight dtype: stored at the model's ``dtype_bytes``."""

WEIGHT_BYTES: dict[str, Fraction] = {
    "fp8": Fraction(1),
    "fp8_block": 1 + Fraction(4, 128 * 128),
    "nvfp4": Fraction(1, 2) + Fraction(1, 16),
    "w4a16_mxfp4": Fraction(1, 2) + Fraction(1, 32),
    "w4a8_mxfp4_mxfp8": Fraction(1, 2) + Fraction(1, 32),
    "int4_wo": Fraction(1, 2) + Fraction(2, 32),
    "w4afp8": Fraction(1, 2) + Fraction(2, 128),
    "int8_wo": 1 + Fraction(2, 128),
    "sq": Fraction(1),
}
"""Bytes per weight, scales included, of each quantized dtype (``bfloat16``: the model's)."""

WEIGHT_DTYPES = (MODEL_DTYPE, *WEIGHT_BYTES)

QUANTIZATION_METHODS: dict[str, tuple[str, str]] = {
    "fp8": ("fp8", "fp8"),
    "modelopt": ("fp8", "fp8"),
    "modelopt_fp4": ("nvfp4", "nvfp4"),
    "mxfp4": (MODEL_DTYPE, "w4a16_mxfp4"),
    "awq": ("int4_wo", "int4_wo"),
    "awq_marlin": ("int4_wo", "int4_wo"),
    "gptq": ("int4_wo", "int4_wo"),
    "gptq_marlin": ("int4_wo", "int4_wo"),
    "compressed-tensors": ("int4_wo", "int4_wo"),
}
"""vLLM ``--quantization`` method → (gemm_quant, moe_quant). ``fp8`` becomes ``fp8_block``
where the checkpoint gives a ``weight_block_size``; ``mxfp4`` quantizes only the experts (vLLM's
``Mxfp4Config`` leaves linear layers unquantized); ``compressed-tensors`` is read from the
checkpoint's groups where it has them (:mod:`tidal.hardware.hf_config`)."""

KV_CACHE_DTYPES: dict[str, int] = {
    "auto": 0,
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
"""vLLM ``--kv-cache-dtype`` → bytes per element (``auto``: the model dtype, or the
checkpoint's ``kv_cache_quant_algo`` when it names FP8, as vLLM resolves ``auto``)."""


def weight_bytes_per_param(dtype: str, model_dtype_bytes: int) -> Fraction:
    """Bytes one weight of ``dtype`` occupies, its share of block/group scales included."""
    if dtype == MODEL_DTYPE:
        return Fraction(model_dtype_bytes)
    return WEIGHT_BYTES[dtype]


def kv_bytes_per_element(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes of one KV element under ``kv_cache_dtype`` (``auto`` = the model dtype)."""
    return KV_CACHE_DTYPES[kv_cache_dtype] or model_dtype_bytes


def check_weight_dtype(field: str, dtype: str) -> str:
    """``dtype`` when it is an operator-table weight dtype, else a :class:`ConfigError`."""
    if dtype not in WEIGHT_DTYPES:
        raise unknown_name(field, dtype, WEIGHT_DTYPES)
    return dtype


def check_kv_cache_dtype(value: str) -> str:
    if value not in KV_CACHE_DTYPES:
        raise unknown_name("kv_cache_dtype", value, KV_CACHE_DTYPES)
    return value


def method_dtypes(method: str) -> tuple[str, str]:
    """(gemm_quant, moe_quant) of a vLLM ``--quantization`` method."""
    try:
        return QUANTIZATION_METHODS[method]
    except KeyError:
        raise ConfigError(
            "quantization",
            f"unknown method {method!r}",
            "vLLM's names: " + ", ".join(QUANTIZATION_METHODS)
            + "; gemm_quant / moe_quant take the tables' dtypes: " + ", ".join(WEIGHT_DTYPES),
        ) from None


def apply_precision(
    spec: ModelSpec,
    quantization: str | None = None,
    kv_cache_dtype: str | None = None,
    gemm_quant: str | None = None,
    moe_quant: str | None = None,
) -> ModelSpec:
    """``spec`` under the precision flags; each flag given overrides the checkpoint's.

    ``quantization`` (vLLM's method) sets both parts; ``fp8`` keeps a checkpoint's block
    scales (``fp8_block``), as vLLM's Fp8Config reads ``weight_block_size``. ``gemm_quant`` /
    ``moe_quant`` (table dtypes) override one part each. ``kv_cache_dtype`` ``auto`` keeps the
    checkpoint's KV dtype (the model dtype, or FP8 where the checkpoint quantizes its KV)."""
    gemm, moe = spec.gemm_quant, spec.moe_quant
    if quantization is not None:
        mg, mm = method_dtypes(quantization)
        keep = quantization == "fp8"
        gemm = gemm if keep and gemm == "fp8_block" else mg
        moe = moe if keep and moe == "fp8_block" else mm
    gemm = check_weight_dtype("gemm_quant", gemm_quant) if gemm_quant is not None else gemm
    moe = check_weight_dtype("moe_quant", moe_quant) if moe_quant is not None else moe
    kv = spec.kv_cache_dtype
    if kv_cache_dtype is not None and check_kv_cache_dtype(kv_cache_dtype) != "auto":
        kv = kv_cache_dtype
    return dataclasses.replace(spec, gemm_quant=gemm, moe_quant=moe, kv_cache_dtype=kv)
