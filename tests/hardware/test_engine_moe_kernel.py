"""The fused-MoE rows of the kernel the engine runs (``ENGINE_MOE_KERNELS``): on Blackwell,
vLLM's block-FP8 experts run FlashInfer's TRT-LLM kernel, so a B200 deployment of MiniMax-M2.5
(``fp8_block``) reads those rows (vLLM 0.24's tables) even where its version's table (0.19)
holds only the Triton kernel's; Hopper and other dtypes keep their version's rows."""

from __future__ import annotations

import polars as pl
import pytest

from tidal.hardware.engine_data import data_root
from tidal.hardware.engine_deployment import engine_moe_kernel
from tidal.hardware.engine_perf import EngineDeployment, EnginePerfModel
from tidal.hardware.engine_tables import MOE_DISTRIBUTIONS
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model

MINIMAX = get_model("MiniMaxAI/MiniMax-M2.5")


def _rows(system: str, version: str) -> pl.DataFrame:
    """The MoE table's MiniMax-M2.5 block-FP8 rows at MoE TP 2, power-law 1.01 routing."""
    path = data_root() / "data" / system / "moe" / "vllm" / version / "moe_perf.parquet"
    df = pl.read_parquet(path)
    return df.filter(
        (pl.col("moe_dtype") == "fp8_block") & (pl.col("hidden_size") == 3072)
        & (pl.col("inter_size") == 1536) & (pl.col("moe_tp_size") == 2)
        & (pl.col("moe_ep_size") == 1) & (pl.col("distribution") == "power_law_1.01")
    )  # fmt: skip


def _latency_ms(df: pl.DataFrame, tokens: int) -> float:
    return float(df.filter(pl.col("num_tokens") == tokens)["latency"].min())  # type: ignore[arg-type]


def test_the_engine_kernel_is_named_for_blackwell_block_fp8_only() -> None:
    assert engine_moe_kernel("vllm", "fp8_block", "b200_sxm") == "flashinfer_trtllm"
    assert engine_moe_kernel("vllm", "fp8_block", "gb300") == "flashinfer_trtllm"
    assert engine_moe_kernel("vllm", "fp8_block", "h200_sxm") is None
    assert engine_moe_kernel("vllm", "nvfp4", "b200_sxm") is None
    assert engine_moe_kernel("sglang", "fp8_block", "b200_sxm") is None


def test_the_0_19_rows_time_triton_with_a_step_the_trtllm_rows_lack() -> None:
    """The data behind the rule: 0.19's rows are ``vllm_fused_moe`` and step up ~1.7× from 64
    to 128 tokens; 0.24's FlashInfer TRT-LLM rows grow < 10 %."""
    old, new = _rows("b200_sxm", "0.19.0"), _rows("b200_sxm", "0.24.0")
    assert set(old["kernel_source"]) == {"vllm_fused_moe"}
    fi = new.filter(pl.col("kernel_source").str.contains("flashinfer_trtllm"))
    assert fi.height > 0
    assert _latency_ms(old, 128) / _latency_ms(old, 64) > 1.6
    assert _latency_ms(fi, 128) / _latency_ms(fi, 64) < 1.1


def test_a_b200_0_19_deployment_reads_the_trtllm_rows() -> None:
    perf = EnginePerfModel(MINIMAX, get_gpu("b200"), 2, version="0.19.0")
    want = "engine:moe/0.24.0/fp8_block/flashinfer_trtllm/power_law_1.01/tp2ep1"
    assert perf.engine_parts["moe"] == want
    ed = EngineDeployment(perf.tables, MINIMAX, 2, False, MOE_DISTRIBUTIONS[0], perf.fb)
    moe, router = ed.moe_layer(), ed.gemm("bfloat16", 256, 3072, "moe_router")
    fi = _rows("b200_sxm", "0.24.0").filter(pl.col("kernel_source").str.contains("flashinfer"))
    i = ed.tokens.index(128)  # 128 tokens: 0.247 ms on TRT-LLM, 0.482 ms on 0.19's Triton
    assert moe[i] - router[i] == pytest.approx(1e3 * _latency_ms(fi, 128), rel=1e-9)
    assert moe[i] - router[i] < 0.6 * 1e3 * _latency_ms(_rows("b200_sxm", "0.19.0"), 128)


def test_hopper_keeps_its_versions_rows() -> None:
    perf = EnginePerfModel(MINIMAX, get_gpu("h200"), 2, version="0.19.0")
    assert perf.engine_parts["moe"] == "engine:moe/0.19.0/fp8_block/power_law_1.01/tp2ep1"
