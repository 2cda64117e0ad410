"""Piecewise-linear curves over measured grids, identical on Python scalars and numpy arrays.

``y(x) = y_j + s_j·(x − x_j)`` with ``j`` the grid segment holding ``x``: below the first point
the curve is flat (``x`` is clamped to ``x_0``: a kernel never gets faster than its smallest
measured size), beyond the last point it extends the last segment, never downwards (a
falling last segment is held flat at the last value: a bigger batch is never faster than the
largest measured one); :func:`isotonic` gives the monotone envelope of noisy data. The
scalar path (bisect on Python lists) and the array path (``searchsorted`` on float64 arrays)
perform the same IEEE operations in the same order, so :meth:`Curve.at` on each element of
an array equals :meth:`Curve.many` on the array bit for bit (docs/DESIGN.md §2).
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

import numpy as np


class Curve:
    __slots__ = ("_b", "_ba", "_s", "_sa", "_x", "_xa", "_y", "_ya", "x0")

    def __init__(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        if len(xs) != len(ys) or len(xs) == 0:
            raise ValueError("a curve needs as many y as x values, at least one")
        x = [float(v) for v in xs]
        y = [float(v) for v in ys]
        if any(b <= a for a, b in itertools.pairwise(x)):
            raise ValueError("curve grid must be strictly ascending")
        if len(x) == 1:
            x, y = [x[0], x[0] + 1.0], [y[0], y[0]]
        elif y[-1] < y[-2]:  # hold a falling tail flat past the grid
            x, y = [*x, x[-1] + 1.0], [*y, y[-1]]
        self._x, self._y = x, y
        self._s = [(y[i + 1] - y[i]) / (x[i + 1] - x[i]) for i in range(len(x) - 1)]
        self._xa = np.array(x)
        self._ya = np.array(y)
        self._sa = np.array(self._s)
        self._b = [y[i] - self._s[i] * x[i] for i in range(len(self._s))]
        self._ba = np.array(self._b)
        self.x0 = x[0]

    @property
    def xs(self) -> list[float]:
        return list(self._x)

    def at(self, x: float) -> float:
        if x < self.x0:
            x = self.x0
        j = bisect_right(self._x, x) - 1
        if j > len(self._s) - 1:
            j = len(self._s) - 1
        return self._y[j] + self._s[j] * (x - self._x[j])

    def many(self, x: np.ndarray) -> np.ndarray:
        x = np.maximum(x, self.x0)
        j = np.searchsorted(self._xa, x, side="right") - 1
        j = np.minimum(j, len(self._s) - 1)
        return self._ya[j] + self._sa[j] * (x - self._xa[j])

    def plus(self, c: float, x: Any) -> Any:
        """``(c + b_j) + s_j·x`` with b_j the segment's intercept: the curve plus a constant,
        grouped so that :meth:`segment` repeats it exactly; ``x`` a scalar or an array."""
        if isinstance(x, np.ndarray):
            x = np.maximum(x, self.x0)
            j = np.minimum(np.searchsorted(self._xa, x, side="right") - 1, len(self._s) - 1)
            return (c + self._ba[j]) + self._sa[j] * x
        if x < self.x0:
            x = self.x0
        j = min(bisect_right(self._x, x) - 1, len(self._s) - 1)
        return (c + self._b[j]) + self._s[j] * x

    def segment(self, c: float, x: float) -> tuple[float, float, float]:
        """``(c', a, x_end)`` with ``plus(c, y) == c' + a·y`` bit for bit for x ≤ y < x_end."""
        if x < self.x0:
            return (c + self._b[0]) + self._s[0] * self.x0, 0.0, self.x0
        j = min(bisect_right(self._x, x) - 1, len(self._s) - 1)
        end = self._x[j + 1] if j + 1 < len(self._s) else math.inf
        return c + self._b[j], self._s[j], end

    def scaled(self, k: float) -> Curve:
        return Curve(self._x, [k * v for v in self._y])


def isotonic(ys: Sequence[float]) -> list[float]:
    """The least-squares non-decreasing fit of ``ys`` (pool-adjacent-violators), floored at 0.

    Used as the monotone envelope of measured kernel times: a noisy dip (or a falling tail)
    is pooled with its neighbours, so a step never gets faster with more tokens, requests or
    context. The operator is order-preserving (``a ≤ b`` elementwise ⇒ ``iso(a) ≤ iso(b)``),
    so applying it to the rows and then the columns of a table leaves both monotone."""
    blocks: list[list[float]] = []  # [sum, count]
    for v in ys:
        blocks.append([max(float(v), 0.0), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, n = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += n
    out: list[float] = []
    for s, n in blocks:
        out.extend([s / n] * int(n))
    return out


def fill_row(values: Sequence[float | None]) -> list[float]:
    """Fill unmeasured cells of a grid row: leading gaps take the first measured value,
    gaps inside interpolate linearly by index, trailing gaps extend the last two points
    (never downwards)."""
    idx = [i for i, v in enumerate(values) if v is not None]
    if not idx:
        raise ValueError("a row with no measured value")
    known = np.array([values[i] for i in idx], dtype=float)
    out = np.interp(np.arange(len(values)), idx, known)
    if len(idx) >= 2:
        i1, i2 = idx[-2], idx[-1]
        slope = max((known[-1] - known[-2]) / (i2 - i1), 0.0)
        for i in range(i2 + 1, len(values)):
            out[i] = known[-1] + slope * (i - i2)
    return [float(v) for v in out]


def binned_median(
    xs: Sequence[int], ys: Sequence[float], per_octave: int = 4
) -> tuple[list[float], list[float]]:
    """Median-smooth a noisy size sweep (e.g. all-reduce times against bytes): medians of x and
    y in bins of 1/``per_octave`` octave, then a running maximum so time never falls as the
    message grows. Returns the (x, y) knots of the smoothed curve."""
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    b = np.floor(np.log2(x) * per_octave).astype(np.int64)
    kx, ky = [], []
    for k in np.unique(b):
        sel = b == k
        kx.append(float(np.median(x[sel])))
        ky.append(float(np.median(y[sel])))
    return kx, [float(v) for v in np.maximum.accumulate(ky)]
