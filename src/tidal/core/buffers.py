"""Growable int64 column buffers (amortised O(1) append, numpy storage, 8 bytes per value)."""

from __future__ import annotations

import numpy as np


class Int64Buffer:
    __slots__ = ("_a", "_n")

    def __init__(self, capacity: int = 1024) -> None:
        self._a = np.empty(max(capacity, 16), dtype=np.int64)
        self._n = 0

    def _grow(self, need: int) -> None:
        cap = len(self._a)
        while cap < need:
            cap *= 2
        a = np.empty(cap, dtype=np.int64)
        a[: self._n] = self._a[: self._n]
        self._a = a

    def append(self, x: int) -> None:
        if self._n == len(self._a):
            self._grow(self._n + 1)
        self._a[self._n] = x
        self._n += 1

    def extend(self, xs: np.ndarray) -> None:
        k = len(xs)
        if self._n + k > len(self._a):
            self._grow(self._n + k)
        self._a[self._n : self._n + k] = xs
        self._n += k

    def __len__(self) -> int:
        return self._n

    def view(self) -> np.ndarray:
        return self._a[: self._n]
