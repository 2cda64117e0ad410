"""KV blocks that a running instance can give back to the GPU pool (docs/research/warmserve.md
§2.7).

The artifact's allocator, on every block free, moves free blocks to a *reserved* state while
more than ``target_free`` are free; reserved blocks leave the instance for good and their pages
go back to the GPU's pool (where other models can be prewarmed). So reservation is lazy (only on
free events) and one-way. Here a free event is :meth:`free` (a request finishing or being
preempted), which happens at step boundaries: identical with and without fast-forward.

A floor ``min_total`` keeps the instance able to hold what its router may send it (B requests
of the maximum length, by default: see ``WarmServeConfig.kv_floor``).

:class:`ReserveToTarget` is the KV manager's reservation strategy
(:class:`tidal.core.kv.Reservation`): the manager runs it after each free event and it shrinks
the manager's block pool. Invariant: ``num_free_blocks + Σ held == num_blocks`` as without it,
with ``num_blocks`` shrinking by exactly the reserved count.

With prefix caching (the run's ``memory.prefix_caching`` when the workload has prompt content,
as for one instance) the pool is the prefix cache's free queue, so the reserved blocks are taken
from its head: the least recently used cached content is evicted first, as vLLM's allocator
hands out its free blocks.
"""

from __future__ import annotations

from collections.abc import Callable

from tidal.core.block_pool import BlockPool
from tidal.core.kv import KVCacheManager
from tidal.core.prefix_cache import prefix_cache_kv


class ReserveToTarget:
    """Reserve the free blocks beyond ``target_free`` at each free event, down to a floor."""

    def __init__(self, initial_blocks: int, min_free: int = 0, min_total: int = 0) -> None:
        self.initial_blocks = initial_blocks
        self.target_free = 1 << 62
        """Free blocks to keep; more are reserved at the next free event (no reservation until
        a target is set)."""
        self.min_free = min_free
        self.min_total = min_total
        """Never shrink below this many blocks (in use or free)."""
        self.reserved = 0
        self.on_reserve: Callable[[int], None] | None = None
        """Told how many blocks each reservation gave back (the cluster frees their pages)."""

    def set_target(self, blocks: int) -> None:
        self.target_free = max(blocks, self.min_free)

    def after_free(self, pool: BlockPool) -> None:
        extra = min(pool.num_free_blocks - self.target_free, pool.num_blocks - self.min_total)
        if extra > 0:
            pool.shrink(extra)  # a caching pool: LRU first (anonymous, then evictable content)
            self.reserved += extra
            if self.on_reserve is not None:
                self.on_reserve(extra)


def reserving_kv(
    prefix_caching: bool, num_blocks: int, block_size: int, min_free: int, min_total: int
) -> KVCacheManager:
    """A cluster instance's KV manager: no watermark, a :class:`ReserveToTarget` reservation,
    over the prefix cache's pool if ``prefix_caching``."""
    reservation = ReserveToTarget(num_blocks, min_free, min_total)
    if prefix_caching:
        return prefix_cache_kv(num_blocks, block_size, watermark=0.0, reservation=reservation)
    return KVCacheManager(num_blocks, block_size, watermark=0.0, reservation=reservation)


def reservation_of(kv: KVCacheManager) -> ReserveToTarget:
    """The reservation of a manager built by :func:`reserving_kv`."""
    res = kv.reservation
    assert isinstance(res, ReserveToTarget), "not a reserving KV manager"
    return res
