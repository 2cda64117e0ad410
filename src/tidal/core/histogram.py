"""A weighted histogram of positive integers on log-spaced bins, for latency percentiles over
millions of samples in constant memory.

Bins are floating-point-like and computed exactly: a value v = m·2^e with m in [0.5, 1)
(``numpy.frexp``, exact for integers below 2^53) falls in bin ``e·256 + ⌊(2m − 1)·256⌋``, so a
bin spans a relative width of at most 1/256 (0.4%); percentiles are reported as bin midpoints.
Counts are float64 sums of integer weights, exact below 2^53 whatever the order of the adds, so
a batch is binned over just the span of bins it touches.

Samples added one at a time (:meth:`LogHistogram.add`, :meth:`LogHistogram.extend`) are buffered
as Python ints and binned in bulk once :data:`BUFFER` are held, so a histogram holds at most
``BUFFER`` + one batch unbinned samples (~40–56 B each) besides its ``_NBINS · 8`` B of counts,
whatever the number of samples (a cluster keeps one per engine for the whole run). Counts are
exact integer sums, so where the buffer is flushed does not change them.
"""

from __future__ import annotations

import numpy as np

_SUB = 256
_NBINS = 64 * _SUB
BUFFER = 4096
"""Buffered samples that trigger binning (module docstring)."""


def _bins(v: np.ndarray) -> np.ndarray:
    m, e = np.frexp(np.maximum(v, 1).astype(np.float64))
    return e.astype(np.int64) * _SUB + np.floor((m * 2.0 - 1.0) * _SUB).astype(np.int64)


class LogHistogram:
    def __init__(self) -> None:
        self._counts = np.zeros(_NBINS, dtype=np.float64)
        self._values: list[int] = []
        self._runs: list[int] = []
        """Buffered weights as runs: (length, weight) pairs, flattened."""

    def add(self, value: int, weight: int) -> None:
        self._values.append(value)
        self._runs += (1, weight)
        if len(self._values) >= BUFFER:
            self._flush()

    def extend(self, values: list[int], weight: int) -> None:
        """Add Python-int samples sharing one weight (buffered, binned in bulk)."""
        self._values += values
        self._runs += (len(values), weight)
        if len(self._values) >= BUFFER:
            self._flush()

    def add_many(self, values: np.ndarray, weight: int) -> None:
        """Add numpy samples sharing one weight (binned now, over the bins they span)."""
        if len(values) == 0:
            return
        idx = _bins(np.asarray(values, dtype=np.int64))
        lo = int(idx.min())
        c = np.bincount(idx - lo)
        self._counts[lo : lo + len(c)] += c * float(weight)

    def _bin(self, v: np.ndarray, w: np.ndarray) -> None:
        if len(v) == 0:
            return
        idx = _bins(v)
        lo = int(idx.min())
        c = np.bincount(idx - lo, weights=w)
        self._counts[lo : lo + len(c)] += c

    def _flush(self) -> None:
        if self._values:
            runs = np.array(self._runs, dtype=np.int64)
            w = np.repeat(runs[1::2].astype(np.float64), runs[0::2])
            self._bin(np.array(self._values, dtype=np.int64), w)
            self._values.clear()
            self._runs.clear()

    def merge(self, other: LogHistogram) -> None:
        """Add ``other``'s samples (the histogram of the union of both sample sets)."""
        other._flush()
        self._flush()
        self._counts += other._counts

    @property
    def total_weight(self) -> float:
        self._flush()
        return float(self._counts.sum())

    def percentiles(self, pcts: tuple[int, ...]) -> list[float | None]:
        """Bin midpoints of the weighted percentiles (smallest bin whose cumulative weight
        reaches p% of the total); None when empty."""
        self._flush()
        cw = np.cumsum(self._counts)
        total = cw[-1]
        if total <= 0:
            return [None for _ in pcts]
        out: list[float | None] = []
        for p in pcts:
            i = int(np.searchsorted(cw, total * p / 100.0, side="left"))
            e, k = divmod(i, _SUB)
            lo = (1.0 + k / _SUB) * 2.0 ** (e - 1)
            hi = (1.0 + (k + 1) / _SUB) * 2.0 ** (e - 1)
            out.append((lo + hi) / 2.0)
        return out
