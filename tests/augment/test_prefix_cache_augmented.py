"""Augmented requests with prefix caching (issue 14, item 4): a discarded context re-hits its
own cached blocks when it resumes, and the waste accounting counts those tokens as spared."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.augment.helpers import augmented_workloads, make
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
)
def test_cached_augmented_contexts_keep_invariants_and_exact_fast_forward(
    rs, policy, spare, host, block_size, max_seqs
):
    """Checked schedulers (every step asserts the KV and swap invariants) over the prefix
    caching manager: fast-forward and stepping agree, every block and host block returns."""
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
        )
        rec, _ = run_sched(rs, s, fast_forward=ff)
        runs.append((rec, s))
    (a, s1), (b, s2) = runs
    for col in ("first_token_ns", "finish_ns", "num_preemptions", "cached_tokens"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    assert (a.finish_ns >= 0).all()
    assert s1.recompute_tokens == s2.recompute_tokens
    assert s1.recompute_hit_tokens == s2.recompute_hit_tokens
    assert s2.kv.num_free_blocks == s2.kv.num_blocks
    assert s2.kv.num_free_host_blocks == s2.kv.num_host_blocks
