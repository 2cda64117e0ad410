"""The online output-length estimator of EB's Algorithm 1 (ebplus.md §3.1)."""

from __future__ import annotations

import numpy as np
import pytest

from tidal.batching.output_stats import OutputStats, fit_hazard


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mean", [100, 512])
def test_geometric_outputs_give_p0_near_one_over_mean_and_no_slope(seed, mean):
    rng = np.random.default_rng(seed)
    x = rng.geometric(1.0 / mean, size=500)
    fit = fit_hazard(x)
    assert fit is not None
    p0, eta = fit
    assert p0 == pytest.approx(1.0 / mean, rel=0.15)
    # constant failure rate: the fitted hazard moves < 20 % of p0 over a mean lifetime
    assert eta * mean < 0.2 * p0


def test_bounded_outputs_have_an_increasing_hazard():
    # uniform ±50 %: nobody finishes before 256 and everybody by 768 → hazard rises steeply
    x = np.random.default_rng(7).integers(256, 769, size=500)
    p0, eta = fit_hazard(x)
    assert eta * x.mean() > 2 * p0
    assert p0 == pytest.approx(1.0 / x.mean())  # the WLS intercept is floored at 1/mean


def test_fit_needs_enough_survivors():
    assert fit_hazard(np.array([3, 3, 3])) is None
    assert fit_hazard(np.array([], dtype=np.int64)) is None


def test_weighted_least_squares_by_hand():
    # 40 samples: 10 of each of 1, 2, 3, 4 → survivors 40, 30, 20, 10; hazards 1/4, 1/3, 1/2, 1.
    # Fit range [t_5, max(t_95, t_5 + 10)] = [1, 11] ∩ survivors ≥ 5 → t = 1..4.
    x = np.repeat([1, 2, 3, 4], 10)
    t = np.array([1.0, 2, 3, 4])
    w = np.array([40.0, 30, 20, 10])
    h = np.array([1 / 4, 1 / 3, 1 / 2, 1.0])
    a = np.array([[w.sum(), (w * t).sum()], [(w * t).sum(), (w * t * t).sum()]])
    b = np.array([(w * h).sum(), (w * t * h).sum()])
    p0, eta = np.linalg.solve(a, b)
    got = fit_hazard(x)
    assert got is not None
    assert got[1] == pytest.approx(eta)
    assert got[0] == pytest.approx(max(p0, 1 / x.mean()))


def test_update_cadence_window_and_emas():
    s = OutputStats(window=500, update_every=100, min_samples=30)
    fits = [s.push_output(50) for _ in range(99)]
    assert not any(fits)
    assert s.push_output(50)  # the 100th completion triggers a re-fit
    batches = [s.push_batch(50) for _ in range(100)]
    assert batches == [False] * 99 + [True]
    # first batch assigned directly
    assert s.initialized
    assert s.mu_o == 50
    assert s.p == pytest.approx(1 / 50)
    for _ in range(100):
        s.push_batch(150)
    assert s.mu_o == pytest.approx(0.2 * 150 + 0.8 * 50)
    assert s.p == pytest.approx(0.2 / 150 + 0.8 / 50)
    # μ̂_L: EMA 0.05 from 512
    s.push_prompt(1024)
    assert s.mu_l == pytest.approx(0.05 * 1024 + 0.95 * 512)
    # window keeps the last 500
    for i in range(700):
        s.push_output(i + 1)
    assert len(s.samples) == 500
    assert s.samples[0] == 201


def test_min_samples_delays_the_first_fit():
    # the counter keeps running until a fit happens (reference behaviour)
    s = OutputStats(window=10, update_every=2, min_samples=5)
    assert [s.push_output(9) for _ in range(6)] == [False, False, False, False, True, False]


def test_refit_keeps_the_previous_estimate_without_data():
    s = OutputStats()
    s.p0, s.eta = 0.123, 0.0
    for _ in range(3):
        s.push_output(2)
    assert s.refit_hazard() == (0.123, 0.0)


def test_prompt_variance_from_two_emas_and_the_window():
    s = OutputStats(window=3, update_every=10, mu_l0=100.0)
    assert s.var_l == 0.0  # both EMAs start at the prior μ_L
    for p in (300, 100):
        s.push_prompt(p)
    a = 0.05
    m1 = a * 100 + (1 - a) * (a * 300 + (1 - a) * 100.0)
    m2 = a * 100**2 + (1 - a) * (a * 300**2 + (1 - a) * 100.0**2)
    assert s.mu_l == pytest.approx(m1)
    assert s.var_l == pytest.approx(m2 - m1 * m1)
    for o in (5, 6, 7, 8):
        s.push_output(o)
    assert s.window().tolist() == [6, 7, 8]
