"""Synthetic open-loop arrival times (int64 ns, non-decreasing).

Convention: the first request arrives at t = 0 and request i arrives after i independent gaps,
``t_i = g_1 + … + g_i``, so n requests use n − 1 gaps and the estimator
``(n − 1) / (t_{n−1} − t_0)`` of the rate is the usual one. Gaps are never clipped or bounded
(clipping long gaps, as vidur does, shortens the mean gap and raises the rate).

- Poisson: ``g ~ Exponential(mean 1/rate)``.
- Gamma with coefficient of variation ``cv``: ``shape k = 1/cv²``, ``scale θ = (1/rate)/k``,
  so ``E[g] = kθ = 1/rate`` and ``sd(g)/E[g] = 1/√k = cv``. ``cv = 1`` is Poisson.
- ``rate = inf``: every request at t = 0.

Seconds are converted to ns once, on the cumulative sum, rounded to the nearest ns.
"""

from __future__ import annotations

import math

import numpy as np

from tidal.core.errors import ConfigError
from tidal.core.units import NS_PER_S
from tidal.workload._io import MAX_SPAN_NS, MAX_SPAN_S


def _check(n: int, rate: float) -> None:
    if n < 0:
        raise ValueError(f"n must be ≥ 0, got {n}")
    if not rate > 0:
        raise ValueError(f"rate must be > 0 (or inf), got {rate}")


def gaps_to_ns(gaps_s: np.ndarray) -> np.ndarray:
    """Arrival times ``[0, g_1, g_1+g_2, …]`` in int64 ns from n − 1 gaps in seconds.

    Raises :class:`ConfigError` (``workload.rate``) when the last arrival lies beyond
    :data:`~tidal.workload._io.MAX_SPAN_NS` (e.g. 10,000 requests at 1e-6 req/s), which would
    wrap the int64 clock into negative times."""
    with np.errstate(over="ignore"):
        t = np.cumsum(gaps_s) * NS_PER_S
    if len(t) and not t[-1] <= MAX_SPAN_NS:
        raise ConfigError(
            "workload.rate",
            f"{len(t) + 1} arrivals at this rate span {t[-1] / NS_PER_S:.3g} s, beyond the "
            f"{MAX_SPAN_S:.3g} s (about {MAX_SPAN_S / 31_557_600:.0f} years) a run may span in "
            "integer nanoseconds",
            "raise the rate or lower num_requests",
        )
    out = np.empty(len(gaps_s) + 1, dtype=np.int64)
    out[0] = 0
    out[1:] = np.rint(t)
    return out


def poisson_arrivals(n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """n Poisson arrivals at ``rate`` req/s; the first at 0."""
    _check(n, rate)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if math.isinf(rate):
        return np.zeros(n, dtype=np.int64)
    return gaps_to_ns(rng.exponential(1.0 / rate, size=n - 1))


def gamma_arrivals(n: int, rate: float, cv: float, rng: np.random.Generator) -> np.ndarray:
    """n arrivals with Gamma gaps of mean ``1/rate`` and coefficient of variation ``cv``."""
    _check(n, rate)
    if not cv > 0:
        raise ValueError(f"cv must be > 0, got {cv}")
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if math.isinf(rate):
        return np.zeros(n, dtype=np.int64)
    shape = 1.0 / (cv * cv)
    scale = (1.0 / rate) / shape
    return gaps_to_ns(rng.gamma(shape, scale, size=n - 1))


def arrival_times(n: int, rate: float, cv: float, rng: np.random.Generator) -> np.ndarray:
    """Poisson when ``cv == 1``, Gamma otherwise; all zeros when ``rate`` is inf."""
    if cv == 1.0:
        return poisson_arrivals(n, rate, rng)
    return gamma_arrivals(n, rate, cv, rng)
