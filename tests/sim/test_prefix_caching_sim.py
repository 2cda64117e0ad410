"""Prefix caching in the simulator: cached tokens cost no prefill compute, fast-forward stays
exact, and on both Mooncake traces the hit rate meets the infinite-cache bound (issue 14)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.batching.eb_helpers import H200_COSTS
from tests.conftest import request_set, simulate, traces_available, unit_perf
from tidal.core.prefix_cache import PrefixCachingKVManager
from tidal.engine.build import build_scheduler
from tidal.engine.scheduler import SchedulerConfig
from tidal.hardware.calibration import build_perf_model
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation
from tidal.workload.base import RequestSet
from tidal.workload.content import PrefixContent


def with_content(rs: RequestSet, groups: list[int], shared: list[int]) -> RequestSet:
    """Request i's prompt starts with system prompt ``groups[i]`` of ``shared[i]`` tokens."""
    content = PrefixContent.from_segments(
        np.array(groups), np.array(shared), np.ones(len(rs), dtype=np.int64)
    )
    return RequestSet(
        rs.arrival_ns, rs.prompt_len + np.array(shared), rs.output_len, content=content
    )


def caching_scheduler(blocks: int, bs: int, budget: int, max_seqs: int, batching: str = "mb"):
    kv = PrefixCachingKVManager(blocks, bs, watermark=0.0)
    return build_scheduler(SchedulerConfig(budget, max_seqs, costs=H200_COSTS), kv, batching)


def test_cached_prefix_costs_no_prefill_compute() -> None:
    """Two requests share a 96-token system prompt (block 16): the second, arriving after the
    first finished, reuses all 96 (6 blocks; the cap is 103 tokens), so its prefill is
    104 − 96 = 8 tokens: TTFT = 1 ms + 8 µs under the unit latency model (no context term)."""
    rs = with_content(request_set([0.0, 1.0], [8, 8], [4, 4]), [7, 7], [96, 96])
    s = caching_scheduler(100, 16, 512, 8)
    rec, _, _ = simulate(rs, s, unit_perf())
    assert rec.cached_tokens.tolist() == [0, 96]
    ttft = rec.first_token_ns - rec.arrival_ns
    assert ttft[0] == 1_000_000 + 104_000
    assert ttft[1] == 1_000_000 + 8_000
    assert s.kv.cache_queries == 208
    assert s.kv.cache_hits == 96


@st.composite
def shared_workloads(draw):
    n = draw(st.integers(1, 30))
    gaps = draw(st.lists(st.floats(0, 0.2), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 200), min_size=n, max_size=n))
    groups = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    shared = [(g + 1) * 40 for g in groups]
    return with_content(request_set(np.cumsum(gaps), prompts, outputs), groups, shared)


@given(
    rs=shared_workloads(),
    blocks=st.integers(40, 300),
    block_size=st.sampled_from([4, 16]),
    budget=st.sampled_from([64, 256, 2048]),
    max_seqs=st.integers(1, 16),
    eb=st.booleans(),
)
def test_fast_forward_is_exact_with_prefix_caching(rs, blocks, block_size, budget, max_seqs, eb):
    longest = int((rs.prompt_len + rs.output_len).max())
    blocks = max(blocks, -(-longest // block_size) + 2)
    budget = max(budget, max_seqs)
    perf = build_perf_model("roofline", get_model("llama-3.1-8b"), get_gpu("h100"))
    cls = "eb" if eb else "mb"
    runs = []
    for ff in (False, True):
        s = caching_scheduler(blocks, block_size, budget, max_seqs, cls)
        rec, sim, _ = simulate(rs, s, perf, fast_forward=ff)
        runs.append((rec, sim, s))
    (a, _, s1), (b, _, s2) = runs
    for col in ("first_scheduled_ns", "first_token_ns", "finish_ns", "num_preemptions"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    np.testing.assert_array_equal(a.cached_tokens, b.cached_tokens)
    assert (a.finish_ns >= 0).all()
    assert s1.num_steps == s2.num_steps
    assert s1.kv.cache_hits == s2.kv.cache_hits
    assert s2.kv.num_free_blocks == s2.kv.num_blocks
    s2.check()


# --------------------------------------------------------------------------- Mooncake traces

TRACES = {"conversation": 0.37, "synthetic": 0.64}


def trace_path(name: str) -> str:
    from tidal.workload.paths import traces_dir

    return str(traces_dir() / "mooncake_fast25" / f"{name}_trace.jsonl.gz")


MAX_PROMPT = 120_000
"""The synthetic trace has prompts of up to 191k tokens: capped to fit Llama-3.1-8B's 128k."""


def infinite_cache_bound(path: str, bs: int = 16) -> tuple[float, np.ndarray]:
    """From the raw file: the share of hash blocks already seen as a prefix (the README's
    figure), and per request (arrival order, stable) the tokens an infinite cache holds for
    its prompt capped at MAX_PROMPT: the leading 512-token blocks seen before, with their
    lengths, in whole KV blocks, at most prompt − 1 tokens."""
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rows.sort(key=lambda r: r["timestamp"])
    seen_ids: set[tuple[int, ...]] = set()
    seen: set[tuple[tuple[int, int], ...]] = set()
    hit_blocks = all_blocks = 0
    hits = []
    for r in rows:
        ids = r["hash_ids"]
        k = 0
        while k < len(ids) and tuple(ids[: k + 1]) in seen_ids:
            k += 1
        hit_blocks += k
        all_blocks += len(ids)
        seen_ids.update(tuple(ids[: j + 1]) for j in range(len(ids)))
        plen = min(r["input_length"], MAX_PROMPT)
        segs = [(i, min(512, plen - 512 * j)) for j, i in enumerate(ids) if 512 * j < plen]
        k = 0
        while k < len(segs) and tuple(segs[: k + 1]) in seen:
            k += 1
        covered = sum(n for _, n in segs[:k])
        hits.append(min(covered // bs, (plen - 1) // bs) * bs)
        seen.update(tuple(segs[: j + 1]) for j in range(len(segs)))
    return hit_blocks / all_blocks, np.array(hits)


def mooncake_cfg(name: str, **memory) -> dict:
    return {
        "workload": {"trace": trace_path(name), "max_prompt_len": MAX_PROMPT},
        "memory": memory,
        "scheduler": {"token_budget": 262_144},
    }


@pytest.mark.skipif(not traces_available(), reason="shared/traces not available")
@pytest.mark.parametrize("name", sorted(TRACES))
def test_mooncake_hit_rate_meets_the_infinite_cache_bound(name: str) -> None:
    by_blocks, bound = infinite_cache_bound(trace_path(name))
    assert by_blocks == pytest.approx(TRACES[name], abs=0.005)
    res = run_simulation(load_config(mooncake_cfg(name, num_blocks=20_000_000)))
    np.testing.assert_array_equal(res.columns["cached_tokens"], bound)
    rate = res.metrics["prefix_cache_hit_rate"]
    assert rate == pytest.approx(bound.sum() / res.columns["prompt_len"].sum(), rel=1e-12)
    assert res.metrics["num_preemptions"] == 0


@pytest.mark.skipif(not traces_available(), reason="shared/traces not available")
@pytest.mark.parametrize("name", sorted(TRACES))
def test_mooncake_real_gpu_cache_hits_less_and_cuts_ttft(name: str) -> None:
    """One H100's KV cache (the memory plan's): fewer hits than the bound, but TTFT falls
    against --no-prefix-caching (the conversation trace overloads one H100 without it)."""
    _, bound = infinite_cache_bound(trace_path(name))
    on = run_simulation(load_config(mooncake_cfg(name)))
    off = run_simulation(load_config(mooncake_cfg(name, prefix_caching=False)))
    hit_tokens = on.columns["cached_tokens"].sum()
    assert 0 < hit_tokens < bound.sum()
    assert off.columns["cached_tokens"].sum() == 0
    assert off.metrics["prefix_cache_hits"] == 0
    assert on.metrics["ttft_p50_s"] < off.metrics["ttft_p50_s"]
    assert on.metrics["ttft_mean_s"] < off.metrics["ttft_mean_s"]
