"""vLLM's DeepGEMM fused-MoE path on Hopper (``engine_moe_deepgemm``): which deployments run it,
vLLM's padded row count, and the padding rows' traffic added to the MoE layer, worked by hand
for Qwen3-235B-A22B-FP8 on two H200s (docs/design/moe_vllm_deepgemm.md)."""

from __future__ import annotations

import pytest

from tidal.hardware.engine_moe_deepgemm import (
    aligned_rows,
    deepgemm_moe,
    padding_bytes_per_row,
    padding_s,
)
from tidal.hardware.engine_perf import EngineDeployment, EnginePerfModel
from tidal.hardware.engine_tables import MOE_DISTRIBUTIONS
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model

QWEN = get_model("Qwen/Qwen3-235B-A22B-FP8")


@pytest.mark.parametrize(
    ("engine", "version", "system", "dtype", "tp", "want"),
    [
        ("vllm", "0.12.0", "h200_sxm", "fp8_block", 2, True),
        ("vllm", "0.16.0", "h200_sxm", "fp8_block", 4, True),
        ("vllm", "0.11.1", "h100_sxm", "fp8_block", 8, True),  # before the TP 8 rule
        ("vllm", "0.12.0", "h200_sxm", "fp8_block", 8, False),  # TP 8 runs Triton
        ("vllm", "0.11.0", "h200_sxm", "fp8_block", 2, False),  # E8M0 not yet default
        ("vllm", "0.18.0", "h200_sxm", "fp8_block", 4, False),
        ("vllm", None, "h200_sxm", "fp8_block", 2, False),  # the newest engine
        ("vllm", "nightly-5b8c30d", "h200_sxm", "fp8_block", 2, False),
        ("sglang", "0.5.6.post2", "h200_sxm", "fp8_block", 2, False),
        ("vllm", "0.12.0", "b200_sxm", "fp8_block", 2, False),  # SM100: not this kernel
        ("vllm", "0.12.0", "h200_sxm", "fp8", 2, False),  # per-tensor FP8 experts
    ],
)
def test_which_deployments_run_deepgemm(
    engine: str, version: str | None, system: str, dtype: str, tp: int, want: bool
) -> None:
    assert deepgemm_moe(engine, version, system, dtype, tp) is want


def test_aligned_rows_by_hand() -> None:
    # T·k + E·127, rounded up to 128: 16·8 + 128·127 = 16,384 (exactly 128 blocks)
    assert aligned_rows(16, 8, 128) == 16_384
    # 48·8 + 16,256 = 16,640 = 130 blocks; one token more rounds up to the next block
    assert aligned_rows(48, 8, 128) == 16_640
    assert aligned_rows(49, 8, 128) == 16_768
    # MiniMax-M2.5 (256 experts): 16·8 + 256·127 = 32,640 = 255 blocks
    assert aligned_rows(16, 8, 256) == 32_640


def test_padding_bytes_by_hand() -> None:
    # Qwen3-235B at TP 2: H = 4096, I = 1536 / 2 = 768 → 3·4096 + 10·768
    assert padding_bytes_per_row(4096, 768) == 19_968
    # 16 tokens: 16,384 − 128 padding rows at 1 GB/s
    assert padding_s(16, 8, 128, 4096, 768, 1e9) == pytest.approx(16_256 * 19_968 / 1e9)


def _moe_us(version: str, tokens: int) -> tuple[float, dict[str, str]]:
    perf = EnginePerfModel(QWEN, get_gpu("h200"), 2, version=version)
    ed = EngineDeployment(perf.tables, QWEN, 2, False, MOE_DISTRIBUTIONS[0], perf.fb)
    return ed.moe_layer()[ed.tokens.index(tokens)], dict(ed.parts)


def test_qwen3_235b_on_two_h200s_pays_the_padding_rows_on_vllm_0_12_only() -> None:
    """vLLM 0.12 and 0.18 read the same (0.24) MoE rows; 0.12's layer adds the padding rows'
    traffic: 16,256 rows × 19,968 B = 324.6 MB at 16 tokens, at the H200's 4.8 TB/s times the
    corrected roofline's bandwidth efficiency."""
    old, old_parts = _moe_us("0.12.0", 16)
    new, new_parts = _moe_us("0.18.0", 16)
    assert old_parts["moe"] == new_parts["moe"]
    assert old_parts["moe_kernel"].startswith("deepgemm-contiguous")
    assert "moe_kernel" not in new_parts
    gpu = get_gpu("h200")
    eta = EnginePerfModel(QWEN, gpu, 2, version="0.12.0").fb.c.gpu_const(gpu.name).eta_bw
    want_us = 1e6 * 16_256 * 19_968 / (4.8e12 * eta)
    assert old - new == pytest.approx(want_us, rel=1e-9)
    assert 70.0 < old - new < 90.0  # ≈ 71 µs a layer, 6.7 ms a 94-layer step
