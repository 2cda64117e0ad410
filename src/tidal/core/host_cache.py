"""Second tier of the prefix cache in host memory (vLLM's CPU KV offload), counted per node.

Blocks evicted from the GPU free queue move here instead of being lost. A node's host blocks
directly follow its GPU-cached ones: the node holds blocks ``[0, cached)`` on the GPU and
``[cached, cached + host)`` in host memory, so evicting the GPU copy's tail extends the host
range at its front, and a load (a prefix hit in host memory) or a new GPU copy takes from the
front. Capacity is in blocks; over it, the least recently filled node loses its last host
blocks first (LRU by node). Invariant: ``used == Σ node.host <= capacity`` and a node is in
the LRU iff ``node.host > 0``. Blocks are exclusive: a block is on the GPU or in host memory.
The tier also keeps its statistics (hits, load time, dropped blocks), read through
:meth:`tidal.core.kv.KVCacheManager.cache_stats`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class HostTier:
    def __init__(self, capacity: int, load_ns_per_block: float = 0.0) -> None:
        if capacity <= 0:
            raise ValueError("a host tier needs a positive capacity (blocks)")
        self.capacity = capacity
        self.load_ns_per_block = load_ns_per_block
        """Cost of loading one block back to the GPU (the host link)."""
        self.hit_tokens = 0
        """Prefix-cache hit tokens loaded from this tier."""
        self.load_ns = 0
        """Total transfer time charged for those hits."""
        self.used = 0
        self.lru: OrderedDict[int, Any] = OrderedDict()
        """Nodes with host blocks, least recently filled first (key → node)."""
        self.num_evicted_blocks = 0
        """Host blocks dropped for capacity (their content is lost)."""

    def add(self, node: Any, m: int, nodes: dict[int, Any]) -> None:
        """``m`` blocks left ``node``'s GPU tail (``node.cached`` already lowered) and join the
        front of its host range; then drop host blocks over capacity, deleting nodes that
        are left with nothing (no GPU copy, no host copy, no holder) from ``nodes``."""
        node.host += m
        self.used += m
        lru = self.lru
        if node.key in lru:
            lru.move_to_end(node.key)
        else:
            lru[node.key] = node
        while self.used > self.capacity:
            key = next(iter(lru))
            victim = lru[key]
            k = min(victim.host, self.used - self.capacity)
            victim.host -= k
            self.used -= k
            self.num_evicted_blocks += k
            if victim.host == 0:
                del lru[key]
                if victim.cached == 0 and not victim.holders:
                    nodes.pop(key, None)

    def take_front(self, node: Any, k: int) -> None:
        """Remove the first ``k`` host blocks of ``node`` (loaded to, or recomputed on, the
        GPU: they now follow its GPU range)."""
        k = min(k, node.host)
        if k <= 0:
            return
        node.host -= k
        self.used -= k
        if node.host == 0:
            del self.lru[node.key]

    def check(self, nodes: dict[int, Any]) -> None:
        assert self.used == sum(n.host for n in nodes.values()), "host blocks drifted"
        assert 0 <= self.used <= self.capacity, "host tier over capacity"
        assert set(self.lru) == {k for k, n in nodes.items() if n.host > 0}
        assert all(n.host >= 0 for n in nodes.values())
