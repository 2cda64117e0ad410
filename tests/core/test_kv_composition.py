"""The composed KV manager (block pool + prefix index + host tier + reservation), property-based:
for every composition, random admit / grow / take / swap / free sequences keep the block balance
(free + used + cached-free == total, counted independently of the manager), a prefix hit never
covers the whole prompt nor content never computed, a reservation never over-commits nor
shrinks below its floor, and an over-committing allocation is refused without changing state.
``cache_stats()`` is checked against the same independent counts."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_prefix_cache import BS, make_requests, prompt_st, reference_hit
from tidal.cluster.kv import ReserveToTarget, reservation_of, reserving_kv
from tidal.core.kv import KVCacheManager
from tidal.core.prefix_blocks import block_hash_kv
from tidal.core.prefix_cache import prefix_cache_kv
from tidal.core.request import Request, RequestState

HOST = 8
COMPOSITIONS: dict[str, Callable[[int], KVCacheManager]] = {
    "plain": lambda n: KVCacheManager(n, BS, 0.0, num_host_blocks=HOST),
    "ids": lambda n: KVCacheManager(n, BS, 0.0, track_ids=True),
    "segments": lambda n: prefix_cache_kv(n, BS, 0.0, num_host_blocks=HOST),
    "segments+host-tier": lambda n: prefix_cache_kv(n, BS, 0.0, 0, 6, load_ns_per_block=2.0),
    "block-hash": lambda n: block_hash_kv(n, BS, 0.0),
    "reserve": lambda n: reserving_kv(False, n, BS, 2, n // 2),
    "reserve+segments": lambda n: reserving_kv(True, n, BS, 2, n // 2),
}
OPS = ["admit", "admit", "grow", "grow", "take", "swap-out", "swap-in", "free", "preempt"]


def tokens_of(req: Request, prompt: list[tuple[int, int]]) -> list[int]:
    """Token ids for the block-hash index: equal segments give equal ids, the rest is own."""
    toks = [i * 1000 + n * 100 + k for i, n in prompt for k in range(n)]
    return toks + [10**6 + req.request_id * 1000 + k for k in range(req.num_tokens - len(toks))]


class Model:
    """The test's own account of who holds what (independent of the manager)."""

    def __init__(self, kv: KVCacheManager, reqs: list[Request]) -> None:
        self.kv, self.waiting, self.running = kv, list(reqs), list[Request]()
        self.swapped: dict[int, Request] = {}
        self.bulk = 0
        self.queries = self.hits = 0

    def resident(self) -> list[Request]:
        phantom = Request(-1, 0, 1, 1)  # blocks charged in bulk belong to no request
        phantom.num_blocks = self.bulk
        return [*self.running, phantom] if self.bulk else list(self.running)

    def check(self) -> None:
        kv, st_ = self.kv, self.kv.cache_stats()
        kv.check(self.resident())
        assert 0 <= st_.num_cached_free_blocks <= st_.num_free_blocks <= st_.num_blocks
        used = kv.num_blocks - kv.num_free_blocks
        held = sum(r.num_blocks for r in self.running) + self.bulk
        if kv.index is None:  # no sharing: the balance is exact
            assert st_.num_free_blocks + held == st_.num_blocks
        else:  # shared prefix blocks count once
            assert used <= held
        anon_free = st_.num_free_blocks - st_.num_cached_free_blocks
        assert anon_free + st_.num_cached_free_blocks + used == st_.num_blocks
        assert (st_.queries, st_.hits) == (self.queries, self.hits)
        swapped = sum(kv.host_blocks_of(r) for r in self.swapped.values())
        assert kv.num_free_host_blocks + swapped == kv.num_host_blocks


def admit(m: Model, req: Request, chunk: int, seen: set, prompt: list) -> None:
    kv = m.kv
    hit, shared = kv.match_prefix(req)
    assert 0 <= hit < req.num_tokens, "a hit covers the whole prompt"
    assert hit % BS == 0
    assert 0 <= shared <= hit // BS
    assert hit <= reference_hit(seen, req, prompt), "a hit on content never computed"
    n = min(chunk, req.num_tokens - hit)
    if kv.blocks_for(hit + n) - shared > kv.num_free_blocks:
        return
    kv.commit_prefix(req, hit)
    m.queries += req.num_tokens
    m.hits += hit
    assert req.num_computed_tokens == hit
    assert 0 <= req.num_cached_tokens < req.num_tokens
    kv.allocate(req, hit + n)
    req.num_computed_tokens = hit + n
    remember(seen, req, prompt)
    kv.pending_load_ns = 0
    m.waiting.remove(req)
    m.running.append(req)


def remember(seen: set, req: Request, prompt: list) -> None:
    """The reference learns ``req``'s full blocks of computed tokens (an index may register a
    block as soon as it is full of scheduled tokens)."""
    tokens: list[object] = [tid for i, n in prompt for tid in [(i, n, k) for k in range(n)]]
    tokens += [("own", req.request_id, k) for k in range(req.num_tokens - len(tokens))]
    for j in range(req.num_computed_tokens // BS):
        seen.add(tuple(tokens[: (j + 1) * BS]))


def refused_overcommit(kv: KVCacheManager, req: Request) -> None:
    """Asking for more blocks than are free raises and leaves every count as it was."""
    before = (kv.num_free_blocks, req.num_blocks, kv.num_blocks)
    with pytest.raises(RuntimeError, match="overcommit"):
        kv.allocate(req, req.num_computed_tokens + (kv.num_free_blocks + 1) * BS)
    assert (kv.num_free_blocks, req.num_blocks, kv.num_blocks) == before


def step(m: Model, op: str, x: int, seen: set, prompt_of: dict) -> None:
    kv = m.kv
    if op == "admit" and m.waiting:
        req = m.waiting[x % len(m.waiting)]
        admit(m, req, 1 + x % 9, seen, prompt_of[req.request_id])
    elif op == "grow" and m.running:
        req = m.running[x % len(m.running)]
        n = min(1 + x % 5, req.num_tokens - req.num_computed_tokens)
        if x % 7 == 0:
            refused_overcommit(kv, req)
        elif n > 0 and kv.blocks_for(req.num_computed_tokens + n) - req.num_blocks <= (
            kv.num_free_blocks
        ):
            kv.allocate(req, req.num_computed_tokens + n)
            req.num_computed_tokens += n
            remember(seen, req, prompt_of[req.request_id])
    elif op == "take" and kv.num_free_blocks and x % 3 == 0:
        kv.take(1)
        m.bulk += 1
    elif op == "swap-out" and m.running and not kv.track_ids and kv.num_free_host_blocks:
        req = m.running[x % len(m.running)]
        if kv.swap_out(req):
            m.running.remove(req)
            m.swapped[req.request_id] = req
    elif op == "swap-in" and m.swapped:
        req = list(m.swapped.values())[x % len(m.swapped)]
        if kv.swap_in(req):
            del m.swapped[req.request_id]
            m.running.append(req)
    elif op in ("free", "preempt") and m.running:
        req = m.running.pop(x % len(m.running))
        if op == "free":
            req.state = RequestState.FINISHED
        kv.free(req)
        req.num_computed_tokens = 0
        if op == "preempt":
            m.waiting.append(req)


@pytest.mark.parametrize("name", sorted(COMPOSITIONS))
@settings(max_examples=40, deadline=None)
@given(
    spec=st.lists(st.tuples(prompt_st, st.integers(0, 6)), min_size=1, max_size=8),
    ops=st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 99)), min_size=20, max_size=70),
    num_blocks=st.integers(8, 40),
)
def test_block_balance_and_hits(name: str, spec: list, ops: list, num_blocks: int) -> None:
    prompts, extra = [p for p, _ in spec], [e for _, e in spec]
    reqs = make_requests(prompts, extra)
    prompt_of = {r.request_id: p for r, p in zip(reqs, prompts, strict=True)}
    for r in reqs:
        r.token_ids = tokens_of(r, prompt_of[r.request_id])
    kv = COMPOSITIONS[name](num_blocks)
    m = Model(kv, reqs)
    seen: set[tuple[object, ...]] = set()
    for op, x in ops:
        step(m, op, x, seen, prompt_of)
        m.check()
    for req in list(m.running):
        kv.free(req)
    m.running.clear()
    m.check()
    assert kv.num_free_blocks == kv.num_blocks - m.bulk


@settings(max_examples=100, deadline=None)
@given(
    caching=st.booleans(),
    num_blocks=st.integers(16, 64),
    floor=st.integers(0, 16),
    ops=st.lists(st.tuples(st.integers(1, 30), st.integers(-5, 40)), min_size=1, max_size=40),
)
def test_reservation_never_overcommits(
    caching: bool, num_blocks: int, floor: int, ops: list[tuple[int, int]]
) -> None:
    """Each step admits a request of ``tokens`` (if it fits) and moves the target; after every
    free event: no more free blocks than the target unless at the floor, never below the
    floor, blocks held by requests never reserved, and ``reserved`` is exactly what left."""
    kv = reserving_kv(caching, num_blocks, BS, 0, floor)
    res = reservation_of(kv)
    assert isinstance(res, ReserveToTarget)
    gave: list[int] = []
    res.on_reserve = gave.append
    running: list[Request] = []
    for i, (tokens, target) in enumerate(ops):
        res.set_target(target)
        req = Request(i, 0, tokens, 1)
        if kv.blocks_for(tokens) <= kv.num_free_blocks:
            kv.commit_prefix(req, 0)
            kv.allocate(req, tokens)
            req.num_computed_tokens = tokens
            running.append(req)
        if running and i % 2:
            req = running.pop(0)
            req.state = RequestState.FINISHED
            kv.free(req)
            assert kv.num_free_blocks <= res.target_free or kv.num_blocks <= floor
        held = sum(r.num_blocks for r in running)
        assert kv.num_free_blocks >= 0
        assert kv.num_blocks >= min(floor, num_blocks)
        assert held + kv.num_free_blocks == kv.num_blocks, "reserved a held block"
        assert res.reserved == num_blocks - kv.num_blocks == sum(gave)
        assert kv.cache_stats().reserved_blocks == res.reserved
        kv.check(running)
