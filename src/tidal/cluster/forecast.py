"""Load forecasting per model and window (docs/research/warmserve.md §2.1), in plain numpy.

WarmServe predicts, one window (W = 5 min) ahead, the time-averaged and the peak in-flight load
of each model. Its prediction for window k+1, made at the end of window k, is

    pred_{k+1} = prior_{k+1} + Σ_{d<n} 2^-d (obs_{k-d} − prior_{k-d}) / Σ_{d<n} 2^-d,
    n = min(history, k+1),

i.e. a seasonal prior corrected by the exponentially weighted recent error (decay 1/2, ten
windows). This is the artifact's ``Scheduler.update_loads`` (absolute errors, weights
normalised by their sum over the windows seen so far). The prior of a window is the mean of the
same window on the earlier days: given offline (the artifact's "character file",
:class:`WindowForecaster` with ``prior``: the mean over the 3–6 earlier days of the trace's week)
or learned online from the observations (``period`` windows per day; all earlier days, or the
last ``max_days`` of them; before the first full day the prior falls back to the last
observation, i.e. naive).

Baselines for the benchmark: :func:`seasonal_naive` (same window one period earlier) and, with
the optional ``forecast`` extra, :func:`holt_winters` (statsmodels' additive Holt-Winters fitted
on a training prefix, then run one step ahead with fixed parameters).
"""

from __future__ import annotations

import numpy as np


class SeasonalPrior:
    """Mean of the same window on earlier periods (days), from fixed arrays or online."""

    def __init__(
        self, fixed: np.ndarray | None = None, period: int = 288, max_days: int | None = None
    ) -> None:
        self.fixed = None if fixed is None else np.asarray(fixed, dtype=np.float64)
        self.period = period
        self.max_days = max_days
        """Online prior: average at most this many earlier days (None: all of them)."""
        self.obs: list[float] = []

    def record(self, value: float) -> None:
        self.obs.append(float(value))

    def __call__(self, k: int) -> float:
        if self.fixed is not None:
            if len(self.fixed) == 0:
                return 0.0
            return float(self.fixed[min(k, len(self.fixed) - 1)])
        p = self.period
        earlier = self.obs[k - p :: -p] if k - p >= 0 else []
        if self.max_days is not None:
            earlier = earlier[: self.max_days]
        earlier = [x for x in earlier if x == x]
        if earlier:
            return float(np.mean(earlier))
        if self.obs:
            return self.obs[min(k, len(self.obs)) - 1]
        return 0.0


class ErrorCorrected:
    """One signal (avg or peak) of one model: prior plus weighted recent error (module doc)."""

    def __init__(self, prior: SeasonalPrior, history: int = 10) -> None:
        self.prior = prior
        self.weights = 0.5 ** np.arange(history)
        self.errors: list[float] = []
        self.k = 0
        """Index of the window being predicted."""
        self.prediction = prior(0)

    def observe(self, value: float) -> float:
        """Close window ``k`` with its observed value; returns the prediction for ``k+1``."""
        e = value - self.prior(self.k)
        self.errors.append(e)
        self.prior.record(value)
        self.k += 1
        n = min(len(self.weights), len(self.errors))
        recent = np.array(self.errors[-n:][::-1])
        w = self.weights[:n]
        self.prediction = self.prior(self.k) + float((w * recent).sum() / w.sum())
        return self.prediction


class WindowForecaster:
    """Average and peak forecasters of one model."""

    def __init__(
        self,
        prior_avg: np.ndarray | None,
        prior_peak: np.ndarray | None,
        history: int = 10,
        period: int = 288,
    ) -> None:
        self.avg = ErrorCorrected(SeasonalPrior(prior_avg, period), history)
        self.peak = ErrorCorrected(SeasonalPrior(prior_peak, period), history)

    @property
    def pred_avg(self) -> float:
        return max(self.avg.prediction, 0.0)

    @property
    def pred_peak(self) -> float:
        return max(self.peak.prediction, 0.0)

    def observe(self, avg: float, peak: float) -> None:
        self.avg.observe(avg)
        self.peak.observe(peak)


# ---------------------------------------------------------------------- whole-series helpers
def warmserve_forecast(
    series: np.ndarray, period: int, history: int = 10, max_days: int | None = None
) -> np.ndarray:
    """One-step-ahead predictions ``pred[k]`` (made after window k−1) with an online seasonal
    prior over all (or the last ``max_days``) earlier days; ``pred[0]`` is 0 (no information)."""
    f = ErrorCorrected(SeasonalPrior(None, period, max_days), history)
    out = np.zeros(len(series))
    out[0] = f.prediction
    for k in range(len(series) - 1):
        out[k + 1] = f.observe(float(series[k]))
    return out


def seasonal_naive(series: np.ndarray, period: int) -> np.ndarray:
    """``pred[k] = series[k − period]`` (NaN for the first period)."""
    out = np.full(len(series), np.nan)
    out[period:] = series[:-period]
    return out


def holt_winters(series: np.ndarray, period: int, train: int) -> np.ndarray:
    """Additive Holt-Winters: parameters fitted by statsmodels on ``series[:train]``, then one
    step ahead over the whole series with those parameters (NaN before ``train``)."""
    from statsmodels.tsa.holtwinters import ExponentialSmoothing  # lazy: keeps tidal --help fast

    fit = ExponentialSmoothing(
        series[:train],
        trend="add",
        seasonal="add",
        seasonal_periods=period,
        initialization_method="estimated",
    ).fit()
    p = fit.params
    a, b, g = p["smoothing_level"], p["smoothing_trend"], p["smoothing_seasonal"]
    level, trend = p["initial_level"], p["initial_trend"]
    season = list(np.asarray(p["initial_seasons"], dtype=np.float64))
    out = np.full(len(series), np.nan)
    for k, y in enumerate(series):
        s = season[k % period]
        if k >= train:
            out[k] = level + trend + s
        new_level = a * (y - s) + (1 - a) * (level + trend)
        trend = b * (new_level - level) + (1 - b) * trend
        season[k % period] = g * (y - new_level) + (1 - g) * s
        level = new_level
    return out


def mape(actual: np.ndarray, pred: np.ndarray, start: int = 0, floor: float = 0.0) -> float:
    """Mean |pred − actual| / actual over windows ≥ ``start`` with a prediction and an actual
    value above ``floor`` × the median actual (and > 0): ServeGen's zero-rate windows are data
    gaps, and the partial windows at their edges would dominate a relative error."""
    a, p = np.asarray(actual, float)[start:], np.asarray(pred, float)[start:]
    ok = (a > 0) & ~np.isnan(p)
    if floor > 0 and ok.any():
        ok &= a > floor * np.median(a[ok])
    return float(np.mean(np.abs(p[ok] - a[ok]) / a[ok])) if ok.any() else float("nan")


def detect_period(series: np.ndarray, min_lag: int = 2, max_lag: int | None = None) -> int:
    """The lag in [min_lag, max_lag] with the highest autocorrelation of the de-meaned series."""
    x = np.asarray(series, float) - np.mean(series)
    n = len(x)
    max_lag = max_lag or n // 2
    denom = float((x * x).sum()) or 1.0
    ac = [float((x[:-lag] * x[lag:]).sum()) / denom for lag in range(min_lag, max_lag + 1)]
    return min_lag + int(np.argmax(ac))
