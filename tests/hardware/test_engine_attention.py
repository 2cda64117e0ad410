"""MLA, DSA and Gated DeltaNet attention priced from the engines' measured tables."""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.hardware.engine_attention import (
    attention_kind,
    attention_table,
    gdn_grids,
    module_grids,
)
from tidal.hardware.engine_perf import EnginePerfModel
from tidal.hardware.engine_tables import attention_grids
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import ModelSpec, get_model

CASES = {
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", "vllm", "mla/vllm"),
    "deepseek-v3-sglang": ("deepseek-ai/DeepSeek-V3", "sglang", "mla/sglang"),
    "kimi-k2.5": ("moonshotai/Kimi-K2.5", "vllm", "mla/vllm"),
    "glm-5": ("zhipuai/GLM-5", "sglang", "sparse_attention/sglang"),
    "glm-5-vllm": ("zhipuai/GLM-5", "vllm", "sparse_attention/vllm"),
    "qwen3.5": ("Qwen/Qwen3.5-397B-A17B", "sglang", "linear_attention/sglang"),
}
"""case → (model, engine, the table family/engine its attention must come from); H200, TP 8."""


@lru_cache(maxsize=8)
def perf(case: str) -> EnginePerfModel:
    model, eng, _ = CASES[case]
    return EnginePerfModel(get_model(model), get_gpu("h200"), 8, eng)


@pytest.mark.parametrize("case", sorted(CASES))
def test_attention_comes_from_the_variant_tables(case: str) -> None:
    p = perf(case)
    want = CASES[case][2]
    for part in ("attention_decode", "attention_prefill"):
        assert p.parts[part].startswith(f"engine:{want}"), (part, p.parts[part])
    assert p.parts["attention_proj"].startswith("engine:")
    assert not any(n.startswith("attention") for n in p.notes)


@pytest.mark.parametrize("case", sorted(CASES))
def test_step_time_grows_with_batch_context_and_prompt(case: str) -> None:
    p = perf(case)
    for ctx in (128, 1024, 8192, 60000):
        steps = [p.step_ns(n, n * ctx) for n in (1, 2, 8, 32, 64, 200, 512)]
        assert steps == sorted(steps), (ctx, steps)
    for n in (1, 16, 256):
        steps = [p.step_ns(n, n * ctx) for ctx in (1, 100, 1000, 4000, 16000, 100000)]
        assert steps == sorted(steps), (n, steps)
        assert steps[-1] > steps[0]
    for m in (1, 4):
        pre = [p.step_ns(0, 0, m * s, m * s * s // 2, m * s, m) for s in (16, 500, 2000, 8000)]
        assert pre == sorted(pre), (m, pre)
        assert pre[-1] > 2 * pre[0], (m, pre)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(sorted(CASES)), st.integers(1, 300), st.integers(0, 9000),
       st.integers(1, 200))  # fmt: skip
def test_decode_runs_equal_stepping_one_by_one_bit_for_bit(case, n, ctx_per, steps) -> None:
    p = perf(case)
    ctx0 = n * ctx_per
    one = [p.step_ns(n, ctx0 + n * k) for k in range(steps)]
    assert p.decode_run_ns(n, ctx0, steps).tolist() == one


def _cell(grid, row: int, col: int) -> float | None:
    rows, cols, us = grid
    return us[rows.index(row)][cols.index(col)]


def test_the_mla_module_grid_is_the_table_and_adds_no_projection_gemms() -> None:
    """vLLM's MLA module rows time the whole attention block (down/up projections, kernel,
    output) at the per-GPU heads: a cell is the table's latency, and attention_proj is 0."""
    p = perf("deepseek-v3")
    m = p.model
    got = module_grids(p.tables, m, 8, "bfloat16")
    assert got is not None
    dec, pre, _ = got
    df, _v = attention_table(p.tables, "mla", "mla_generation_module_perf.parquet")  # type: ignore[misc]
    row = df.filter((pl.col("num_heads") == 16) & (pl.col("gemm_type") == m.gemm_quant)
                    & (pl.col("kv_cache_dtype") == "bfloat16") & (pl.col("batch_size") == 64)
                    & (pl.col("step") == 4096))  # fmt: skip
    assert _cell(dec, 64, 4096) == pytest.approx(1e3 * row["latency"].min())
    assert _cell(pre, 8, 2048) is not None
    layer = p.dep.linear.layer_us["attention_proj"]
    assert set(layer) == {0.0}
    # SGLang's MLA tables are kernels only: there the projections are GEMMs beside them
    sg = perf("deepseek-v3-sglang").dep.linear.layer_us["attention_proj"]
    assert min(sg) > 0


def test_a_hybrid_layer_is_the_layer_weighted_mean_of_gqa_and_gdn() -> None:
    """Qwen3.5-397B: 45 of 60 layers are Gated DeltaNet (constant state: the same cost at any
    context), 15 full GQA attention (32 q / 2 kv heads of 256; per GPU 4 / 1)."""
    p = perf("qwen3.5")
    m, ts = p.model, p.tables
    assert attention_kind(m) == "hybrid"
    gdn = gdn_grids(ts, m, 8)
    full, _ = attention_grids(ts, 4, 1, 256, "bfloat16")
    assert gdn is not None
    assert full is not None
    g_dec = gdn[0]
    assert g_dec[1] == [1]  # one column: constant in context
    dec = p.dep.attention.decode  # type: ignore[union-attr]
    share = 45 / 60
    for b in (8, 64):
        for c in (1024, 8192):
            want = (1 - share) * _cell(full, b, c) + share * _cell(g_dec, b, 1)  # type: ignore
            assert dec.us[dec.rows.index(b)][dec.cols.index(c)] == pytest.approx(want)


def test_shapes_no_table_holds_fall_back_and_say_so() -> None:
    """An MLA model with another latent rank matches neither the module rows (timed with
    DeepSeek-V3's shapes) nor the kernel tables: the corrected roofline prices attention."""
    m: ModelSpec = dataclasses.replace(get_model("deepseek-ai/DeepSeek-V3"), kv_lora_rank=256,
                                       name="mla-256")  # fmt: skip
    for eng in ("vllm", "sglang"):
        p = EnginePerfModel(m, get_gpu("h200"), 8, eng)
        assert p.parts["attention_decode"] == p.fb.name
        assert p.parts["attention_prefill"] == p.fb.name
        assert any("no " in n and "MLA table" in n for n in p.notes)
        assert p.parts["attention_proj"].startswith("engine:gemm/")
