"""Prefix caching in the real engine: cached blocks are shared by block tables, greedy outputs
are token-identical with caching on and off (batching, chunking, preemption), and fewer prefill
tokens are computed."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.runtime.helpers import run, tiny_engine


def shared_prompts(n: int, seed: int, system: int = 24) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    head = [rng.integers(0, 256, system).tolist() for _ in range(2)]
    return [head[i % 2] + rng.integers(0, 256, int(rng.integers(1, 20))).tolist() for i in range(n)]


def computed_prefill(rt) -> int:
    return rt.scheduler.kv.cache_queries - rt.scheduler.kv.cache_hits


def test_outputs_identical_and_fewer_tokens_prefilled() -> None:
    ps = shared_prompts(8, seed=3)
    outs = {}
    for caching in (False, True):
        rt = tiny_engine(token_budget=32, max_seqs=8, prefix_caching=caching)
        outs[caching], reqs = run(rt, ps, 10, arrive_at_step=[0, 0, 1, 3, 4, 9, 12, 12])
        if caching:
            kv = rt.scheduler.kv
            assert kv.cache_hits > 0
            assert any(r.num_cached_tokens >= 20 for r in reqs)
            assert computed_prefill(rt) < sum(len(p) for p in ps)
    assert outs[True] == outs[False]


def test_outputs_identical_after_preemption_with_caching() -> None:
    ps = shared_prompts(6, seed=4)
    outs = {}
    for caching in (False, True):
        rt = tiny_engine(num_kv_blocks=30, token_budget=64, max_seqs=8, prefix_caching=caching)
        outs[caching], _ = run(rt, ps, 16)
        assert rt.scheduler.num_preemptions > 0
    assert outs[True] == outs[False]


@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(0, 1000),
    blocks=st.integers(24, 80),
    budget=st.sampled_from([16, 32, 128]),
)
def test_random_shared_workloads_are_token_identical(seed: int, blocks: int, budget: int) -> None:
    """Every step checks the manager's invariants (refcounts, free queue, no leak)."""
    ps = shared_prompts(5, seed=seed, system=12 + seed % 20)
    arrive = [0, 1, 1, 4, 6]
    outs = []
    for caching in (False, True):
        rt = tiny_engine(
            num_kv_blocks=blocks, token_budget=budget, max_seqs=4, prefix_caching=caching
        )
        outs.append(run(rt, ps, 8, arrive_at_step=arrive)[0])
    assert outs[0] == outs[1]
