"""Paged KV-cache block accounting (vLLM v1's ``KVCacheManager``, without tensors).

One manager, composed of small parts (no subclass per feature):

* a **block pool** (:class:`~tidal.core.block_pool.BlockPool`): how many GPU blocks there are
  and are free; a caching pool keeps evictable content in its free blocks
  (:class:`~tidal.core.prefix_queue.PrefixQueue`,
  :class:`~tidal.core.prefix_blocks.CachingBlockPool`);
* a **prefix index** (:class:`PrefixIndex`, optional): which cached blocks a new request may
  reuse, and what each request's blocks hold (:mod:`tidal.core.prefix_cache` counts segments of
  prompt content, :mod:`tidal.core.prefix_blocks` hashes the token ids of physical blocks);
* a **host tier** (:class:`~tidal.core.host_cache.HostTier`, optional): the prefix cache's second
  tier in host memory, and the swap space (:class:`~tidal.core.block_pool.SwapSpace`) that
  preempted requests' blocks move to;
* a **reservation strategy** (:class:`Reservation`, optional): what happens to free blocks after
  each free event (a cluster instance gives them back to the GPU, :mod:`tidal.cluster.kv`).

Invariant: ``num_free_blocks + (blocks held by GPU-resident requests, each shared block once)
== num_blocks`` (without prefix caching: ``num_free_blocks + Σ request.num_blocks``), of the free
blocks ``num_cached_free_blocks()`` still hold reusable content; likewise for the swap space
(``check`` asserts it, with each part's own invariants). A request holding ``t`` computed
tokens holds ``ceil(t / block_size)`` blocks. Block ids are optional: the simulator only
counts; the real engine asks for a request's block table, materialised lazily from the pool's
free ids so that bulk accounting (the decode pool charges many requests one block each in O(1))
and id tables never disagree. Statistics are read through one method,
:meth:`KVCacheManager.cache_stats`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from tidal.core.block_pool import BlockPool, SwapSpace
from tidal.core.host_cache import HostTier
from tidal.core.request import Request


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class KVCacheStats:
    """A KV manager's counters at one moment (what every metrics reader reads)."""

    prefix_caching: bool
    num_blocks: int
    num_free_blocks: int
    num_cached_free_blocks: int
    """Free blocks still holding reusable prefix content."""
    queries: int
    """Prefix cache: tokens of the admitted requests (vLLM's ``prefix_cache_queries``)."""
    hits: int
    """Of those, tokens found cached (vLLM's ``prefix_cache_hits``)."""
    evicted_blocks: int
    """Cached GPU blocks whose content was lost to a new owner."""
    host_tier_blocks: int
    """Capacity of the prefix cache's host tier (0: none)."""
    host_hit_tokens: int
    """Of ``hits``, tokens loaded from the host tier."""
    host_load_ns: int
    """Transfer time charged for host-tier hits."""
    host_evicted_blocks: int
    """Host-tier blocks dropped for capacity."""
    reserved_blocks: int
    """Blocks a reservation gave back for good (:mod:`tidal.cluster.kv`)."""

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


class PrefixIndex(Protocol):
    """Which blocks a request holds and which of them hold content others may reuse. The
    manager owns the counters and the swap space; the index moves blocks in and out of the
    pool (evicting cached content through it)."""

    supports_swap: bool
    """Whether whole requests may be swapped out (partial swaps need a counting index)."""

    def match(self, req: Request) -> tuple[int, int]: ...
    def commit(self, req: Request, hit_tokens: int) -> int: ...
    def allocate(self, req: Request, num_tokens: int) -> None: ...
    def free(self, req: Request) -> None: ...
    def release_tail(self, req: Request, count: int) -> None: ...
    def block_table(self, req: Request, num_blocks: int | None) -> list[int]: ...
    def trim(self, req: Request, num_blocks: int) -> None: ...
    def forget_content(self, req: Request) -> None: ...
    def add_host_tier(self, tier: HostTier) -> None: ...
    def check(self, resident: list[Request]) -> None: ...


class Reservation(Protocol):
    """Runs after every free event, over the pool (which it may shrink)."""

    reserved: int

    def after_free(self, pool: BlockPool) -> None: ...


class KVCacheManager:
    """The KV manager the engine talks to: a block pool, an optional prefix index, host tier
    and reservation (module docstring). Public methods keep vLLM's block manager semantics."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int = 16,
        watermark: float = 0.01,
        num_host_blocks: int = 0,
        track_ids: bool = False,
        *,
        pool: BlockPool | None = None,
        index: PrefixIndex | None = None,
        host_tier: HostTier | None = None,
        reservation: Reservation | None = None,
    ) -> None:
        """Without ``pool`` a plain counting pool of ``num_blocks`` (ids if ``track_ids``);
        the factories :func:`tidal.core.prefix_cache.prefix_cache_kv` and
        :func:`tidal.core.prefix_blocks.block_hash_kv` pass a caching pool and its index."""
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        self.pool = pool if pool is not None else BlockPool(num_blocks, track_ids)
        if self.pool.num_blocks != num_blocks:
            raise ValueError("the pool's num_blocks differs from the manager's")
        self.block_size = block_size
        self.watermark_blocks = int(watermark * num_blocks)
        self.index = index
        self.host_tier = host_tier
        self.reservation = reservation
        self.swap = SwapSpace(num_host_blocks)
        self._tables: dict[int, list[int]] = {}
        """Block ids of each request (no prefix index: the index keeps its own)."""
        self.cache_queries = 0
        """Prefix cache: tokens of the admitted requests (vLLM's ``prefix_cache_queries``)."""
        self.cache_hits = 0
        """Prefix cache: of those, tokens found cached (vLLM's ``prefix_cache_hits``)."""
        self.pending_load_ns = 0
        """Host-tier prefix hits admitted but not yet charged to a step (the engine adds it
        to the admitting step's ``stall_ns`` and clears it)."""

    # ------------------------------------------------------------------ queries
    @property
    def prefix_caching(self) -> bool:
        return self.index is not None

    @property
    def track_ids(self) -> bool:
        return self.pool.track_ids

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_host_blocks(self) -> int:
        return self.swap.num_host_blocks

    @property
    def num_free_host_blocks(self) -> int:
        return self.swap.num_free_host_blocks

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def num_used_blocks(self) -> int:
        return self.pool.num_blocks - self.pool.num_free_blocks

    def usage(self) -> float:
        return (self.pool.num_blocks - self.pool.num_free_blocks) / self.pool.num_blocks

    def num_cached_free_blocks(self) -> int:
        """Free blocks still holding reusable prefix content (none without prefix caching)."""
        return self.pool.num_cached_free_blocks()

    @property
    def num_evicted_blocks(self) -> int:
        return self.pool.num_evicted_blocks

    def can_admit(self, num_new_blocks: int) -> bool:
        """Whether a *new* request may take ``num_new_blocks``, keeping the watermark free."""
        return self.pool.num_free_blocks - num_new_blocks >= self.watermark_blocks

    def host_blocks_of(self, req: Request) -> int:
        return self.swap.held.get(req.request_id, 0)

    def cache_stats(self) -> KVCacheStats:
        """All counters, typed (the one way metrics read a manager)."""
        tier = self.host_tier
        return KVCacheStats(
            prefix_caching=self.index is not None,
            num_blocks=self.pool.num_blocks,
            num_free_blocks=self.pool.num_free_blocks,
            num_cached_free_blocks=self.pool.num_cached_free_blocks(),
            queries=self.cache_queries,
            hits=self.cache_hits,
            evicted_blocks=self.pool.num_evicted_blocks,
            host_tier_blocks=0 if tier is None else tier.capacity,
            host_hit_tokens=0 if tier is None else tier.hit_tokens,
            host_load_ns=0 if tier is None else tier.load_ns,
            host_evicted_blocks=0 if tier is None else tier.num_evicted_blocks,
            reserved_blocks=0 if self.reservation is None else self.reservation.reserved,
        )

    # ------------------------------------------------------------------ prefix
    def match_prefix(self, req: Request) -> tuple[int, int]:
        """(cached prefix tokens, of its blocks those referenced by others) that admitting
        ``req`` would reuse; no state changes until :meth:`commit_prefix`."""
        if self.index is None:
            return 0, 0
        return self.index.match(req)

    def commit_prefix(self, req: Request, hit_tokens: int) -> None:
        """Admit ``req`` with the prefix :meth:`match_prefix` found (counts the query)."""
        self.cache_queries += req.num_tokens
        self.cache_hits += hit_tokens
        if req.num_cached_tokens < 0:
            req.num_cached_tokens = hit_tokens
        if self.index is None:
            return
        loads = self.index.commit(req, hit_tokens)
        if loads:
            tier = self.host_tier
            assert tier is not None
            ns = math.ceil(loads * tier.load_ns_per_block)
            self.pending_load_ns += ns
            tier.load_ns += ns
            tier.hit_tokens += loads * self.block_size

    def add_host_tier(self, num_blocks: int, load_ns_per_block: float) -> None:
        """A prefix-cache host tier of ``num_blocks`` (a cluster engine's, given at its start,
        before anything is cached)."""
        if self.index is None:
            raise RuntimeError("a host tier needs prefix caching")
        if self.host_tier is not None or self.pool.num_evicted_blocks:
            raise RuntimeError("a host tier is added once, before anything is cached")
        if num_blocks > 0:
            self.host_tier = HostTier(num_blocks, load_ns_per_block)
            self.index.add_host_tier(self.host_tier)

    def forget_content(self, req: Request) -> None:
        """Uncache ``req``'s blocks (a failed step may have left them unwritten)."""
        if self.index is not None:
            self.index.forget_content(req)

    # ------------------------------------------------------------------ mutation
    def allocate(self, req: Request, num_tokens: int) -> None:
        """Grow ``req`` to hold ``num_tokens`` tokens. Raises if the blocks are not free."""
        if self.index is not None:
            self.index.allocate(req, num_tokens)
            return
        need = -(-num_tokens // self.block_size) - req.num_blocks
        if need > 0:
            self.pool.take_now(need)
            req.num_blocks += need

    def take(self, num_blocks: int) -> None:
        """Charge ``num_blocks`` in bulk (the decode pool's aggregate growth)."""
        self.pool.take(num_blocks)

    def free(self, req: Request) -> None:
        """Release ``req``'s GPU blocks (a free event: the reservation runs after it)."""
        if self.index is not None:
            self.index.free(req)
        else:
            pool = self.pool
            pool.num_free_blocks += req.num_blocks
            req.num_blocks = 0
            if pool.track_ids:
                table = self._tables.pop(req.request_id, None)
                if table:
                    pool.free_ids.extend(table)
            assert pool.num_free_blocks <= pool.num_blocks
        if self.reservation is not None:
            self.reservation.after_free(self.pool)

    def swap_out(self, req: Request) -> bool:
        """Move ``req``'s blocks to host memory; False (nothing moved) if the host is full."""
        if self.index is not None and not self.index.supports_swap:
            raise RuntimeError("swapping is not supported with prefix caching in the real engine")
        n = req.num_blocks
        if n > self.swap.num_free_host_blocks:
            return False
        self.swap.num_free_host_blocks -= n
        self.free(req)
        self.swap.held[req.request_id] = n
        return True

    def swap_in(self, req: Request) -> bool:
        """Bring ``req``'s swapped blocks back; False if the GPU lacks the room."""
        n = self.swap.held.get(req.request_id, 0)
        if n > self.pool.num_free_blocks:
            return False
        self.swap.remove(req.request_id, n)
        self.pool.take_now(n)
        req.num_blocks = n
        return True

    def swap_out_blocks(self, req: Request, n: int) -> int:
        """Chunked swap-out: move up to ``n`` of ``req``'s GPU blocks (its last ones) to host
        memory, bounded by its GPU blocks and the free host blocks. Returns the number moved.
        Counting only (no block ids): the simulator's budgeted, pipelined swapping."""
        if self.pool.track_ids:
            raise RuntimeError("partial swaps are not supported with block ids")
        self.pool.settle()
        m = max(0, min(n, req.num_blocks, self.swap.num_free_host_blocks))
        if m:
            if self.index is not None:
                self.index.release_tail(req, m)
            else:
                req.num_blocks -= m
                self.pool.num_free_blocks += m
            self.swap.put(req.request_id, m)
        return m

    def swap_in_blocks(self, req: Request, n: int, keep_free: int = 0) -> int:
        """Chunked swap-in: move up to ``n`` of ``req``'s host blocks back to the GPU, leaving
        at least ``keep_free`` GPU blocks free. Returns the number moved."""
        if self.pool.track_ids:
            raise RuntimeError("partial swaps are not supported with block ids")
        have = self.swap.held.get(req.request_id, 0)
        m = max(0, min(n, have, self.pool.num_free_blocks - keep_free))
        if m:
            self.pool.take_now(m)
            req.num_blocks += m
            self.swap.remove(req.request_id, m)
        return m

    def add_host_space(self, num_blocks: int) -> None:
        """Give the cache ``num_blocks`` more host (swap) blocks (a cluster engine that serves
        augmented requests gets its swap space when it starts)."""
        self.swap.grow(num_blocks)

    def drop_swapped(self, req: Request) -> None:
        """Forget ``req``'s host copy (it finished or was discarded while swapped)."""
        n = self.swap.held.pop(req.request_id, 0)
        self.swap.num_free_host_blocks += n

    # ------------------------------------------------------------------ ids
    def block_table(self, req: Request, num_blocks: int | None = None) -> list[int]:
        """Physical block ids of ``req`` (id tracking only), grown to ``req.num_blocks``.

        ``num_blocks`` grows the table further, to blocks already charged in bulk by
        :meth:`take`: a decode-pool member's ``num_blocks`` is written back lazily, so during a
        step it may lag by the block the step's new token needs. The caller must not ask for
        more blocks than the request holds after the step (the ids must stay charged).
        """
        if not self.pool.track_ids:
            raise RuntimeError("block ids are not tracked by this manager")
        if self.index is not None:
            return self.index.block_table(req, num_blocks)
        table = self._tables.setdefault(req.request_id, [])
        want = req.num_blocks if num_blocks is None else max(num_blocks, req.num_blocks)
        short = want - len(table)
        if short > 0:
            table.extend(self.pool.pop_ids(short))
        return table

    def trim(self, req: Request, num_blocks: int) -> None:
        """Return the ids of ``req``'s table beyond its first ``num_blocks`` to the free list
        (blocks charged in bulk for one step — speculative decoding's lookahead — whose charge
        the caller has given back); the request's block count is not changed."""
        if self.index is not None:
            self.index.trim(req, num_blocks)
            return
        table = self._tables.get(req.request_id)
        if table is not None and len(table) > num_blocks:
            self.pool.free_ids.extend(reversed(table[num_blocks:]))
            del table[num_blocks:]

    def check(self, resident: list[Request]) -> None:
        """Assert the accounting invariants over the GPU-resident requests (tests, debug)."""
        self.swap.check()
        if self.index is not None:
            self.index.check(resident)
            return
        pool = self.pool
        held = sum(r.num_blocks for r in resident)
        assert held + pool.num_free_blocks == pool.num_blocks, (held, pool.num_free_blocks)
        if pool.track_ids:
            # Ids partition the blocks: tables of resident requests, plus the free list, which
            # still holds the ids of blocks charged but not yet handed to a (lazy) table.
            tabled = [b for r in resident for b in self._tables.get(r.request_id, [])]
            assert len(set(tabled)) == len(tabled), "a block id is in two tables"
            assert not set(tabled) & set(pool.free_ids), "a tabled block id is also free"
            assert len(tabled) + len(pool.free_ids) == pool.num_blocks
            for r in resident:
                assert len(self._tables.get(r.request_id, [])) <= r.num_blocks
            assert set(self._tables) <= {r.request_id for r in resident}, "a freed table leaked"


KVBlockManager = KVCacheManager
"""The manager's earlier name (type annotations and callers across the code base)."""
