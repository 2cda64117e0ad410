"""KV blocks that a running instance can give back to the GPU pool (docs/research/warmserve.md
§2.7).

The artifact's allocator, on every block free, moves free blocks to a *reserved* state while
more than ``target_free`` are free; reserved blocks leave the instance for good and their pages
go back to the GPU's pool (where other models can be prewarmed). So reservation is lazy (only on
free events) and one-way. Here a free event is :meth:`free` (a request finishing or being
preempted), which happens at step boundaries: identical with and without fast-forward.

A floor ``min_total`` keeps the instance able to hold what its router may send it (B requests
of the maximum length, by default: see ``WarmServeConfig.kv_floor``).

Invariant: ``num_free_blocks + Σ held == num_blocks`` as in the base class, with ``num_blocks``
shrinking by exactly the reserved count.

With prefix caching (:class:`ReservingPrefixKV`, the run's ``memory.prefix_caching`` when the
workload has prompt content, as for one instance) the reserved blocks are taken from the head of
the free queue: the least recently used cached content is evicted first, as vLLM's allocator
hands out its free blocks.
"""

from __future__ import annotations

from collections.abc import Callable

from tidal.core.kv import KVBlockManager
from tidal.core.prefix_cache import PrefixCachingKVManager
from tidal.core.request import Request


class ReservingKV(KVBlockManager):
    def __init__(
        self, num_blocks: int, block_size: int, min_free: int = 0, min_total: int = 0
    ) -> None:
        super().__init__(num_blocks, block_size, watermark=0.0)
        self.initial_blocks = num_blocks
        self.target_free = 1 << 62
        """Free blocks to keep; more are reserved at the next free event (no reservation until
        a target is set)."""
        self.min_free = min_free
        self.min_total = min_total
        """Never shrink below this many blocks (in use or free)."""
        self.reserved = 0
        self.on_reserve: Callable[[int], None] | None = None

    def set_target(self, blocks: int) -> None:
        self.target_free = max(blocks, self.min_free)

    def free(self, req: Request) -> None:
        super().free(req)
        extra = min(self.num_free_blocks - self.target_free, self.num_blocks - self.min_total)
        if extra > 0:
            self._drop_free(extra)
            self.num_blocks -= extra
            self.reserved += extra
            if self.on_reserve is not None:
                self.on_reserve(extra)

    def _drop_free(self, n: int) -> None:
        self.num_free_blocks -= n


class ReservingPrefixKV(ReservingKV, PrefixCachingKVManager):
    """:class:`ReservingKV` over a prefix cache (module docstring)."""

    def _drop_free(self, n: int) -> None:
        self._take(n)  # LRU first: anonymous blocks and evictable cached content


def reserving_kv(
    prefix_caching: bool, num_blocks: int, block_size: int, min_free: int, min_total: int
) -> ReservingKV:
    cls = ReservingPrefixKV if prefix_caching else ReservingKV
    return cls(num_blocks, block_size, min_free, min_total)
