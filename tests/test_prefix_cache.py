"""Prefix-caching KV manager: invariants under random operation sequences (hypothesis), the
hit against an independent per-block reference, and the plain manager's counts without content."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.core.kv import KVBlockManager
from tidal.core.prefix_cache import PrefixCachingKVManager
from tidal.core.request import Request
from tidal.workload.content import PrefixContent

BS = 4

# A prompt: a few segments drawn from a small vocabulary so that prefixes repeat.
segment = st.tuples(st.integers(0, 3), st.sampled_from([2, 4, 5, 8]))
prompt_st = st.lists(segment, min_size=1, max_size=4)


def make_requests(prompts: list[list[tuple[int, int]]], extra: list[int]) -> list[Request]:
    ids = [i for p in prompts for i, _ in p]
    lens = [n for p in prompts for _, n in p]
    content = PrefixContent.from_segments(
        np.array(ids), np.array(lens), np.array([len(p) for p in prompts])
    )
    reqs = []
    for i, p in enumerate(prompts):
        plen = sum(n for _, n in p) + extra[i]
        r = Request(i, 0, plen, 8)
        r.content = content.block_content(i, i)
        reqs.append(r)
    return reqs


def admit(kv: KVBlockManager, req: Request, chunk: int | None = None) -> int:
    hit, shared = kv.match_prefix(req)
    n = req.num_tokens - hit if chunk is None else min(chunk, req.num_tokens - hit)
    need = kv.blocks_for(hit + n) - shared
    if need > kv.num_free_blocks:
        return -1
    kv.commit_prefix(req, hit)
    kv.allocate(req, req.num_computed_tokens + n)
    req.num_computed_tokens += n
    return hit


def reference_hit(
    seen: set[tuple[object, ...]], req: Request, prompt: list[tuple[int, int]]
) -> int:
    """Longest run of leading full blocks whose content (the token ids up to the block's end)
    was computed before, capped at num_tokens − 1 tokens, from first principles."""
    tokens: list[object] = [tid for i, n in prompt for tid in [(i, n, k) for k in range(n)]]
    tokens += [("own", req.request_id, k) for k in range(req.num_tokens - len(tokens))]
    limit = (req.num_tokens - 1) // BS
    j = 0
    while j < limit and tuple(tokens[: (j + 1) * BS]) in seen:
        j += 1
    return j * BS


def remember(seen: set[tuple[object, ...]], req: Request, prompt: list[tuple[int, int]]) -> None:
    tokens: list[object] = [tid for i, n in prompt for tid in [(i, n, k) for k in range(n)]]
    tokens += [("own", req.request_id, k) for k in range(req.num_tokens - len(tokens))]
    for j in range(req.num_tokens // BS):
        seen.add(tuple(tokens[: (j + 1) * BS]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(prompt_st, st.integers(0, 6)), min_size=1, max_size=12))
def test_hit_is_longest_cached_full_block_prefix(spec: list[tuple[list, int]]) -> None:
    """With a cache that never evicts, each request's hit equals the reference's longest
    common full-block prefix with every earlier request's computed tokens."""
    prompts, extra = [p for p, _ in spec], [e for _, e in spec]
    reqs = make_requests(prompts, extra)
    kv = PrefixCachingKVManager(10_000, BS, watermark=0.0)
    seen: set[tuple[object, ...]] = set()
    running: list[Request] = []
    for req, prompt in zip(reqs, prompts, strict=True):
        hit = admit(kv, req)
        assert hit == reference_hit(seen, req, prompt)
        assert req.num_cached_tokens == hit
        remember(seen, req, prompt)
        running.append(req)
        kv.check(running)
    for req in running:
        kv.free(req)
    kv.check([])
    assert kv.num_free_blocks == kv.num_blocks
    assert kv.cache_hits == sum(r.num_cached_tokens for r in reqs)


OPS = ["admit", "grow", "take", "free", "preempt", "swap_out", "swap_in"]
op_st = st.tuples(st.sampled_from(OPS), st.integers(0, 99))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(prompt_st, st.integers(0, 6)), min_size=1, max_size=8),
    st.lists(op_st, max_size=60),
    st.integers(4, 40),
)
def test_invariants_under_random_operations(spec: list, ops: list, num_blocks: int) -> None:
    """No leaked or double-freed block, no eviction of a referenced block, free + used ==
    total, under admissions (chunked), growth, bulk takes, frees and preemptions."""
    prompts, extra = [p for p, _ in spec], [e for _, e in spec]
    reqs = make_requests(prompts, extra)
    kv = PrefixCachingKVManager(num_blocks, BS, watermark=0.0, num_host_blocks=16)
    waiting = list(reqs)
    running: list[Request] = []
    bulk = 0  # blocks charged by "take" (a decode pool's growth), owned by no request
    for op, x in ops:
        if op == "admit" and waiting:
            req = waiting[x % len(waiting)]
            if admit(kv, req, chunk=1 + x % 7) >= 0:
                waiting.remove(req)
                running.append(req)
        elif op == "grow" and running:
            req = running[x % len(running)]
            if kv.host_blocks_of(req):
                continue  # partly swapped out: it does not run
            n = min(1 + x % 5, req.num_tokens - req.num_computed_tokens)
            if n > 0 and kv.blocks_for(req.num_computed_tokens + n) - req.num_blocks <= (
                kv.num_free_blocks
            ):
                kv.allocate(req, req.num_computed_tokens + n)
                req.num_computed_tokens += n
        elif op == "take" and kv.num_free_blocks:
            k = 1 + x % kv.num_free_blocks
            kv.take(k)
            bulk += k
        elif op == "swap_out" and running:
            req = running[x % len(running)]
            kv.swap_out_blocks(req, 1 + x % 4)
        elif op == "swap_in" and running:
            req = running[x % len(running)]
            kv.swap_in_blocks(req, 1 + x % 4)
        elif op in ("free", "preempt") and running:
            req = running.pop(x % len(running))
            kv.free(req)
            kv.drop_swapped(req)
            req.num_computed_tokens = 0
            if op == "preempt":
                waiting.append(req)
        used_by_reqs_and_bulk_check(kv, running, bulk)
    for req in running:
        kv.free(req)
        kv.drop_swapped(req)
    used_by_reqs_and_bulk_check(kv, [], bulk)
    assert kv.num_free_host_blocks == kv.num_host_blocks
    assert kv.num_free_blocks == kv.num_blocks - bulk


def used_by_reqs_and_bulk_check(
    kv: PrefixCachingKVManager, running: list[Request], bulk: int
) -> None:
    # Bulk-taken blocks belong to no request: account for them as a phantom anonymous holder.
    phantom = Request(-1, 0, 1, 1)
    phantom.num_blocks = bulk
    kv.check([*running, phantom] if bulk else running)
    for r in running:
        assert r.num_blocks + kv.host_blocks_of(r) == kv.blocks_for(r.num_computed_tokens)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 2)), max_size=40), st.integers(8, 64))
def test_without_content_counts_match_the_plain_manager(ops: list, num_blocks: int) -> None:
    """Requests without content: the caching manager's free counts equal the plain one's."""
    plain = KVBlockManager(num_blocks, BS, watermark=0.0)
    cached = PrefixCachingKVManager(num_blocks, BS, watermark=0.0)
    live: list[tuple[Request, Request]] = []
    for i, (tokens, action) in enumerate(ops):
        if action < 2 or not live:
            a, b = Request(i, 0, tokens, 1), Request(i, 0, tokens, 1)
            need = plain.blocks_for(tokens)
            if need <= plain.num_free_blocks:
                assert cached.match_prefix(b) == (0, 0)
                for kv, r in ((plain, a), (cached, b)):
                    kv.commit_prefix(r, 0)
                    kv.allocate(r, tokens)
                    r.num_computed_tokens = tokens
                live.append((a, b))
        else:
            a, b = live.pop(0)
            plain.free(a)
            cached.free(b)
        assert plain.num_free_blocks == cached.num_free_blocks
    assert plain.cache_queries == cached.cache_queries


def test_hand_derived_shared_prompt_and_lru_eviction() -> None:
    """Two requests share a 16-token system prompt (4 blocks of 4): the second hits 16 tokens.
    Freed blocks are evicted in LRU order, each block table tail first."""
    prompts = [[(0, 16), (1, 4)], [(0, 16), (2, 4)], [(0, 16), (1, 4)]]
    a, b, c = make_requests(prompts, [0, 0, 0])
    kv = PrefixCachingKVManager(12, BS, watermark=0.0)
    assert admit(kv, a) == 0
    assert kv.num_free_blocks == 12 - 5
    assert admit(kv, b) == 16  # shares a's four prompt blocks, allocates one
    assert kv.num_free_blocks == 12 - 6
    kv.free(a)
    kv.free(b)
    assert kv.num_free_blocks == 12
    assert kv.num_cached_free_blocks() == 6
    kv.take(6)  # the six never-used blocks
    assert kv.num_cached_free_blocks() == 6
    kv.take(2)  # LRU head: a's question block, then b's (freed before the shared blocks)
    assert kv.num_cached_free_blocks() == 4
    kv.take(1)  # then the shared prompt's last block (a block table is freed tail first)
    assert kv.num_evicted_blocks == 3
    assert kv.match_prefix(c) == (12, 0)  # 3 shared blocks left, none referenced


def test_partly_referenced_node_evicts_only_its_free_tail() -> None:
    """b's 16-token prompt equals a's first segment: b may reuse only 12 tokens (the last one
    is recomputed, vLLM's cap), so once a is freed the segment's 4th block is free and
    evictable while the first 3 stay referenced by b; draining the free queue evicts exactly
    that block, and a request arriving later still hits b's 12 tokens."""
    a, b, c = make_requests([[(0, 16), (1, 4)], [(0, 16)], [(0, 16), (1, 4)]], [0, 0, 0])
    kv = PrefixCachingKVManager(8, BS, watermark=0.0)
    assert admit(kv, a) == 0
    assert admit(kv, b) == 12
    assert kv.num_free_blocks == 8 - 5 - 1  # b's 4th block is its own (a duplicate)
    d = Request(9, 0, 8, 1)  # no content: two anonymous blocks
    assert admit(kv, d) == 0
    kv.free(a)
    kv.free(d)
    kv.check([b])
    assert kv.num_free_blocks == 1 + 1 + 2  # a's question block, the segment's 4th, d's two
    kv.take(4)  # LRU: a's blocks (the segment's free tail only), then d's
    used_by_reqs_and_bulk_check(kv, [b], 4)
    assert kv.num_evicted_blocks == 2
    assert kv.match_prefix(c) == (12, 3)
