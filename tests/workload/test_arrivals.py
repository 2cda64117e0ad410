"""Statistical and structural tests of the synthetic arrival generators."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidal.workload.arrivals import arrival_times, gamma_arrivals, gaps_to_ns, poisson_arrivals

N = 200_000
RATE = 5.0


def _gaps_s(t_ns: np.ndarray) -> np.ndarray:
    return np.diff(t_ns) / 1e9


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_rate_and_cv(cv: float) -> None:
    t = arrival_times(N, RATE, cv, np.random.default_rng(7))
    gaps = _gaps_s(t)
    # Mean gap: standard error cv/(rate·√n); allow 5 of them.
    se = cv / RATE / math.sqrt(len(gaps))
    assert abs(gaps.mean() - 1 / RATE) < 5 * se
    rate_hat = (N - 1) / (t[-1] / 1e9)
    assert rate_hat == pytest.approx(RATE, rel=5 * cv / math.sqrt(N))
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.04)


def test_first_arrival_at_zero_and_sorted() -> None:
    t = gamma_arrivals(1000, 2.0, 2.0, np.random.default_rng(0))
    assert t.dtype == np.int64
    assert t[0] == 0
    assert np.all(np.diff(t) >= 0)


def test_no_gap_clipping() -> None:
    """Exponential gaps beyond 8 means occur (P = e^-8 each); a clipped generator has none."""
    gaps = _gaps_s(poisson_arrivals(N, RATE, np.random.default_rng(3)))
    assert gaps.max() > 8 / RATE


def test_infinite_rate_all_at_zero() -> None:
    rng = np.random.default_rng(0)
    assert np.array_equal(arrival_times(5, math.inf, 1.0, rng), np.zeros(5, np.int64))
    assert np.array_equal(arrival_times(5, math.inf, 2.0, rng), np.zeros(5, np.int64))


def test_small_and_bad_sizes() -> None:
    rng = np.random.default_rng(0)
    assert len(poisson_arrivals(0, 1.0, rng)) == 0
    assert list(poisson_arrivals(1, 1.0, rng)) == [0]
    with pytest.raises(ValueError, match="rate"):
        poisson_arrivals(3, 0.0, rng)
    with pytest.raises(ValueError, match="cv"):
        gamma_arrivals(3, 1.0, 0.0, rng)


def test_gaps_to_ns_rounds_cumulative_sum() -> None:
    assert list(gaps_to_ns(np.array([0.5, 1e-10, 0.25]))) == [
        0,
        500_000_000,
        500_000_000,
        750_000_000,
    ]


def test_deterministic_for_a_seed() -> None:
    a = arrival_times(1000, 3.0, 2.5, np.random.default_rng(42))
    b = arrival_times(1000, 3.0, 2.5, np.random.default_rng(42))
    c = arrival_times(1000, 3.0, 2.5, np.random.default_rng(43))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


@given(
    n=st.integers(0, 300),
    rate=st.floats(0.01, 1e4),
    cv=st.floats(0.1, 10),
    seed=st.integers(0, 2**32 - 1),
)
def test_structure(n: int, rate: float, cv: float, seed: int) -> None:
    t = arrival_times(n, rate, cv, np.random.default_rng(seed))
    assert len(t) == n
    assert t.dtype == np.int64
    assert np.all(np.diff(t) >= 0)
    if n:
        assert t[0] == 0
