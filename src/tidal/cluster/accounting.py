"""The cluster's accounting in columns: one row per instance (written when it stops, so a
stopped instance's object can be dropped and memory stays flat over long runs) and the log of
GPUs held by instances (→ GPU-seconds).

Instance rows: ``instance, model, first_gpu, num_gpus, kind`` (index into
:data:`~tidal.cluster.instance.START_KINDS`), ``created_ns, ready_ns, stopped_ns, engine``
(−1: never). The table lists stopped instances' rows and the live ones', by instance id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from tidal.cluster.instance import START_KINDS, ModelInstance
from tidal.core.metrics import column_chunks
from tidal.core.spool import STREAM_ROWS, ColumnSet, ColumnSpool
from tidal.core.units import NS_PER_S

COLUMNS = (
    "instance",
    "model",
    "first_gpu",
    "num_gpus",
    "kind",
    "created_ns",
    "ready_ns",
    "stopped_ns",
    "engine",
)


def _row(i: ModelInstance) -> tuple[int, ...]:
    return (
        i.iid,
        i.model.index,
        i.gpus[0],
        len(i.gpus),
        START_KINDS.index(i.kind),
        i.created_ns,
        i.ready_ns,
        i.stopped_ns,
        i.engine,
    )


class Ledger:
    def __init__(self) -> None:
        self._rows = ColumnSpool(COLUMNS, 1024)
        """Stopped instances' rows in stop order, spooled to disk (flat memory)."""
        self._busy = ColumnSpool(("t", "n"), 1024)
        self.log_busy(0, 0)

    def archive(self, inst: ModelInstance) -> None:
        """Record a stopped instance's row (its fields are final)."""
        self._rows.append(*_row(inst))

    def table(self, live: Iterable[ModelInstance]) -> ColumnSet:
        """Every instance's row, stopped and live, by instance id (stable), as of this call:
        columns read on demand from the spool through the sorting permutation (only that
        permutation and the live rows are held in memory)."""
        n = len(self._rows)
        rows = [_row(i) for i in live]
        extra = np.array(rows, dtype=np.int64).reshape(len(rows), len(COLUMNS))
        ids = np.concatenate([self._rows.read("instance", 0, n), extra[:, 0]])
        order = np.argsort(ids, kind="stable")
        del ids
        spool = self._rows

        def reader(j: int, name: str) -> Callable[[int, int], np.ndarray]:
            def read(s: int, e: int) -> np.ndarray:
                idx = order[s:e]
                old = idx < n
                out = np.empty(len(idx), dtype=np.int64)
                out[old] = spool.take(name, idx[old])
                out[~old] = extra[idx[~old] - n, j]
                return out

            return read

        i8 = np.dtype(np.int64)
        return ColumnSet(len(order), {k: (reader(j, k), i8) for j, k in enumerate(COLUMNS)})

    # ------------------------------------------------------------------ GPU-seconds
    def log_busy(self, now_ns: int, busy: int) -> None:
        self._busy.append(now_ns, busy)

    def gpu_seconds(self, t0_ns: int, t1_ns: int) -> float:
        """∫ (GPUs held by instances) dt over [t0, t1] (summed in log order)."""
        total = 0.0
        t, busy = 0, 0  # the log starts with (0, 0)
        for s in range(0, len(self._busy), STREAM_ROWS):  # a chunk of the log at a time
            ts = self._busy.read("t", s, s + STREAM_ROWS).tolist()
            ns = self._busy.read("n", s, s + STREAM_ROWS).tolist()
            for t_next, busy_next in zip(ts, ns, strict=True):
                a, b = max(t, t0_ns), min(t_next, t1_ns)
                if b > a:
                    total += busy * (b - a)
                t, busy = t_next, busy_next
        a, b = max(t, t0_ns), min(max(t1_ns, t), t1_ns)
        if b > a:
            total += busy * (b - a)
        return total / NS_PER_S


def start_counts(table: Mapping[str, np.ndarray], model: int | None = None) -> dict[str, int]:
    """Instance starts per kind (of one model, or all)."""
    counts = np.zeros(len(START_KINDS), dtype=np.int64)
    for kinds, models in column_chunks(table, ("kind", "model")):
        kinds = kinds if model is None else kinds[models == model]
        counts += np.bincount(kinds, minlength=len(START_KINDS))[: len(START_KINDS)]
    return {k: int(counts[j]) for j, k in enumerate(START_KINDS)}


def model_gpu_seconds(table: Mapping[str, np.ndarray], model: int, t0_ns: int, t1_ns: int) -> float:
    """Σ GPUs · time held over [t0, t1] of one model's instances (exact integer sum, a row
    chunk of the table at a time)."""
    total = 0
    names = ("model", "num_gpus", "created_ns", "stopped_ns")
    for models, gpus, created, stopped in column_chunks(table, names):
        sel = models == model
        for n, c, stop in zip(
            gpus[sel].tolist(), created[sel].tolist(), stopped[sel].tolist(), strict=True
        ):
            total += n * max(0, min(stop if stop >= 0 else t1_ns, t1_ns) - max(c, t0_ns))
    return total / NS_PER_S


def start_metrics(table: Mapping[str, np.ndarray], model: int | None) -> dict[str, Any]:
    """Instance starts, cold starts and the prewarm hit rate (hits / dynamic starts), of one
    model or (``model`` None) of the cluster."""
    c = start_counts(table, model)
    dynamic = c["hit"] + c["partial"] + c["miss"]
    return {
        "instance_starts": dynamic + c["static"],
        "cold_starts": c["partial"] + c["miss"],
        "prewarm_hits": c["hit"],
        "prewarm_hit_rate": c["hit"] / dynamic if dynamic else None,
    }
