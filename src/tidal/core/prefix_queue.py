"""The prefix cache's nodes and its LRU free queue: the block pool of the counting prefix cache
(:mod:`tidal.core.prefix_cache` explains the content model and is its index; this is the
eviction half, which feeds the optional host tier).

A *node* is one segment chain hash: ``cached`` leading blocks of its segment on the GPU, of
which ``held = max(holders)`` are referenced. The free queue holds, head first, the blocks that
may be handed out: runs of blocks without content, runs of a finished request's own cached
blocks (content no request can match again), and nodes with evictable (``cached − held``)
blocks. Taking blocks evicts from the head; a node never loses a referenced block.
Invariants (``check_queue``): ``num_free_blocks`` = Σ runs + Σ queued nodes' (cached − held);
a node is queued (``node.entry``) iff ``cached > held``; ``_anon_free`` = Σ runs' anonymous
blocks.
"""

from __future__ import annotations

from collections import deque

from tidal.core.block_pool import BlockPool
from tidal.core.host_cache import HostTier


class CacheNode:
    __slots__ = ("cached", "entry", "held", "hi", "holders", "host", "key", "lo")

    def __init__(self, key: int, lo: int, hi: int) -> None:
        self.key = key
        self.lo = lo
        self.hi = hi
        """The node's blocks are ``[lo, hi)`` of every request that has it (hi: 2^62 for a
        request's output tail)."""
        self.cached = 0
        self.holders: dict[int, int] = {}
        self.held = 0
        self.host = 0
        """Blocks after the GPU-cached ones kept in host memory (:mod:`tidal.core.host_cache`)."""
        self.entry: QueueEntry | None = None
        """Its entry in the free queue while it has evictable blocks."""


QueueEntry = list  # [node or None, anonymous blocks, own blocks]: one entry of the free queue


class PrefixQueue(BlockPool):
    """Counted block pool whose free blocks may hold cached content (the free queue)."""

    cached_content = True

    def __init__(self, num_blocks: int, tier: HostTier | None = None) -> None:
        super().__init__(num_blocks)
        self.tier = tier
        """The host tier evicted blocks move to (None: their content is lost)."""
        self.nodes: dict[int, CacheNode] = {}
        """Every node with GPU-cached blocks, holders or host blocks, by chain hash."""
        self._free: deque[QueueEntry] = deque([[None, num_blocks, 0]])
        """LRU free queue, head first. An entry ``[node, 0, 0]``: a node with evictable
        blocks (``node.entry`` is it); ``[None, a, o]``: a run of ``a`` blocks without
        content, then ``o`` cached blocks of a finished request's own suffix (evicted and
        counted like a node's). A node leaving the queue (referenced again, or moved to the
        tail) blanks its entry to ``[None, 0, 0]``, an empty run, dropped at the head."""
        self._anon_free = num_blocks
        """Free blocks without content (the anonymous part of the runs)."""
        self._evicted = 0
        self.debt = 0
        """Blocks :meth:`take` charged but not yet taken from the queue: taken before any
        operation looks at it (:meth:`settle`), so in the same order as if taken at once."""

    def push_anon(self, count: int) -> None:
        if count <= 0:
            return
        self._anon_free += count
        free = self._free
        if free:
            last = free[-1]
            if last[0] is None and not last[2]:
                last[1] += count
                return
        free.append([None, count, 0])

    def push_own(self, count: int) -> None:
        """Append ``count`` cached blocks of a finished request's own suffix to the queue."""
        free = self._free
        if free:
            last = free[-1]
            if last[0] is None:
                last[2] += count
                return
        free.append([None, 0, count])

    def push_node(self, node: CacheNode) -> None:
        """Move ``node`` (it has evictable blocks) to the tail of the queue."""
        e = node.entry
        if e is not None:
            e[0] = None
        node.entry = e = [node, 0, 0]
        self._free.append(e)

    def unqueue(self, node: CacheNode) -> None:
        """``node`` has no evictable block any more: blank its entry."""
        e = node.entry
        if e is not None:
            e[0] = None
            node.entry = None

    def take_now(self, num_blocks: int) -> None:
        """Take ``num_blocks`` free blocks from the LRU head, evicting cached content as
        needed (into the host tier, if any)."""
        left = self.num_free_blocks - num_blocks
        if left < 0:
            raise RuntimeError(f"KV overcommit: need {num_blocks}, free {self.num_free_blocks}")
        self.num_free_blocks = left
        n = num_blocks + self.debt
        self.debt = 0
        free = self._free
        while n > 0:
            e = free[0]
            node = e[0]
            if node is None:  # a run: its anonymous blocks, then its own cached ones
                a = e[1]
                if a:
                    if a > n:
                        e[1] = a - n
                        self._anon_free -= n
                        return
                    e[1] = 0
                    self._anon_free -= a
                    n -= a
                o = e[2]
                if o > n:
                    e[2] = o - n
                    self._evicted += n
                    return
                self._evicted += o
                n -= o
                free.popleft()
                continue
            spare = node.cached - node.held
            if spare > n:  # a partial eviction: the node stays at the head
                node.cached -= n
                self._evicted += n
                if self.tier is not None:
                    self.tier.add(node, n, self.nodes)
                return
            node.cached -= spare
            n -= spare
            self._evicted += spare
            if self.tier is not None:
                self.tier.add(node, spare, self.nodes)
            free.popleft()
            node.entry = None
            if node.cached == 0 and not node.holders and not node.host:
                self.nodes.pop(node.key, None)

    def take(self, num_blocks: int) -> None:
        """The decode pool's bulk charge: counted now, taken from the queue lazily (the
        queue is looked at once a step at most, by the step's next allocation or match)."""
        if self.tier is not None:  # (its evictions feed the host tier at once)
            self.take_now(num_blocks)
            return
        left = self.num_free_blocks - num_blocks
        if left < 0:
            raise RuntimeError(f"KV overcommit: need {num_blocks}, free {self.num_free_blocks}")
        self.num_free_blocks = left
        self.debt += num_blocks

    def settle(self) -> None:
        """Take the blocks :meth:`take` deferred (before the queue or the nodes are read)."""
        d = self.debt
        if d:
            self.debt = 0
            self.num_free_blocks += d
            self.take_now(d)

    @property
    def num_evicted_blocks(self) -> int:
        """Cached blocks evicted so far (their content lost on the GPU)."""
        self.settle()
        return self._evicted

    def num_cached_free_blocks(self) -> int:
        """Free blocks that still hold reusable content (evictable)."""
        self.settle()
        return self.num_free_blocks - self._anon_free

    def release(self, num_blocks: int) -> None:
        """``num_blocks`` blocks without content join the queue's tail."""
        self.push_anon(num_blocks)
        self.num_free_blocks += num_blocks

    def check_queue(self) -> tuple[int, int]:
        """Assert the queue's invariants; returns (anonymous free blocks, own cached free
        blocks) for the caller's block balance."""
        self.settle()
        runs = [e for e in self._free if e[0] is None]
        anon_free = sum(e[1] for e in runs)
        queued = [e[0] for e in self._free if e[0] is not None]
        assert len(queued) == len({id(x) for x in queued}), "a node is queued twice"
        assert all(x.entry is not None and x.entry[0] is x for x in queued)
        for node in self.nodes.values():
            assert (node.entry is not None) == (node.cached > node.held)
        assert anon_free == self._anon_free
        return anon_free, sum(e[2] for e in runs)
