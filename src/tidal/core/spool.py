"""Result columns that live on disk, so a run's memory does not grow with its span.

:class:`ColumnSpool` appends int64 rows a chunk at a time: ``chunk`` rows are buffered in
memory, then each column's chunk is appended to that column's raw file in a private temporary
directory (removed when the spool is garbage-collected or the process exits). Memory is
``chunk · columns · 8`` bytes whatever the row count.

:class:`ColumnSet` is a read-only view of equal-length columns from several sources (in-memory
arrays, spools, ``arange``) that reads any row range on demand: ``cols[name]`` materialises one
column, :meth:`ColumnSet.chunks` streams it. Consumers that hash or write columns stream them
(:func:`tidal.report.digest.result_digest`, :func:`tidal.report.io.write_parquet`).
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path

import numpy as np

Reader = Callable[[int, int], np.ndarray]
"""``read(start, stop)``: rows ``[start, stop)`` of one column."""

STREAM_ROWS = 65_536
"""Rows per chunk when a :class:`ColumnSet` is streamed."""


class ColumnSpool:
    """Append-only int64 columns: a fixed in-memory chunk, the rest in one raw file each."""

    def __init__(self, names: tuple[str, ...], chunk: int = 65_536) -> None:
        self.names = names
        self._chunk = max(int(chunk), 16)
        self._buf = [np.empty(self._chunk, dtype=np.int64) for _ in names]
        self._n = 0
        """Rows in the in-memory chunk."""
        self._flushed = 0
        """Rows in the files."""
        self._dir: Path | None = None

    def __len__(self) -> int:
        return self._flushed + self._n

    @property
    def columns(self) -> list[np.ndarray]:
        """The in-memory chunk's arrays, for direct row writes (:meth:`commit` after)."""
        return self._buf

    def room(self) -> int:
        """Index of the next free row of the in-memory chunk (flushing a full one first)."""
        if self._n == self._chunk:
            self._flush()
        return self._n

    def commit(self) -> None:
        """Count the row just written at :meth:`room`'s index."""
        self._n += 1

    def append(self, *values: int) -> None:
        n = self.room()
        for col, v in zip(self._buf, values, strict=True):
            col[n] = v
        self._n = n + 1

    def extend(self, arrays: list[np.ndarray]) -> None:
        """Append rows given as one array per column (equal lengths)."""
        k, done = len(arrays[0]), 0
        while done < k:
            n = self.room()
            take = min(self._chunk - n, k - done)
            for col, a in zip(self._buf, arrays, strict=True):
                col[n : n + take] = a[done : done + take]
            self._n = n + take
            done += take

    def _path(self, j: int) -> Path:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="tidal-spool-"))
            weakref.finalize(self, shutil.rmtree, self._dir, True)
        return self._dir / f"{j}.i8"

    def _flush(self) -> None:
        if self._n == 0:
            return
        for j, col in enumerate(self._buf):
            with open(self._path(j), "ab") as f:
                f.write(col[: self._n].tobytes())
        self._flushed += self._n
        self._n = 0

    def read(self, name: str, start: int, stop: int) -> np.ndarray:
        j = self.names.index(name)
        stop = min(stop, len(self))
        start = min(start, stop)
        parts = []
        if start < self._flushed:
            end = min(stop, self._flushed)
            path = self._path(j)
            parts.append(np.fromfile(path, dtype=np.int64, count=end - start, offset=start * 8))
        if stop > self._flushed:
            lo = max(start, self._flushed) - self._flushed
            parts.append(self._buf[j][lo : stop - self._flushed].copy())
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def take(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Column ``name`` at the row indices ``rows`` (any order), read through a map of the
        file that is closed again (so its pages do not stay resident)."""
        j = self.names.index(name)
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty(len(rows), dtype=np.int64)
        old = rows < self._flushed
        if old.any():
            mm = np.memmap(self._path(j), dtype=np.int64, mode="r", shape=(self._flushed,))
            out[old] = mm[rows[old]]
            del mm
        out[~old] = self._buf[j][rows[~old] - self._flushed]
        return out

    def reader(self, name: str) -> Reader:
        return lambda a, b: self.read(name, a, b)


def array_reader(a: np.ndarray, dtype: type | None = None) -> Reader:
    """Rows of an in-memory array (cast to ``dtype`` chunk by chunk, never whole)."""
    if dtype is None or a.dtype == dtype:
        return lambda s, e: a[s:e]
    return lambda s, e: a[s:e].astype(dtype)


def range_reader() -> Reader:
    return lambda s, e: np.arange(s, e, dtype=np.int64)


class ColumnSet(MutableMapping[str, np.ndarray]):
    """Equal-length named columns read on demand (module docstring). Setting a name stores an
    in-memory array (keeping the name's position if it exists, as a dict does)."""

    def __init__(self, num_rows: int, readers: dict[str, tuple[Reader, np.dtype]]) -> None:
        self.num_rows = num_rows
        self._readers = dict(readers)

    @classmethod
    def of_arrays(cls, cols: dict[str, np.ndarray]) -> ColumnSet:
        n = len(next(iter(cols.values()))) if cols else 0
        return cls(n, {k: (array_reader(v), v.dtype) for k, v in cols.items()})

    def __reduce__(self) -> tuple[object, tuple[dict[str, np.ndarray]]]:
        """Pickled (sent to another process) as in-memory columns."""
        return (ColumnSet.of_arrays, (dict(self),))

    def dtype(self, name: str) -> np.dtype:
        return self._readers[name][1]

    def read(self, name: str, start: int, stop: int) -> np.ndarray:
        return self._readers[name][0](start, min(stop, self.num_rows))

    def chunks(self, name: str, rows: int = STREAM_ROWS) -> Iterator[np.ndarray]:
        for s in range(0, self.num_rows, rows):
            yield self.read(name, s, s + rows)

    def row_chunks(self, names: tuple[str, ...], rows: int = STREAM_ROWS) -> Iterator[list]:
        """The columns ``names`` over the same row ranges of ``rows``, in row order."""
        for s in range(0, self.num_rows, max(int(rows), 1)):
            yield [self.read(k, s, s + rows) for k in names]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.read(name, 0, self.num_rows)

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        a = np.asarray(value)
        if len(a) != self.num_rows:
            raise ValueError(f"column {name!r} has {len(a)} rows, not {self.num_rows}")
        self._readers[name] = (array_reader(a), a.dtype)

    def __delitem__(self, name: str) -> None:
        del self._readers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._readers)

    def __len__(self) -> int:
        return len(self._readers)
