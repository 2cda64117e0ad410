"""Prefix caching of KV blocks (vLLM's automatic prefix caching), counted without tensors.

A request's tokens are *segments* with chain hashes (equal hashes: equal tokens from position
0); KV block ``j`` belongs to the segment holding its last token; one *node* per segment chain
hash keeps ``cached`` leading blocks in GPU memory, referenced by ``holders`` (``held =
max(holders) <= cached``), the rest free but evictable from the LRU head of
:mod:`tidal.core.prefix_queue`. A request's own blocks are registered lazily (same results); a
host tier (:mod:`tidal.core.host_cache`, optional) takes evictions and charges loads at commit.
Design, vLLM semantics and invariants: ``docs/design/prefix-cache.md``, :mod:`.prefix_cache_check`.
"""

from __future__ import annotations

from bisect import bisect_right

from tidal.core.block_content import MASK63, BlockContent, mix
from tidal.core.host_cache import HostTier
from tidal.core.kv import KVCacheManager, Reservation
from tidal.core.prefix_cache_check import check_index
from tidal.core.prefix_queue import CacheNode, PrefixQueue
from tidal.core.request import Request, RequestState

__all__ = [
    "MASK63",
    "BlockContent",
    "PrefixCachingKVManager",
    "SegmentIndex",
    "mix",
    "prefix_cache_kv",
]


def _private(content: BlockContent, bs: int) -> int:
    """``content.private_block(bs)``, without the call once known."""
    return content.private if content._bs == bs else content.private_block(bs)


_Hit = tuple[CacheNode, int, int]
"""A matched node: (node, its GPU blocks taken, its host blocks loaded)."""


class SegmentIndex:
    """The counting prefix cache's index over a :class:`PrefixQueue` pool (module docstring):
    which nodes each request references, and what it registered. Used by
    :class:`~tidal.core.kv.KVCacheManager`, built by :func:`prefix_cache_kv`."""

    supports_swap = True

    def __init__(self, pool: PrefixQueue, block_size: int, lazy: bool = True) -> None:
        """``lazy``: defer the registration of requests' own blocks (module docstring; the
        results are the same either way; with a host tier it is off)."""
        self.pool = pool
        self.block_size = block_size
        self._refs: dict[int, list[CacheNode]] = {}
        """Nodes each request references, in block order."""
        self._upto: dict[int, int] = {}
        """Blocks of each request already registered or left anonymous."""
        self._pending: tuple[int, list[_Hit]] | None = None
        self._lazy = lazy and pool.tier is None
        self._seen: set[int] = set()
        """Requests whose own blocks are registered eagerly (they left the GPU unfinished)."""

    def add_host_tier(self, tier: HostTier) -> None:
        """Evictions now move to ``tier``; lazy registration turns off (as in ``__init__``)."""
        if self.pool.tier is not None or self._refs:
            raise RuntimeError("a host tier is added once, before anything is cached")
        self.pool.tier = tier
        self._lazy = False

    def block_table(self, req: Request, num_blocks: int | None) -> list[int]:
        raise RuntimeError("block ids are not tracked by the counting prefix cache")

    def trim(self, req: Request, num_blocks: int) -> None:
        """Nothing to trim: the counting cache keeps no block ids (:meth:`block_table`)."""

    def forget_content(self, req: Request) -> None:
        """Nothing to forget: counted blocks have no content that a failed step could spoil."""

    # ------------------------------------------------------------------ matching
    def match(self, req: Request) -> tuple[int, int]:
        """(cached prefix tokens, how many of those blocks other requests hold) for a request
        about to be admitted with nothing computed; no state changes until commit_prefix."""
        content = req.content
        if (
            content is None
            or req.num_blocks
            or req.num_computed_tokens
            or (content.shared == 0 and self._lazy and req.request_id not in self._seen)
        ):  # (the last: only its own content, of which nothing was registered yet)
            self._pending = None
            return 0, 0
        self.pool.settle()
        bs = self.block_size
        limit = (req.num_tokens - 1) // bs
        hits: list[_Hit] = []
        hit = shared = lo = 0
        get = self.pool.nodes.get
        hashes = content.hashes
        bounds = content._bounds if content._bs == bs else None
        if bounds is None:
            bounds = content.bounds(bs)
        last = len(hashes)
        in_host = False  # the GPU prefix, then (host tier) a run of host blocks
        for s, hi in enumerate(bounds):
            if lo >= limit:
                break
            if hi == lo:
                continue
            node = get(hashes[s] if s < last else content.tail)
            if node is None:
                break
            take = min(node.cached, hi - lo, limit - lo)
            if in_host and take:  # GPU blocks after a host run: the prefix ends
                break
            h = 0
            if take == node.cached and node.host:  # its host blocks follow the GPU ones
                h = min(node.host, hi - lo - take, limit - lo - take)
            if take + h == 0:
                break
            if h:
                in_host = True
            hits.append((node, take, h))
            hit += take + h
            shared += min(take, node.held)
            if take + h < hi - lo:
                break
            lo = hi
        self._pending = (req.request_id, hits)
        return hit * bs, shared

    def commit(self, req: Request, hit_tokens: int) -> int:
        """Admit ``req`` with the match just returned by :meth:`match`: reference its cached
        blocks (they leave the free queue) and count them as computed. Returns the host-tier
        blocks loaded (the manager charges their transfer)."""
        pending, self._pending = self._pending, None
        if not hit_tokens:
            return 0
        self.pool.settle()
        assert pending is not None, "commit_prefix without match_prefix"
        assert pending[0] == req.request_id, "commit_prefix for another request"
        rid = req.request_id
        refs = self._refs.setdefault(rid, [])
        loads = 0
        for node, take, h in pending[1]:
            node.holders[rid] = take + h
            refs.append(node)
            if take > node.held:
                self.pool.num_free_blocks -= take - node.held
                node.held = take
                if node.held == node.cached:
                    self.pool.unqueue(node)
            if h:  # load from the host tier into fresh GPU blocks (taken below)
                assert self.pool.tier is not None
                self.pool.tier.take_front(node, h)
                node.cached = node.held = take + h
                loads += h
        if loads:
            self.pool.take_now(loads)
        blocks = hit_tokens // self.block_size
        self._upto[rid] = blocks
        req.num_blocks = blocks
        req.num_computed_tokens = hit_tokens
        return loads

    # ------------------------------------------------------------------ registration
    def _register(self, req: Request, full: int) -> None:
        """Register ``req``'s full blocks up to ``full`` (vLLM caches a block once it is full
        of scheduled tokens); blocks another request cached first stay anonymous."""
        content = req.content
        rid = req.request_id
        start = self._upto.get(rid, 0)
        if content is None or full <= start:
            return
        self._upto[rid] = full
        if self._lazy and rid not in self._seen:  # its own blocks wait for _settle
            bs = self.block_size
            p = content.private if content._bs == bs else content.private_block(bs)
            if p < full:
                if p <= start:
                    return
                full = p
        self._walk(req, content, start, full)

    def _settle(self, req: Request) -> None:
        """Register the own blocks that lazy registration skipped, before ``req`` leaves the
        GPU unfinished (it may re-hit them), and register eagerly from then on. The state is
        the one eager registration would have left: no other request can see those blocks,
        so none of them had been registered by another, nor evicted (they were held)."""
        rid = req.request_id
        if not self._lazy or rid in self._seen:
            return
        self._seen.add(rid)
        content = req.content
        if content is not None:
            start, full = _private(content, self.block_size), self._upto.get(rid, 0)
            if full > start:
                self._walk(req, content, start, full)

    def _walk(self, req: Request, content: BlockContent, start: int, full: int) -> None:
        """Register ``req``'s blocks ``[start, full)`` node by node (:meth:`_register`)."""
        rid = req.request_id
        refs = self._refs.get(rid)
        if refs is None:
            refs = self._refs[rid] = []
        nodes = self.pool.nodes
        bs = self.block_size
        hashes = content.hashes
        bounds = content._bounds if content._bs == bs else None
        if bounds is None:
            bounds = content.bounds(bs)
        last = len(hashes)
        if start:
            s = bisect_right(bounds, start)
            lo = bounds[s - 1] if s else 0
        else:  # (segments shorter than a block are skipped below)
            s = lo = 0
        while start < full:
            hi = bounds[s]
            if hi == start:  # a segment shorter than a block owns no block
                s += 1
                continue
            b = full if full < hi else hi
            key = hashes[s] if s < last else content.tail
            node = nodes.get(key)
            if node is None:
                if start == lo:  # else this request's first blocks of the node are anonymous
                    node = nodes[key] = CacheNode(key, lo, hi)
                    node.cached = node.held = node.holders[rid] = b - lo
                    refs.append(node)
            else:
                ext = node.holders.get(rid)
                # extend only our own copy at the node's frontier; another's copy: ours stays
                # anonymous (a duplicate); a node left only in the host tier is adopted
                own = ext is not None and ext == start - lo and node.cached == ext
                adopt = not own and node.host > 0 and not node.cached and not node.holders
                if own or (adopt and start == lo):
                    old = node.cached
                    node.cached = node.held = node.holders[rid] = b - lo
                    if adopt:
                        refs.append(node)
                    if node.host:  # the new GPU copy supersedes those host blocks
                        assert self.pool.tier is not None
                        self.pool.tier.take_front(node, node.cached - old)
            lo = start = hi
            s += 1

    # ------------------------------------------------------------------ mutation
    def allocate(self, req: Request, num_tokens: int) -> None:
        bs = self.block_size
        need = -(-num_tokens // bs) - req.num_blocks
        if need > 0:
            self.pool.take_now(need)  # (settles the deferred bulk takes first)
            req.num_blocks += need
        elif self.pool.debt:
            self.pool.settle()
        content = req.content
        if content is not None:
            full, rid = num_tokens // bs, req.request_id
            upto = self._upto.get(rid, 0)
            if full > upto:
                if (
                    self._lazy
                    and (content.shared == 0 or (content._bs == bs and upto >= content.private))
                    and rid not in self._seen
                ):  # only own blocks: registered at _settle, if ever
                    self._upto[rid] = full
                    return
                refs = self._refs.get(rid)
                if refs:  # our last node, at its frontier: extend it (what _walk would do)
                    node = refs[-1]
                    ext, lo = node.holders[rid], node.lo
                    if lo + ext == upto == lo + node.cached and full <= node.hi and not node.host:
                        node.cached = node.held = node.holders[rid] = full - lo
                        self._upto[rid] = full
                        return
                self._register(req, full)

    def free(self, req: Request) -> None:
        """Release ``req``'s blocks: its anonymous ones first, then its nodes from the last,
        so the LRU evicts its tail first (vLLM frees a block table in reverse order)."""
        self.pool.settle()
        rid = req.request_id
        own = 0  # a finished request's own registered blocks (lazy: never registered)
        content = req.content
        if content is not None:
            bs = self.block_size
            full = min(req.num_computed_tokens // bs, req.num_blocks)
            if not self._lazy or rid in self._seen:
                self._register(req, full)
                if req.state >= RequestState.FINISHED:
                    self._seen.discard(rid)
            elif req.state >= RequestState.FINISHED:
                upto = self._upto.get(rid, 0)
                p = 0 if content.shared == 0 else _private(content, bs)
                if full > upto:
                    if upto < p:
                        self._register(req, full)
                    upto = full
                if upto > p:
                    own = upto - p
            else:
                self._settle(req)
                self._register(req, full)
        refs = self._refs.pop(rid, None)
        self._upto.pop(rid, None)
        registered = own
        freed = 0
        tail: list[CacheNode] = []
        if refs:
            for node in reversed(refs):
                holders = node.holders
                ext = holders.pop(rid)
                registered += ext
                if ext == node.held:
                    node.held = max(holders.values()) if holders else 0
                    if node.held < ext:
                        freed += ext - node.held
                        tail.append(node)
        anon = req.num_blocks - registered
        if anon > 0:
            self.pool.push_anon(anon)
        if own:
            self.pool.push_own(own)
        for node in tail:
            self.pool.push_node(node)
        self.pool.num_free_blocks += anon + own + freed
        req.num_blocks = 0
        assert self.pool.num_free_blocks <= self.pool.num_blocks

    def release_tail(self, req: Request, m: int) -> None:
        """Free ``m`` (> 0, at most its GPU blocks) of ``req``'s last GPU blocks, which the
        manager moves to host memory: its anonymous blocks first, then its registered ones
        from the last node; their GPU copies stay cached (evictable) if no one else
        references them, so a later admission may re-hit them."""
        rid = req.request_id
        if req.content is not None:
            self._settle(req)
            self._register(req, min(req.num_computed_tokens // self.block_size, req.num_blocks))
        refs = self._refs.get(rid, [])
        registered = sum(node.holders[rid] for node in refs)
        anon = min(m, req.num_blocks - registered)
        self.pool.push_anon(anon)
        freed, left = anon, m - anon
        while left:
            node = refs[-1]
            ext = node.holders[rid]
            k = min(left, ext)
            left -= k
            if k == ext:
                del node.holders[rid]
                refs.pop()
            else:
                node.holders[rid] = ext - k
            if ext == node.held:
                node.held = max(node.holders.values()) if node.holders else 0
                if node.held < ext:
                    freed += ext - node.held
                    self.pool.push_node(node)
        req.num_blocks -= m
        self._upto[rid] = min(self._upto.get(rid, 0), req.num_blocks)
        self.pool.num_free_blocks += freed

    # ------------------------------------------------------------------ queries
    def check(self, resident: list[Request]) -> None:
        """Assert the index's invariants (:func:`tidal.core.prefix_cache_check.check_index`)."""
        check_index(self.pool, self._refs, resident)


def prefix_cache_kv(
    num_blocks: int,
    block_size: int = 16,
    watermark: float = 0.01,
    num_host_blocks: int = 0,
    host_cache_blocks: int = 0,
    load_ns_per_block: float = 0.0,
    lazy: bool = True,
    reservation: Reservation | None = None,
) -> KVCacheManager:
    """A KV manager with counting prefix caching: a :class:`PrefixQueue` pool, a
    :class:`SegmentIndex`, ``num_host_blocks`` of swap space, if ``host_cache_blocks`` > 0 a
    host tier whose hits cost ``load_ns_per_block`` each (the host link), and ``reservation``
    run after each free event."""
    tier = HostTier(host_cache_blocks, load_ns_per_block) if host_cache_blocks > 0 else None
    pool = PrefixQueue(num_blocks, tier)
    index = SegmentIndex(pool, block_size, lazy)
    return KVCacheManager(
        num_blocks,
        block_size,
        watermark,
        num_host_blocks,
        pool=pool,
        index=index,
        host_tier=tier,
        reservation=reservation,
    )


PrefixCachingKVManager = prefix_cache_kv
"""The factory's earlier name (it was a subclass; callers construct it the same way)."""
