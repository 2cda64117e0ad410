"""Workload columns generated on demand: a :class:`RequestSet` whose columns are
:class:`LazyColumn` views of a :class:`StreamedColumns` store fed by an iterator of row pieces
(e.g. :meth:`tidal.workload.mixstream.MixStream.releases`).

Reads are by row ranges and single rows, as the simulation does them: a read past the rows
generated so far pulls pieces until it is covered (the look-ahead is the reader's: the
simulation's arrival stream reads 65,536 rows ahead). Every piece is appended to a
:class:`~tidal.core.spool.ColumnSpool` (disk) and kept in memory while it ends less than
``keep`` rows before the newest range read; older rows are read back from the spool (the
results' columns at the end of a run, a request that finishes long after it arrived). So memory
is ``O(keep + look-ahead + piece)`` rows whatever the number of rows, and every read returns
exactly the rows of the iterator.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator
from typing import Any, cast

import numpy as np

from tidal.core.spool import ColumnSpool
from tidal.workload.base import RequestSet


class StreamedColumns:
    """``n`` rows of int64 columns ``names``, produced in order by ``pieces`` (each a tuple of
    equal-length arrays, one per name); rows are requested by index (module docstring)."""

    def __init__(
        self,
        n: int,
        names: tuple[str, ...],
        pieces: Iterator[tuple[np.ndarray, ...]],
        keep: int = 32_768,
    ) -> None:
        self.n = n
        self.names = names
        self._pieces = pieces
        self._keep = keep
        self._lo: deque[int] = deque()
        """First row of each piece in memory (ascending)."""
        self._data: deque[tuple[np.ndarray, ...]] = deque()
        self._hi = 0
        """Rows generated."""
        self._spool = ColumnSpool(names, 16_384)
        self._newest = 0
        self._hot: list[tuple[int, int, list[int]]] = [(0, 0, []) for _ in names]
        """Per column: a piece's row range and its values as Python ints (single-row reads)."""

    def _pull(self, stop: int) -> None:
        while self._hi < min(stop, self.n):
            piece = tuple(np.asarray(a, dtype=np.int64) for a in next(self._pieces))
            self._lo.append(self._hi)
            self._data.append(piece)
            self._spool.extend(list(piece))
            self._hi += len(piece[0])

    def _trim(self) -> None:
        floor = self._newest - self._keep
        while len(self._lo) > 1 and self._lo[1] <= floor:
            self._lo.popleft()
            self._data.popleft()

    def read(self, j: int, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` of column ``j`` (clipped to ``n``)."""
        stop = min(stop, self.n)
        start = min(start, stop)
        if start == stop:
            return np.zeros(0, np.int64)
        self._pull(stop)
        if start > self._newest:
            self._newest = start
            self._trim()
        if not self._lo or start < self._lo[0]:
            return self._spool.read(self.names[j], start, stop)
        k = bisect.bisect_right(self._lo, start) - 1
        parts = []
        while start < stop:
            lo, col = self._lo[k], self._data[k][j]
            take = col[start - lo : stop - lo]
            parts.append(take)
            start += len(take)
            k += 1
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def get(self, j: int, i: int) -> int:
        """Row ``i`` of column ``j`` as a Python int."""
        lo, hi, vals = self._hot[j]
        if lo <= i < hi:
            return vals[i - lo]
        if not 0 <= i < self.n:
            raise IndexError(f"row {i} of {self.n}")
        self._pull(i + 1)
        if not self._lo or i < self._lo[0]:
            return int(self._spool.read(self.names[j], i, i + 1)[0])
        k = bisect.bisect_right(self._lo, i) - 1
        col = self._data[k][j]
        lo = self._lo[k]
        vals = col.tolist()
        self._hot[j] = (lo, lo + len(vals), vals)
        return vals[i - lo]

    def column(self, name: str) -> LazyColumn:
        return LazyColumn(self, self.names.index(name))


class LazyColumn:
    """One column of a :class:`StreamedColumns`, indexed like a 1-d int64 array (slices with
    step 1 and single rows). Writes are ignored: the simulation writes back the arrival times
    it read (:class:`tidal.sim.recorder.SpooledRecorder`)."""

    dtype = np.dtype(np.int64)

    def __init__(self, store: StreamedColumns, j: int) -> None:
        self._store = store
        self._j = j

    def __len__(self) -> int:
        return self._store.n

    def __getitem__(self, idx: Any) -> Any:
        if type(idx) is int and idx >= 0:
            return self._store.get(self._j, idx)
        if isinstance(idx, slice):
            start, stop, step = idx.indices(self._store.n)
            if step != 1:
                raise IndexError("a streamed column reads slices with step 1 only")
            return self._store.read(self._j, start, stop)
        i = int(idx)
        return self._store.get(self._j, i + self._store.n if i < 0 else i)

    def __setitem__(self, idx: Any, value: Any) -> None:
        return None

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self._store.read(self._j, 0, self._store.n)
        return a if dtype is None else a.astype(dtype)


def streamed_request_set(
    n: int, pieces: Iterator[tuple[np.ndarray, ...]], source: str, keep: int = 32_768
) -> tuple[RequestSet, LazyColumn]:
    """A request set over pieces of (arrival ns, prompt, output, model, next): columns
    ``arrival_ns``, ``prompt_len``, ``output_len`` and ``extra['model']``; and the ``next``
    column (the same model's following arrival) on its own."""
    names = ("arrival_ns", "prompt_len", "output_len", "model", "next_ns")
    store = StreamedColumns(n, names, pieces, keep)
    arrays = {k: cast(np.ndarray, store.column(k)) for k in names}  # duck-typed columns
    rs = RequestSet(
        arrays["arrival_ns"],
        arrays["prompt_len"],
        arrays["output_len"],
        source,
        {"model": arrays["model"]},
    )
    return rs, store.column("next_ns")
