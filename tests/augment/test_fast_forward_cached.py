"""Exact fast-forward of augmented requests over the prefix cache, with the engines' step
models (docs/DESIGN.md §2). No other property combines these axes: tool calls (Preserve,
Discard, Swap, INFERCEPT's min-waste choice, AugServe's value order and dynamic budget),
prefix caching (a context's own re-hits after a discard or a preemption, system prompts
shared across requests, a host tier), the measured engine tables (``auto``: piecewise-linear
in the context) and INFERCEPT's profiles (``linear``), under each batching policy."""

from __future__ import annotations

import copy
import dataclasses
from functools import cache

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.augment.helpers import augmented_workloads, make, run, spec, workload
from tidal.hardware.calibration import build_perf_model
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.hardware.perf import PerfModel
from tidal.workload.base import RequestSet
from tidal.workload.content import PrefixContent, unique_content

PERFS = [
    ("gpt-j-6b", "a100-80gb", "linear", 1),  # INFERCEPT's measured profile
    ("gpt-j-6b", "a100-80gb", "auto", 1),  # vLLM's operator tables
    ("vicuna-13b", "a100-80gb", "auto", 2),
]
POLICIES = [
    ("vllm", None),
    ("infercept", None),
    ("augserve", None),
    ("vllm", "swap"),
    ("vllm", "preserve"),
]


@cache
def perf_of(i: int) -> PerfModel:
    m, g, kind, tp = PERFS[i]
    return build_perf_model(kind, get_model(m), get_gpu(g), tp)


def with_system_prompts(rs: RequestSet, groups: list[int]) -> RequestSet:
    """Request i's prompt starts with system prompt ``groups[i]`` (``40·(g + 1)`` tokens, cut
    to the prompt; −1: none), the rest of it its own."""
    ids, lens, count = [], [], []
    for i, (g, p) in enumerate(zip(groups, rs.prompt_len.tolist(), strict=True)):
        head = min(40 * (g + 1), p) if g >= 0 else 0
        segs = [(g, head), ((1 << 40) + i, p - head)]
        segs = [s for s in segs if s[1] > 0]
        ids += [s[0] for s in segs]
        lens += [s[1] for s in segs]
        count.append(len(segs))
    return dataclasses.replace(rs, content=PrefixContent.from_segments(ids, lens, count))


@settings(max_examples=20, deadline=None)
@given(
    rs=augmented_workloads(
        max_requests=12,
        max_gap_s=0.2,
        max_calls=3,
        max_decode=80,
        max_call_ms=300.0,
        max_return=60,
        max_prompt=600,
        max_final=120,
    ),
    groups=st.lists(st.integers(-1, 1), min_size=12, max_size=12),
    policy=st.sampled_from(POLICIES),
    predictor=st.sampled_from(["oracle", "noisy"]),
    spare=st.integers(0, 40),
    host=st.sampled_from([0, 40, 10_000]),
    tier=st.sampled_from([0, 6]),
    block_size=st.sampled_from([4, 16]),
    max_seqs=st.integers(1, 12),
    perf_idx=st.integers(0, len(PERFS) - 1),
    batching=st.sampled_from(["mb", "eb", "ebplus"]),
)
def test_fast_forward_is_exact_for_cached_augmented_requests_on_engine_tables(
    rs, groups, policy, predictor, spare, host, tier, block_size, max_seqs, perf_idx, batching
):
    rs = with_system_prompts(rs, groups[: len(rs)])
    longest = int((rs.prompt_len + rs.output_len + rs.extra["return_tokens"]).max())
    blocks = -(-longest // block_size) + 2 + spare
    perf = perf_of(perf_idx)
    m, g, _, tp = PERFS[perf_idx]
    name, intercept = policy
    runs = []
    for ff in (False, True):
        s = make(
            name,
            intercept=intercept,
            num_blocks=blocks,
            block_size=block_size,
            host_blocks=host,
            max_seqs=max_seqs,
            token_budget=max(256, max_seqs),
            predictor=predictor,
            perf=perf,
            swap_ns_per_token=20_000.0,
            checked=False,
            batching=batching,
            deployment=(m, g, tp),
            prefix_caching=True,
            host_tier=tier,
        )
        rec, sim = run(rs, s, perf, fast_forward=ff)
        runs.append((rec, sim, s))
    (a, sa, s1), (b, sb, s2) = runs
    for col in (
        "first_scheduled_ns",
        "first_token_ns",
        "finish_ns",
        "num_preemptions",
        "cached_tokens",
    ):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    assert (b.finish_ns >= 0).all()
    assert s1.num_steps == s2.num_steps
    assert sb.num_events <= sa.num_events
    for attr in ("recompute_tokens", "recompute_hit_tokens", "idle_block_ns", "forward_ns"):
        assert getattr(s1.augmentation, attr) == getattr(s2.augmentation, attr), attr
    assert s2.kv.num_free_blocks == s2.kv.num_blocks
    assert s2.kv.num_free_host_blocks == s2.kv.num_host_blocks


def test_the_head_of_an_empty_instance_reclaims_for_its_cached_prefix_too():
    """Regression (a random search on the engine tables found it): R1 is preempted when the
    29-block cache runs out; its 24 full blocks stay cached in the free queue. R0 then pauses
    on a call holding its 5 blocks, so the instance is empty with R1 at the queue head, whose
    admission takes its 24 cached blocks and one more: 25 of the 24 free. The reclaim for that
    head counted a chunk from zero (256 tokens, 16 blocks: "free enough") and discarded
    nothing; the engine went idle with R1 queued (RuntimeError). It now counts the head's
    blocks as admission does, and discards R0's idle context. Timed with synchronous
    scheduling: async scheduling's one-step admission lag moves R1's arrival, and the cache
    never runs out."""
    perf = copy.copy(perf_of(2))
    perf.schedules_ahead = False  # the scenario as found (vLLM's --no-async-scheduling)
    rs = workload([0.02, 0.11], [1, 329], [spec((66, 0.0, 0), final=1), spec(final=57)])
    rs = dataclasses.replace(rs, content=unique_content(rs.prompt_len))
    recs = []
    for ff in (False, True):
        s = make(
            "infercept",
            num_blocks=29,
            host_blocks=0,
            max_seqs=2,
            token_budget=256,
            predictor="oracle",
            perf=perf,
            swap_ns_per_token=20_000.0,
            prefix_caching=True,
        )
        rec, _ = run(rs, s, perf, fast_forward=ff)
        recs.append(rec)
        assert rec.num_preemptions.tolist() == [0, 1]
        assert s.augmentation.num_reclaims == 1
        # R1 re-hits its 24 cached blocks, R0 its 4 full ones after the discard
        assert s.augmentation.recompute_hit_tokens == 24 * 16 + 4 * 16
    for col in ("first_scheduled_ns", "first_token_ns", "finish_ns"):
        np.testing.assert_array_equal(getattr(recs[0], col), getattr(recs[1], col), err_msg=col)
