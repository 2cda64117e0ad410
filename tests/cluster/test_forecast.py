"""The WarmServe forecaster (warmserve.md §2.1) and the concurrency it forecasts."""

from __future__ import annotations

import numpy as np
import pytest

from tidal.cluster.forecast import (
    ErrorCorrected,
    SeasonalPrior,
    WindowForecaster,
    detect_period,
    mape,
    seasonal_naive,
    warmserve_forecast,
)
from tidal.workload.concurrency import window_concurrency


def _periodic(period: int, days: int, rng: np.random.Generator, noise: float = 0.05):
    t = np.arange(period * days)
    base = 10 + 6 * np.sin(2 * np.pi * t / period) + 2 * np.sin(4 * np.pi * t / period)
    return base * (1 + noise * rng.standard_normal(len(t)))


@pytest.mark.parametrize("period", [24, 48, 144])
def test_detect_period_recovers_the_period(period):
    x = _periodic(period, 8, np.random.default_rng(period))
    assert detect_period(x, min_lag=period // 2, max_lag=3 * period // 2) == period


def test_exact_periodic_series_is_predicted_exactly_after_one_day_and_history():
    p = 24
    x = _periodic(p, 4, np.random.default_rng(0), noise=0.0)
    pred = warmserve_forecast(x, p, history=10)
    # from day 1 on the prior is exact; the error memory (10 windows) then drains
    np.testing.assert_allclose(pred[p + 10 :], x[p + 10 :], rtol=1e-12)


def test_correction_is_the_weighted_mean_of_recent_errors():
    prior = np.array([1.0, 2.0, 3.0, 4.0])
    f = ErrorCorrected(SeasonalPrior(prior), history=2)
    assert f.prediction == 1.0
    assert f.observe(3.0) == pytest.approx(2.0 + 2.0)  # e0 = 2
    # e1 = 1: (1·1 + ½·2) / 1.5
    assert f.observe(3.0) == pytest.approx(3.0 + (1.0 + 0.5 * 2.0) / 1.5)
    # history 2: e2 = 3 − 3 = 0 and e1 = 1 → (0 + ½) / 1.5
    assert f.observe(3.0) == pytest.approx(4.0 + 0.5 / 1.5)


def test_error_correction_beats_seasonal_naive_after_a_level_shift():
    p = 48
    rng = np.random.default_rng(3)
    x = _periodic(p, 6, rng)
    x[3 * p :] *= 1.5  # the load level jumps on day 3 and stays
    ws = warmserve_forecast(x, p)
    sn = seasonal_naive(x, p)
    assert mape(x, ws, start=3 * p) < 0.7 * mape(x, sn, start=3 * p)


def test_window_forecaster_predicts_avg_and_peak_separately():
    f = WindowForecaster(np.array([4.0, 4.0]), np.array([10.0, 10.0]), history=10)
    assert (f.pred_avg, f.pred_peak) == (4.0, 10.0)
    f.observe(6.0, 9.0)
    assert (f.pred_avg, f.pred_peak) == (6.0, 9.0)


def test_window_concurrency_by_hand():
    # [0, 2), [1, 3), [1.5, 1.6) in windows of 2 s
    avg, peak = window_concurrency(np.array([0.0, 1.0, 1.5]), np.array([2.0, 2.0, 0.1]), 2.0, 3)
    np.testing.assert_allclose(avg, [3.1 / 2, 1.0 / 2, 0.0])
    np.testing.assert_allclose(peak, [3.0, 0.0, 0.0])


def test_concurrency_matches_littles_law_on_a_long_poisson_stream():
    rng = np.random.default_rng(1)
    lam, s = 5.0, 2.0
    t = np.cumsum(rng.exponential(1 / lam, 200_000))
    avg, _ = window_concurrency(t, np.full(len(t), s), 1000.0, int(t[-1] // 1000))
    assert np.mean(avg[1:]) == pytest.approx(lam * s, rel=0.02)


def test_online_prior_averages_the_same_window_of_the_last_days():
    p = 3
    obs = [1.0, 2.0, 3.0, 10.0, 20.0, 30.0, 100.0, 200.0, 300.0]
    everything, last = SeasonalPrior(None, p), SeasonalPrior(None, p, max_days=1)
    for x in obs:
        everything.record(x)
        last.record(x)
    k = len(obs)  # window 0 of day 3
    assert everything(k) == pytest.approx((1 + 10 + 100) / 3)
    assert last(k) == 100.0
    assert SeasonalPrior(None, p, max_days=2)(0) == 0.0
    two = SeasonalPrior(None, p, max_days=2)
    for x in obs:
        two.record(x)
    assert two(k + 2) == pytest.approx((30 + 300) / 2)
