"""Augmented requests with prefix caching (issue 14, item 4): a discarded context re-hits its
own cached blocks when it resumes, and the waste accounting counts those tokens as spared."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.augment.helpers import augmented_workloads, make, spec, workload
from tests.augment.helpers import run as run_sched
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation
from tidal.workload.content import unique_content


def run(policy: str, caching: bool, ff: bool = True, rate: float = 3.0):
    cfg = {
        "model": "gpt-j-6b",
        "gpu": "a100-80gb",
        "workload": {"augmented": "infercept-mix", "rate": rate, "num_requests": 120},
        "augment": {"serving_policy": policy, "predictor": "oracle", "prefix_caching": caching},
        "fast_forward": ff,
        "seed": 4,
    }
    return run_simulation(load_config(cfg))


@pytest.mark.parametrize("policy", ["vllm", "infercept"])
def test_discarded_contexts_re_hit_their_blocks(policy: str) -> None:
    on, off = run(policy, True), run(policy, False)
    assert on.metrics["num_completed"] == off.metrics["num_completed"] == 120
    assert off.metrics["recompute_hit_tokens"] == 0
    assert on.metrics["recompute_hit_tokens"] > 0
    assert on.metrics["recompute_tokens"] < off.metrics["recompute_tokens"]
    # every spared token was a token to recompute: spared + recomputed ≤ all discarded
    assert on.metrics["prefix_cache_hits"] >= on.metrics["recompute_hit_tokens"]
    if policy == "vllm":  # vLLM discards every context: its cache pays off the most
        assert on.metrics["normalized_latency_p50_s"] <= off.metrics["normalized_latency_p50_s"]


def test_fast_forward_is_exact_with_cached_augmented_contexts() -> None:
    a, b = run("infercept", True, ff=True), run("infercept", True, ff=False)
    for col in ("first_token_ns", "finish_ns", "cached_tokens"):
        np.testing.assert_array_equal(a.columns[col], b.columns[col], err_msg=col)
    assert a.metrics["recompute_hit_tokens"] == b.metrics["recompute_hit_tokens"]


POLICIES = [("vllm", None), ("infercept", None), ("augserve", None), ("vllm", "swap")]


@given(
    rs=augmented_workloads(max_requests=16, max_gap_s=0.2, max_calls=4, max_call_ms=300.0),
    policy=st.sampled_from(POLICIES),
    spare=st.integers(0, 200),
    host=st.sampled_from([0, 40, 10_000]),
    block_size=st.sampled_from([4, 16]),
    max_seqs=st.integers(1, 12),
    tier=st.sampled_from([0, 6]),
)
def test_cached_augmented_contexts_keep_invariants_and_exact_fast_forward(
    rs, policy, spare, host, block_size, max_seqs, tier
):
    """Checked schedulers (every step asserts the KV, swap and host-tier invariants) over the
    prefix caching manager, with or without a host tier beside the swap space: fast-forward
    and stepping agree, every block and host block returns."""
    rs = dataclasses.replace(rs, content=unique_content(rs.prompt_len))
    longest = int((rs.prompt_len + rs.output_len + rs.extra["return_tokens"]).max())
    blocks = -(-longest // block_size) + 2 + spare
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
            predictor="oracle",
            swap_ns_per_token=20_000.0,
            prefix_caching=True,
            host_tier=tier,
        )
        rec, _ = run_sched(rs, s, fast_forward=ff)
        runs.append((rec, s))
    (a, s1), (b, s2) = runs
    for col in ("first_token_ns", "finish_ns", "num_preemptions", "cached_tokens"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    assert (a.finish_ns >= 0).all()
    assert s1.augmentation.recompute_tokens == s2.augmentation.recompute_tokens
    assert s1.augmentation.recompute_hit_tokens == s2.augmentation.recompute_hit_tokens
    assert s2.kv.num_free_blocks == s2.kv.num_blocks
    assert s2.kv.num_free_host_blocks == s2.kv.num_host_blocks
    if tier:
        event("host-tier hits" if s2.kv.cache_stats().host_hit_tokens else "no host-tier hit")


# ---------------------------------------------------------------- hand-derived re-hits
def _discarding(second_prompt: int | None, num_blocks: int):
    """Request A: a 40-token prompt, 10 tokens, a 50 ms call returning 5, 5 more; discarded
    at its call (computed 49 tokens: 3 full 16-token blocks + 1 partial). Request B (prompt
    ``second_prompt``, 3 tokens) runs during A's call. unit_perf: 1 ms + 1 µs per token."""
    arrivals, prompts, specs = [0.0], [40], [spec((10, 50.0, 5), final=5)]
    if second_prompt is not None:
        arrivals.append(0.02)
        prompts.append(second_prompt)
        specs.append(spec(final=3))
    rs = workload(arrivals, prompts, specs)
    on = make("infercept", intercept="discard", prefix_caching=True, num_blocks=num_blocks)
    rec_on, _ = run_sched(dataclasses.replace(rs, content=unique_content(rs.prompt_len)), on)
    off = make("infercept", intercept="discard", num_blocks=num_blocks)
    rec_off, _ = run_sched(rs, off)
    return on.augmentation, off.augmentation, rec_on, rec_off


def test_a_discarded_context_re_hits_its_full_blocks() -> None:
    on, off, rec_on, rec_off = _discarding(None, 64)
    # uncached: all 49 computed tokens are recomputed; cached: the 3 full blocks re-hit
    assert (off.recompute_tokens, off.recompute_hit_tokens) == (49, 0)
    assert (on.recompute_tokens, on.recompute_hit_tokens) == (1, 48)
    # 48 tokens fewer in the resume's prefill: 48 µs earlier
    assert rec_off.finish_ns[0] - rec_on.finish_ns[0] == 48_000


@pytest.mark.parametrize(("prompt_b", "evicted"), [(48, 0), (64, 1), (80, 2)])
def test_evicted_blocks_are_recomputed_tail_first(prompt_b: int, evicted: int) -> None:
    """7 blocks. A's discard frees its 4 (3 cached); 3 never-used blocks stay free. B holds
    ⌈(prompt + 2)/16⌉ blocks: 4 take free uncached ones, 5 and 6 evict A's cached blocks
    from its tail, so A re-hits 48 − 16·evicted tokens and recomputes the rest."""
    on, _, _, _ = _discarding(prompt_b, 7)
    assert on.recompute_hit_tokens == 48 - 16 * evicted
    assert on.recompute_tokens == 49 - on.recompute_hit_tokens


def test_expected_cached_tokens() -> None:
    from tidal.augment.waste import expected_cached_tokens

    # 100 tokens: 6 full blocks of 16 (96); 0.5 s at 400 tok/s claims 200 > 120 free → 80
    # over, 5 blocks evicted → 1 block left
    assert expected_cached_tokens(100, 16, 0.5, 120, 400.0) == 16
    assert expected_cached_tokens(100, 16, 0.5, 200, 400.0) == 96  # claims fit the free room
    assert expected_cached_tokens(100, 16, 0.5, 0, 1e6) == 0  # everything evicted
    assert expected_cached_tokens(15, 16, 10.0, 10**6, 0.0) == 0  # no full block


def test_infercept_discards_more_when_the_cache_keeps_the_context() -> None:
    """With the expected re-hit counted, Discard's waste is that of the uncached tail, so
    INFERCEPT's min-waste rule discards (and frees the GPU) where it preserved or swapped
    uncached — and recomputes less."""
    on, off = run("infercept", True), run("infercept", False)
    assert on.metrics["intercepts_discarded"] > 2 * off.metrics["intercepts_discarded"]
    assert on.metrics["recompute_tokens"] < off.metrics["recompute_tokens"]
    assert on.metrics["effective_throughput"] >= off.metrics["effective_throughput"]
