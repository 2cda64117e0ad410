"""GPU memory as pages (docs/research/warmserve.md §1.2, §4.1 item 3).

Each GPU's pool is ``⌊gpu_memory_utilization · HBM / page⌋`` pages (the universal worker takes
90% of the GPU and splits it into 2 MiB pages). Pages are held by *owners* (a prewarmed or
loading replica's weights, a running instance's weights or KV cache); an owner holds a fixed
count on each GPU it touches.

Invariant (checked by :meth:`GpuPool.check` and the tests): ``free + Σ held == total`` and
``0 ≤ free``. An allocation that does not fit raises instead of overcommitting. Every change
is logged per (GPU, model, kind) so the per-GPU timeline can be drawn.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from tidal.core.spool import ColumnSet, ColumnSpool

KINDS = ("prewarm", "weights", "kv")
"""Owner kinds: weights of a replica that is not serving (loading or warm), weights of a
running instance, and a running instance's KV cache."""

LOG_COLUMNS = ("time_ns", "gpu", "model", "kind", "pages")


class OutOfPagesError(RuntimeError):
    pass


@dataclass
class _Holding:
    pages: int
    model: int
    kind: str


@dataclass
class GpuPool:
    gpu: int
    total: int
    free: int = -1
    held: dict[Hashable, _Holding] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.free < 0:
            self.free = self.total

    def check(self) -> None:
        used = sum(h.pages for h in self.held.values())
        assert self.free >= 0, (self.gpu, self.free)
        assert used + self.free == self.total, (self.gpu, used, self.free, self.total)


class ClusterMemory:
    """All GPU pools, with a change log ``(time, gpu, model, kind, pages)``: ``pages`` is the
    new total that (model, kind) holds on the GPU."""

    def __init__(self, num_gpus: int, pages_per_gpu: int, num_models: int) -> None:
        self.pools = [GpuPool(g, pages_per_gpu) for g in range(num_gpus)]
        self.pages_per_gpu = pages_per_gpu
        self._agg = [[dict.fromkeys(KINDS, 0) for _ in range(num_models)] for _ in range(num_gpus)]
        self.log = ColumnSpool(LOG_COLUMNS, 16_384)
        """The change log, spooled to disk a chunk at a time (flat memory over long runs)."""
        self.peak_used = [0] * num_gpus

    # ------------------------------------------------------------------ queries
    def free(self, g: int) -> int:
        return self.pools[g].free

    def holds(self, g: int, owner: Hashable) -> int:
        h = self.pools[g].held.get(owner)
        return h.pages if h else 0

    def is_empty(self) -> bool:
        return all(p.free == p.total and not p.held for p in self.pools)

    # ------------------------------------------------------------------ changes
    def _record(self, now_ns: int, g: int, model: int, kind: str, delta: int) -> None:
        agg = self._agg[g][model]
        agg[kind] += delta
        self.log.append(now_ns, g, model, KINDS.index(kind), agg[kind])

    def alloc(
        self, now_ns: int, gpus: tuple[int, ...], owner: Hashable, pages: int, model: int, kind: str
    ) -> None:
        """Give ``owner`` ``pages`` more pages on every GPU of ``gpus`` (all or nothing)."""
        if pages < 0:
            raise ValueError("negative allocation")
        for g in gpus:
            if self.pools[g].free < pages:
                raise OutOfPagesError(f"GPU {g}: need {pages} pages, {self.pools[g].free} free")
        for g in gpus:
            pool = self.pools[g]
            pool.free -= pages
            h = pool.held.get(owner)
            if h is None:
                pool.held[owner] = _Holding(pages, model, kind)
            else:
                assert h.kind == kind
                assert h.model == model
                h.pages += pages
            self._record(now_ns, g, model, kind, pages)
            used = pool.total - pool.free
            if used > self.peak_used[g]:
                self.peak_used[g] = used

    def alloc_parts(
        self,
        now_ns: int,
        parts: list[tuple[tuple[int, ...], int]],
        owner: Hashable,
        model: int,
        kind: str,
    ) -> None:
        """:meth:`alloc` of ``pages`` on each ``(gpus, pages)`` part (a unit with per-pool TP
        holds different shards on its prefill and decode GPUs), all parts or none."""
        for gpus, pages in parts:
            for g in gpus:
                if self.pools[g].free < pages:
                    raise OutOfPagesError(f"GPU {g}: need {pages} pages, {self.pools[g].free} free")
        for gpus, pages in parts:
            self.alloc(now_ns, gpus, owner, pages, model, kind)

    def release(self, now_ns: int, gpus: tuple[int, ...], owner: Hashable, pages: int = -1) -> int:
        """Return ``pages`` (default: all) of ``owner``'s pages on each GPU; returns the count
        released per GPU."""
        n = 0
        for g in gpus:
            pool = self.pools[g]
            h = pool.held.get(owner)
            if h is None:
                continue
            n = h.pages if pages < 0 else min(pages, h.pages)
            h.pages -= n
            pool.free += n
            if h.pages == 0:
                del pool.held[owner]
            self._record(now_ns, g, h.model, h.kind, -n)
        return n

    def retag(
        self, now_ns: int, gpus: tuple[int, ...], owner: Hashable, new_owner: Hashable, kind: str
    ) -> None:
        """Hand ``owner``'s pages to ``new_owner`` of ``kind`` without copying (zero-copy
        handoff of prewarmed weights to an engine, docs/research/warmserve.md §2.8)."""
        for g in gpus:
            pool = self.pools[g]
            h = pool.held.pop(owner)
            if h.kind != kind:
                self._record(now_ns, g, h.model, h.kind, -h.pages)
                self._record(now_ns, g, h.model, kind, h.pages)
            pool.held[new_owner] = _Holding(h.pages, h.model, kind)

    def check(self) -> None:
        for p in self.pools:
            p.check()

    def log_columns(self) -> ColumnSet:
        """The log so far, read from the spool on demand."""
        n = len(self.log)
        i8 = np.dtype(np.int64)
        return ColumnSet(n, {k: (self.log.reader(k), i8) for k in LOG_COLUMNS})
