"""Lazy registration of a request's own blocks (:mod:`tidal.core.prefix_cache`) changes no
result: under random admissions, growth, bulk takes, swaps, preemptions and finishes, the lazy
manager and the eager one (``lazy=False``) agree on every observable after every operation."""

from __future__ import annotations

import copy

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.test_prefix_cache import BS, admit, make_requests, prompt_st
from tidal.core.prefix_cache import PrefixCachingKVManager
from tidal.core.request import Request, RequestState
from tidal.workload.content import PrefixContent

OPS = ["admit", "grow", "take", "finish", "preempt", "swap_out", "swap_in"]


def observe(kv: PrefixCachingKVManager, reqs: list[Request]) -> tuple[object, ...]:
    return (
        kv.num_free_blocks,
        kv.num_cached_free_blocks(),
        kv.num_evicted_blocks,
        kv.cache_hits,
        kv.num_free_host_blocks,
        tuple((r.num_blocks, r.num_computed_tokens, r.num_cached_tokens) for r in reqs),
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(prompt_st, st.integers(0, 6)), min_size=1, max_size=8),
    st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 99)), max_size=80),
    st.integers(4, 40),
)
@example([([(0, 2), (0, 2)], 0)], [("admit", 17), ("finish", 0)], 4)  # one own block, finished
@example(  # preempted mid-prompt, re-admitted: it re-hits its own blocks
    [([(0, 8), (1, 5)], 3), ([(0, 8)], 0)],
    [("admit", 2), ("grow", 4), ("preempt", 0), ("admit", 3), ("finish", 0)],
    12,
)
def test_lazy_and_eager_registration_agree(spec: list, ops: list, num_blocks: int) -> None:
    prompts, extra = [p for p, _ in spec], [e for _, e in spec]
    base = make_requests(prompts, extra)
    sides = []
    for lazy in (True, False):
        kv = PrefixCachingKVManager(num_blocks, BS, watermark=0.0, num_host_blocks=16, lazy=lazy)
        bulk = Request(-1, 0, 1, 1)  # the blocks charged by "take", owned by no request
        sides.append((kv, copy.deepcopy(base), list(range(len(base))), [], bulk))
    for op, x in ops:
        seen = []
        for kv, reqs, waiting, running, bulk in sides:
            before = kv.num_free_blocks
            seen.append(step(kv, reqs, waiting, running, op, x))
            if op == "take":
                bulk.num_blocks += before - kv.num_free_blocks
            kv.check([*(reqs[i] for i in running), bulk])
            seen.append(observe(kv, reqs))
            seen.append(tuple(kv.match_prefix(reqs[i]) for i in waiting))
        assert seen[:3] == seen[3:]


def step(kv: PrefixCachingKVManager, reqs: list, waiting: list, running: list, op: str, x: int):
    """One operation on one side; returns what it returned (both sides must agree)."""
    if op == "admit" and waiting:
        i = waiting[x % len(waiting)]
        hit = admit(kv, reqs[i], chunk=1 + x % 7)
        if hit >= 0:
            waiting.remove(i)
            running.append(i)
        return hit
    if op == "grow" and running:
        req = reqs[running[x % len(running)]]
        n = min(1 + x % 5, req.num_tokens - req.num_computed_tokens)
        if kv.host_blocks_of(req) or n <= 0:
            return None
        if kv.blocks_for(req.num_computed_tokens + n) - req.num_blocks > kv.num_free_blocks:
            return None
        kv.allocate(req, req.num_computed_tokens + n)
        req.num_computed_tokens += n
        return n
    if op == "take" and kv.num_free_blocks:
        kv.take(1 + x % kv.num_free_blocks)
        return None  # (never given back: the blocks stay charged)
    if op in ("finish", "preempt") and running:
        i = running.pop(x % len(running))
        req = reqs[i]
        if op == "finish":
            req.state = RequestState.FINISHED
        kv.free(req)
        kv.drop_swapped(req)
        req.num_computed_tokens = 0
        if op == "preempt":
            waiting.append(i)
        return i
    if op == "swap_out" and running:
        return kv.swap_out_blocks(reqs[running[x % len(running)]], 1 + x % 4)
    if op == "swap_in" and running:
        return kv.swap_in_blocks(reqs[running[x % len(running)]], 1 + x % 4)
    return None


def test_shared_runs_count_the_segments_another_request_has() -> None:
    """Prompts [a b], [a c], [d], [a b]: a is shared by three, b by two; c and d by none."""
    ids, lens, count = [0, 1, 0, 2, 3, 0, 1], [4, 4, 4, 4, 4, 4, 4], [2, 2, 1, 2]
    content = PrefixContent.from_segments(np.array(ids), np.array(lens), np.array(count))
    assert content.run_shared.tolist() == [2, 1, 0, 2]
    blocks = [content.block_content(i, i) for i in range(4)]
    assert [b.private_block(BS) for b in blocks] == [2, 1, 0, 2]
