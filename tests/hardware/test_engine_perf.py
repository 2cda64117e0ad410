"""EnginePerfModel: the engine's measured tables, exact fast-forward, interpolation, versions."""

from __future__ import annotations

import statistics
from functools import lru_cache

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.core.errors import ConfigError
from tidal.hardware.calibration import EngineChoice, build_perf_model, perf_model_source
from tidal.hardware.engine_data import (
    _pick,
    engine_versions,
    read_table,
    resolve_versions,
    version_key,
)
from tidal.hardware.engine_perf import EnginePerfModel
from tidal.hardware.engine_tables import _gemm_index, gemm_us
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model


@lru_cache(maxsize=8)
def engine(model: str = "llama-3.1-8b", gpu: str = "h100", tp: int = 1, eng: str = "vllm"
           ) -> EnginePerfModel:  # fmt: skip
    return EnginePerfModel(get_model(model), get_gpu(gpu), tp, eng)


def test_versions_sort_numerically_and_resolve_to_their_own_else_the_newest() -> None:
    assert version_key("0.5.6.post2") < version_key("0.5.9") < version_key("0.5.14")
    have = ["0.14.0", "0.19.0", "0.24.0"]
    assert _pick(have, "0.19.0") == "0.19.0"
    assert _pick(have, "0.22.0") == "0.24.0"  # not its own: the newest, not 0.19.0
    assert _pick(have, "0.12.0") == "0.24.0"  # nor the oldest newer one
    ts = resolve_versions("h100_sxm", "vllm")
    assert ts.version == engine_versions("h100_sxm", "vllm")[-1]
    assert {f for f, _ in ts.families} == {"gemm", "attention", "moe", "comm"}
    older = resolve_versions("h100_sxm", "vllm", "0.12.0")  # no tables of its own
    assert older.version == "0.12.0"
    assert dict(older.families) == dict(ts.families)
    assert older.describe()["exact"] is False
    with pytest.raises(ConfigError, match="versions with data"):
        resolve_versions("h100_sxm", "vllm", "latest; rm")
    night = resolve_versions("h100_sxm", "vllm", "nightly-5b8c30d62b754b57")
    assert night.version == "nightly-5b8c30d62b754b57"
    assert dict(night.families) == dict(resolve_versions("h100_sxm", "vllm").families)
    with pytest.raises(ConfigError, match="unknown engine"):
        resolve_versions("h100_sxm", "trt")


def test_gemm_on_the_grid_is_the_table_and_between_it_is_bilinear() -> None:
    ts = resolve_versions("h100_sxm", "vllm")
    idx = _gemm_index(ts, "bfloat16")
    assert idx is not None
    ms, us = gemm_us(ts, "bfloat16", 4096, 4096)  # type: ignore[misc]
    assert us == [1e3 * idx[4096, 4096][int(m)] for m in ms]
    # halfway in n and k: the mean of the four corners at every m
    ms2, mid = gemm_us(ts, "bfloat16", 3328, 3328)  # type: ignore[misc]
    for m, v in zip(ms2, mid, strict=True):
        c = [idx[a, b].get(int(m)) for a in (3072, 3584) for b in (3072, 3584)]
        if None not in c:
            w = (3328 - 3072) / (3584 - 3072)
            lo = (1 - w) * c[0] + w * c[1]
            hi = (1 - w) * c[2] + w * c[3]
            assert v == pytest.approx(1e3 * ((1 - w) * lo + w * hi))


def _holdout(rows: dict[int, float]) -> list[float]:
    """|error| at every other grid point of one row, interpolated from its neighbours."""
    xs = sorted(rows)
    out = []
    for i in range(1, len(xs) - 1, 2):
        lo, mid, hi = xs[i - 1], xs[i], xs[i + 1]
        w = (mid - lo) / (hi - lo)
        if rows[mid] > 0:
            out.append(abs((1 - w) * rows[lo] + w * rows[hi] - rows[mid]) / rows[mid])
    return out


def test_interpolation_with_every_other_grid_point_removed_is_within_3_percent() -> None:
    """Issue 28's interpolation target, on H100's vLLM GEMM table along m (tokens) and along
    k, and on its decode-attention table along the context (bench/interp_holdout.py reports
    every GPU, engine and axis)."""
    ts = resolve_versions("h100_sxm", "vllm")
    idx = _gemm_index(ts, "bfloat16")
    assert idx is not None
    along_m = [e for row in idx.values() for e in _holdout(row)]
    ks = sorted({k for _, k in idx})
    along_k = [
        e for n in sorted({n for n, _ in idx}) for m in (1, 64, 512, 4096)
        for e in _holdout({k: idx[n, k][m] for k in ks if m in idx.get((n, k), {})})
    ]  # fmt: skip
    gen = read_table(ts.path("attention", "generation_attention_perf.parquet"))  # type: ignore
    sub = gen.filter(
        (pl.col("num_heads") == 32) & (pl.col("num_key_value_heads") == 8)
        & (pl.col("head_dim") == 128) & (pl.col("kv_cache_dtype") == "bfloat16")
        & (pl.col("window_size") == 0)
    ).group_by("batch_size", "step").agg(pl.col("latency").min())  # fmt: skip
    attn = [
        e for b in sub["batch_size"].unique()
        for e in _holdout(dict(sub.filter(pl.col("batch_size") == b).select("step", "latency")
                               .iter_rows()))
    ]  # fmt: skip
    for name, errs in (("m", along_m), ("k", along_k), ("context", attn)):
        assert len(errs) > 20, name
        assert statistics.median(errs) <= 0.03, (name, statistics.median(errs))


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("qwen3-30b-a3b", 2)]),
    st.integers(1, 300),
    st.integers(0, 8000),
    st.integers(1, 300),
)
def test_decode_runs_equal_stepping_one_by_one_bit_for_bit(case, n, ctx_per, steps) -> None:
    perf = engine(case[0], "h100", case[1])
    ctx0 = n * ctx_per
    one = [perf.step_ns(n, ctx0 + n * k) for k in range(steps)]
    assert perf.decode_run_ns(n, ctx0, steps).tolist() == one
    for k in range(0, steps, 7):
        x = ctx0 + n * k
        c, a, end = perf.decode_segment(n, x)
        assert end > x
        assert c + a * x == perf.step_seconds(n, x, 0, 0, 0, 0)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 512), st.integers(0, 4096), st.integers(0, 8192), st.integers(1, 8))
def test_step_time_never_falls_as_the_batch_grows(n, ctx_per, prefill, chunks) -> None:
    perf = engine("llama-3.1-70b", "h100", 4)
    base = perf.step_ns(n, n * ctx_per)
    assert perf.step_ns(n + 1, (n + 1) * ctx_per) >= base
    assert perf.step_ns(n, n * (ctx_per + 64)) >= base
    if prefill >= chunks:
        p = perf.step_ns(n, n * ctx_per, prefill, prefill * prefill // chunks, prefill, chunks)
        assert p >= base


def test_the_run_records_engine_version_and_which_parts_are_measured() -> None:
    perf = build_perf_model("engine", get_model("llama-3.1-70b"), get_gpu("h200"), 4,
                            engine=EngineChoice("sglang"))  # fmt: skip
    assert isinstance(perf, EnginePerfModel)
    d = perf.describe()
    assert d["engine"] == "sglang"
    assert d["gpu_tables"] == "h200_sxm"
    assert d["engine_version"] == engine_versions("h200_sxm", "sglang")[-1]
    assert perf_model_source(perf).startswith("engine:sglang-")
    parts = perf.parts
    for p in ("attention_decode", "attention_prefill", "all_reduce", "mlp", "attention_proj"):
        assert parts[p].startswith("engine:"), (p, parts[p])
    with pytest.raises(ConfigError, match="no measured engine tables"):
        EnginePerfModel(get_model("llama-3.1-8b"), get_gpu("a40"), 1)


def test_moe_layers_read_the_fused_moe_table_not_dense_gemms() -> None:
    """Qwen3-30B-A3B: 128 experts of 768, top 8, hidden 2048 — in the fused-MoE table. Issue
    28 measured the corrected roofline (routed experts priced as dense GEMMs) 2.6x slower than
    vLLM 0.19 on this model's decode; the table's fused kernel is what the engine runs."""
    perf = engine("qwen3-30b-a3b", "h100", 1)
    assert perf.engine_parts["moe"].startswith("engine:moe/")
    assert "/bfloat16/" in perf.engine_parts["moe"]
    corrected = build_perf_model("corrected-roofline", perf.model, perf.gpu, 1)
    for n in (8, 32, 128):
        assert 2 * perf.step_ns(n, n * 1000) < corrected.step_ns(n, n * 1000)


def test_an_older_engine_version_reads_its_own_tables_where_they_exist() -> None:
    """H200's vLLM MoE tables exist for 0.19.0 and 0.24.0, its GEMM tables for 0.24.0 only:
    asking for 0.19.0 reads 0.19.0's MoE rows and the newest GEMM rows."""
    have = engine_versions("h200_sxm", "vllm")
    assert "0.19.0" in have
    old = resolve_versions("h200_sxm", "vllm", "0.19.0")
    assert old.family_version("moe") == "0.19.0"
    assert old.family_version("gemm") == "0.24.0"
    m = get_model("qwen3-30b-a3b")
    a = EnginePerfModel(m, get_gpu("h200"), 1, "vllm", "0.19.0")
    b = EnginePerfModel(m, get_gpu("h200"), 1, "vllm", "0.24.0")
    assert a.describe()["tables"]["moe"] == "0.19.0"
    assert [a.step_ns(n, n * 500) for n in (8, 64)] != [b.step_ns(n, n * 500) for n in (8, 64)]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 200), st.integers(1, 6000), st.integers(0, 3000))
def test_data_parallel_ranks_of_a_dense_model_each_run_their_share(n, ctx, prefill) -> None:
    """Without MoE layers nothing spans the ranks: a step of 2n decodes (and two chunks of
    p) on 2 data-parallel ranks takes what n decodes (one chunk of p) take on one."""
    one = engine("llama-3.1-8b", "h100", 2)
    two = EnginePerfModel(get_model("llama-3.1-8b"), get_gpu("h100"), 2, data_parallel=2)
    assert two.step_seconds(2 * n, 2 * n * ctx, 0, 0, 0, 0) == pytest.approx(
        one.step_seconds(n, n * ctx, 0, 0, 0, 0), rel=1e-9)  # fmt: skip
    if prefill:
        a = two.step_seconds(2 * n, 2 * n * ctx, 2 * prefill, 2 * prefill**2, 2 * prefill, 2)
        b = one.step_seconds(n, n * ctx, prefill, prefill**2, prefill, 1)
        assert a == pytest.approx(b, rel=1e-9)


def test_data_parallel_moe_routes_every_rank_s_tokens_over_the_whole_group() -> None:
    """Qwen3-30B-A3B, 2 ranks of TP 1 with EP 2: the MoE layers read the EP-2 rows at both
    ranks' tokens and add the NCCL all-gather and reduce-scatter; the step grows with the
    requests; the plan spreads the experts over both GPUs."""
    from tidal.hardware.memory import plan_memory

    m = get_model("qwen3-30b-a3b")
    dp = EnginePerfModel(m, get_gpu("h100"), 1, expert_parallel=True, data_parallel=2)
    assert "tp1ep2" in dp.engine_parts["moe"]
    assert dp.engine_parts["moe_dispatch"].startswith("engine:nccl/")
    steps = [dp.step_ns(n, n * 1000) for n in (2, 16, 64, 256)]
    assert steps == sorted(steps)
    p1 = plan_memory(m, get_gpu("h100"), 1)
    p2 = plan_memory(m, get_gpu("h100"), 1, moe_gpus=2)
    assert p1.weight_bytes_per_gpu - p2.weight_bytes_per_gpu == pytest.approx(
        m.expert_weight_bytes / 2)  # fmt: skip


def test_gemm_part_names_the_rows_read_when_the_dtype_has_no_table() -> None:
    """NVFP4 weights on H100 (no nvfp4 GEMM rows there): the projections are timed with the
    bf16 rows, and ``parts`` says bf16, not nvfp4, beside the note."""
    m = get_model("llama-3.1-8b", quantization="modelopt_fp4")
    assert m.gemm_quant == "nvfp4"
    p = EnginePerfModel(m, get_gpu("h100"), 1, "vllm")
    assert p.parts["attention_proj"] == "engine:gemm/bfloat16"
    assert any("no nvfp4 GEMM table" in n for n in p.notes)
    b = EnginePerfModel(m, get_gpu("b200"), 1, "vllm")
    assert b.parts["attention_proj"] == "engine:gemm/nvfp4"
