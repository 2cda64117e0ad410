"""Prefill attention after cached context (engine tables): a chunk of c tokens after p cached
ones costs the rows p…p + c of a fresh prompt of p + c tokens (docs/design/prefill-with-context.md),
checked on hand-read table cells; prefix hits and decode contexts as vLLM v1 counts them."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import make_scheduler
from tidal.core.prefix_cache import PrefixCachingKVManager
from tidal.core.request import Request
from tidal.engine.build import build_scheduler
from tidal.engine.plan import StepOutput
from tidal.engine.scheduler import SchedulerConfig
from tidal.hardware.engine_data import data_root, read_table
from tidal.hardware.engine_perf import EnginePerfModel
from tidal.hardware.engine_prefill import work_ratio
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.workload.content import PrefixContent


@lru_cache(maxsize=8)
def engine(model: str = "llama-3.1-8b", tp: int = 1) -> EnginePerfModel:
    return EnginePerfModel(get_model(model), get_gpu("h100"), tp, "vllm")


def attn_us(pm: EnginePerfModel, c: int, p: int, k: int = 1, pa: int = -1) -> float:
    """Per-layer prefill attention (µs) of k chunks of c tokens after p cached each."""
    pa = k * c * (2 * p + c) if pa < 0 else pa
    return pm.attn_prefill_s(k * c, k * (p + c), k, pa) * 1e6 / pm.model.num_layers


@lru_cache(maxsize=4)
def cells(version: str) -> dict[tuple[int, int], float]:
    """Llama-3.1-8B's context-attention cells (32 q heads, 8 kv, d 128, bf16 KV, TP 1), µs,
    read straight from the package's H100 vLLM table."""
    path = data_root() / "data/h100_sxm/attention/vllm" / version / "context_attention_perf.parquet"
    df = read_table(path).filter(
        (pl.col("num_heads") == 32) & (pl.col("num_key_value_heads") == 8)
        & (pl.col("head_dim") == 128) & (pl.col("kv_cache_dtype") == "bfloat16")
        & (pl.col("window_size") == 0)
    )  # fmt: skip
    g = df.group_by("batch_size", "isl").agg(pl.col("latency").min())
    return {(b, s): 1e3 * v for b, s, v in g.iter_rows()}


def test_moving_a_chunk_further_along_costs_the_table_s_extra_rows() -> None:
    """Hand-read cells T(1, s) of the H100 vLLM table: 2048 tokens after 10240 cached cost
    [T(12288) − T(10240)] − [T(10240) − T(8192)] more than after 8192 (their rows each attend
    2048 more keys): 4·32·128·2048·2048 FLOPs more. Exact at p = 0: the fresh prompt's cell."""
    pm = engine()
    t = cells(pm.tables.version)
    want = (t[1, 12288] - t[1, 10240]) - (t[1, 10240] - t[1, 8192])
    got = attn_us(pm, 2048, 10240) - attn_us(pm, 2048, 8192)
    assert abs(got - want) < 1e-6 * want
    flops = 4 * 32 * 128 * 2048 * 2048
    assert 300e12 < flops / (got * 1e-6) < 989e12  # below the H100's dense bf16 peak
    pre = pm._batch_pre
    assert pre is not None
    for c in (512, 2048, 8192):  # fresh prompts: the table as read before (silicon rows)
        assert pm.attn_prefill_s(c, c, 1, c * c) == 32 * pre.at(1, c) * 1e-6
        assert pm.attn_prefill_s(c, c, 2, c * c // 2) == 32 * pre.at(2, c / 2) * 1e-6
        assert abs(attn_us(pm, c, 0) - t[1, c]) < 1e-9 * t[1, c]


def test_a_few_tokens_after_a_long_prefix_cost_the_decode_read_of_its_kv() -> None:
    """16 new tokens after 8192 cached: the extra row work (16 × the table's slope there, a few
    µs) is less than reading the 8208 keys once, which is what a decode of that context costs."""
    pm = engine()
    assert pm._dec is not None
    dec = pm._dec.at(1, 8208)
    assert attn_us(pm, 16, 8192) == dec
    assert attn_us(pm, 1024, 8192) > 5 * dec  # compute-bound again


def test_unequal_chunks_cost_their_causal_work_not_the_mean_chunk_s() -> None:
    """Fresh prompts of 8000 and 192 tokens in one step: Σc² = 64,036,864 against 2·4096² for
    two of the mean 4096: ρ = 1.9086; the part above the fixed cost T(2, 1) scales by it."""
    pm = engine()
    t = cells(pm.tables.version)
    rho = work_ratio(2, 8192, 0, 8000**2 + 192**2)
    assert abs(rho - (8000**2 + 192**2) / (2 * 4096**2)) < 1e-12
    assert work_ratio(2, 8192, 0, 2 * 4096**2) == 1.0
    got = pm.attn_prefill_s(8192, 8192, 2, 8000**2 + 192**2) * 1e6 / 32
    assert abs(got - (t[2, 1] + (t[2, 4096] - t[2, 1]) * rho)) < 1e-6 * got
    assert got > 1.8 * t[2, 4096]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([("llama-3.1-8b", 1), ("Qwen/Qwen3-32B", 2), ("llama-3.1-70b", 8)]),
    st.integers(1, 8192), st.integers(0, 60000), st.integers(1, 30000), st.integers(1, 4),
)  # fmt: skip
def test_more_cached_context_never_makes_a_chunk_cheaper(case, c, p, more, k) -> None:
    pm = engine(*case)
    a, b = attn_us(pm, c, p, k), attn_us(pm, c, p + more, k)
    assert attn_us(pm, c, 0, k) <= a * (1 + 1e-12)
    assert a <= b * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(256, 4096), min_size=2, max_size=4))
def test_a_chunked_prompt_costs_its_fresh_prompt_plus_a_launch_per_extra_chunk(sizes) -> None:
    """Chunks c₁ … c_m of one prompt of P ≤ 16,384 tokens (the table's longest) sum to T(P)
    plus at most one small fresh kernel (T(1, 512)) per extra chunk: the rows are the same,
    each call its own launch."""
    pm = engine()
    t = cells(pm.tables.version)
    total, done = 0.0, 0
    for c in sizes:
        total += attn_us(pm, c, done)
        done += c
    fresh = pm._batch_pre.at(1, done)  # type: ignore[union-attr]
    assert fresh * (1 - 1e-9) <= total <= fresh + (len(sizes) - 1) * t[1, 512]


def test_beyond_the_table_a_row_costs_in_proportion_to_its_keys() -> None:
    """The table ends at 16,384 tokens; past it a chunk's attention keeps the throughput of the
    longest measured prompt (the square's growth), rather than getting cheaper per FLOP."""
    pm = engine()
    t = cells(pm.tables.version)
    longest = 2 * 32 * 128 * 16384**2 / (t[1, 16384] * 1e-6)  # FLOP/s, causal
    for c, p in ((1000, 50000), (4096, 100000), (8192, 120000)):
        flops = 4 * 32 * 128 * c * (p + c / 2)
        rate = flops / (attn_us(pm, c, p) * 1e-6)
        assert 0.8 * longest < rate < 1.15 * longest


# ---------------------------------------------------------------------------------- engine
def _shared(prompt: int, extra: list[int]) -> list[Request]:
    """Requests whose prompts share one ``prompt``-token segment, then ``extra`` own tokens."""
    n = len(extra)
    content = PrefixContent.from_segments(np.zeros(n), np.full(n, prompt), np.ones(n))
    reqs = []
    for i, e in enumerate(extra):
        r = Request(i, 0, prompt + e, 2)
        r.content = content.block_content(i, i)
        reqs.append(r)
    return reqs


def _run(s, req: Request, t: int) -> list:
    """Run ``req`` alone to its end; the plans it took."""
    s.add_request(req)
    plans = []
    while req.request_id in s.running or s.num_waiting:
        plan = s.schedule(t)
        plans.append((plan.prefills[:], plan.prefill_ctx, plan.prefill_attn, plan.decode_ctx))
        s.update(plan, StepOutput(1), t + 1)
        t += 1
    return plans


def test_a_prefix_hit_is_whole_blocks_and_a_full_hit_recomputes_its_last_block() -> None:
    """vLLM v1: the hit is at most num_tokens − 1 tokens in whole blocks (block 16). A second
    64-token prompt equal to the first hits 48 and computes 16 after 48; with 5 own tokens
    more it hits 64 and computes 5 after 64. The step's attention work is c·(2p + c), and the
    decode after it attends the whole context (cached prefix included)."""
    base = make_scheduler(num_blocks=64)
    kv = PrefixCachingKVManager(64, 16, watermark=0.0)
    s = build_scheduler(SchedulerConfig(512, 8), kv, "mb")
    assert type(s) is type(base)
    a, b, c = _shared(64, [0, 0, 5])
    first = _run(s, a, 0)
    assert first[0][:3] == ([(a, 64)], 64, 64 * 64)  # nothing cached yet
    for req, (hit, new) in ((b, (48, 16)), (c, (64, 5))):
        plans = _run(s, req, 10 * req.request_id)
        (r, n), ctx, attn, _ = plans[0][0][0], plans[0][1], plans[0][2], plans[0][3]
        assert (r, n, ctx, attn) == (req, new, hit + new, new * (2 * hit + new))
        assert req.num_cached_tokens == hit
        assert plans[1][3] == hit + new + 1  # the decode: prompt + its first token


def test_vllm_mla_up_projects_the_cached_latents_of_a_chunk_s_context() -> None:
    """DeepSeek-V3 on 8 H200 (16 heads/GPU): after 8,000 cached tokens vLLM's MLA prefill
    gathers their latents and runs kv_b_proj on them, an (8000 × 512)·(512 × 16·256) GEMM per
    layer, which the fresh-prompt module grid does not hold; the chunk pays the GEMM table's
    time for it, and nothing without a prefix."""
    from tidal.hardware.engine_prefill import chunk_attention_us
    from tidal.hardware.engine_tables import gemm_us
    from tidal.hardware.interp import Curve

    pm = EnginePerfModel(get_model("deepseek-ai/DeepSeek-V3"), get_gpu("h200"), 8, "vllm")
    assert pm._batch_pre is not None
    assert pm._row_cost is not None
    L, c, p = pm.model.num_layers, 1000, 8000
    rows = chunk_attention_us(pm._batch_pre, pm._row_cost, pm._dec, 1, c, p, c * (2 * p + c))
    extra = pm.attn_prefill_s(c, c + p, 1, c * (2 * p + c)) - L * rows * 1e-6
    ms, us = gemm_us(pm.tables, "fp8", 16 * 256, 512)  # type: ignore[misc]
    want = L * Curve(ms, us).at(p) * 1e-6
    assert abs(extra - want) < 1e-9 * want
    assert 2 * p * 512 * 4096 / (want / L) < 1979e12  # below the H200's dense FP8 peak
    assert pm.engine_parts["attention_prefill_context_up"].startswith("engine:gemm/")
    fresh = pm.attn_prefill_s(c, c, 1, c * c)
    assert fresh == L * pm._batch_pre.at(1, c) * 1e-6


def test_past_the_table_attention_rows_grow_with_their_keys_and_a_scan_s_do_not() -> None:
    """A synthetic fresh-prompt table T(s) = 10 + s µs from s = 1 (1 µs per row up to 2,000
    tokens, the last segment's midpoint 1,500): 1,000 rows after 3,000 cost
    ∫₃₀₀₀⁴⁰⁰⁰ x/1500 dx = 2,333.3 µs as attention rows (their keys grow), 1,000 as a linear
    layer's scan; the chunk pays that beyond what its rows 1…1,000 cost fresh (999); a hybrid
    with a quarter of full-attention layers grows by a quarter."""
    from tidal.hardware.engine_prefill import RowCost
    from tidal.hardware.measured import _Table2D
    from tidal.hardware.opprofile import Grid2D

    tab = _Table2D(Grid2D(rows=[1], cols=[1, 1000, 2000], us=[[11.0, 1010.0, 2010.0]]))
    attn, scan = (4000**2 - 3000**2) / (2 * 1500), 1000.0
    assert abs(RowCost(tab, 3, 1.0).extra(1, 1000, 3000) - (attn - 999)) < 1e-9
    assert abs(RowCost(tab, 3, 0.0).extra(1, 1000, 3000) - (scan - 999)) < 1e-9
    quarter = RowCost(tab, 3, 0.25).extra(1, 1000, 3000)
    assert abs(quarter - (0.25 * attn + 0.75 * scan - 999)) < 1e-9
    qwen35 = EnginePerfModel(get_model("Qwen/Qwen3.5-397B-A17B"), get_gpu("h200"), 8, "sglang")
    assert qwen35._row_cost is not None
    assert qwen35._row_cost.growing == 0.25  # 15 of 60 layers full attention
