"""The GPU's KV blocks, counted (vLLM v1's ``BlockPool``, without tensors).

A pool owns ``num_blocks`` and ``num_free_blocks``; what a free block may still hold (reusable
prefix content, :mod:`tidal.core.prefix_queue` and :mod:`tidal.core.prefix_blocks`) is a
subclass's business. Which request holds which blocks is the manager's
(:class:`tidal.core.kv.KVCacheManager`) and its prefix index's. Invariant: ``0 <=
num_free_blocks <= num_blocks``; with ``track_ids`` the free-id list holds every block id not
handed to a request's table (blocks charged in bulk keep their ids there until asked for).
"""

from __future__ import annotations


class BlockPool:
    """A counted pool of GPU blocks, optionally with physical ids (a LIFO free-id list)."""

    cached_content = False
    """Whether free blocks may keep reusable content (then they are evicted when taken)."""

    def __init__(self, num_blocks: int, track_ids: bool = False) -> None:
        if num_blocks <= 0:
            raise ValueError("num_blocks must be positive")
        self.num_blocks = num_blocks
        self.num_free_blocks = num_blocks
        self.track_ids = track_ids
        self.free_ids: list[int] = list(range(num_blocks - 1, -1, -1)) if track_ids else []
        """Free block ids, the next one handed out last (ids only with ``track_ids``)."""

    def take_now(self, num_blocks: int) -> None:
        """Charge ``num_blocks`` free blocks. Raises (nothing charged) if fewer are free."""
        left = self.num_free_blocks - num_blocks
        if left < 0:
            raise RuntimeError(f"KV overcommit: need {num_blocks}, free {self.num_free_blocks}")
        self.num_free_blocks = left

    def take(self, num_blocks: int) -> None:
        """The decode pool's bulk charge (a caching pool may take the blocks lazily); once a
        step, so :meth:`take_now` is inlined."""
        left = self.num_free_blocks - num_blocks
        if left < 0:
            raise RuntimeError(f"KV overcommit: need {num_blocks}, free {self.num_free_blocks}")
        self.num_free_blocks = left

    def release(self, num_blocks: int) -> None:
        """``num_blocks`` blocks without content come back."""
        self.num_free_blocks += num_blocks

    def shrink(self, num_blocks: int) -> None:
        """Give ``num_blocks`` free blocks up for good (a reservation): the pool gets smaller."""
        self.take_now(num_blocks)
        self.num_blocks -= num_blocks

    def settle(self) -> None:
        """Apply deferred bulk charges (none here)."""

    def num_cached_free_blocks(self) -> int:
        """Free blocks still holding reusable content."""
        return 0

    @property
    def num_evicted_blocks(self) -> int:
        """Cached blocks whose content was lost to a new owner."""
        return 0

    def pop_ids(self, count: int) -> list[int]:
        """Hand out ``count`` free ids (already charged), in allocation order."""
        ids = self.free_ids[-count:][::-1]
        del self.free_ids[-count:]
        return ids


class SwapSpace:
    """Host memory that preempted requests' KV blocks are swapped to (counted per request).

    Invariant: ``num_free_host_blocks + Σ held == num_host_blocks``."""

    def __init__(self, num_host_blocks: int = 0) -> None:
        self.num_host_blocks = num_host_blocks
        self.num_free_host_blocks = num_host_blocks
        self.held: dict[int, int] = {}
        """Blocks each swapped-out request holds in host memory."""

    def put(self, rid: int, count: int) -> None:
        """``count`` more blocks of request ``rid`` move in (the caller checked the room)."""
        self.num_free_host_blocks -= count
        self.held[rid] = self.held.get(rid, 0) + count

    def remove(self, rid: int, count: int) -> None:
        """``count`` of ``rid``'s blocks leave (back to the GPU, or dropped)."""
        have = self.held[rid]
        self.num_free_host_blocks += count
        if count == have:
            del self.held[rid]
        else:
            self.held[rid] = have - count

    def grow(self, count: int) -> None:
        self.num_host_blocks += count
        self.num_free_host_blocks += count

    def check(self) -> None:
        assert self.num_free_host_blocks + sum(self.held.values()) == self.num_host_blocks
