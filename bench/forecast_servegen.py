"""Forecast error on the ServeGen 14-day language pools (issue 5; warmserve.md §2.1).

Series: each pool's total request rate per 10-minute window (``servegen_aggregate_rate_10min``,
144 windows a day), and — closer to what WarmServe forecasts — the average and peak in-flight
load per 5-minute window of requests sampled from that rate (Poisson within windows, 0.05 of the
pool's mean rate, artifact service times of a 7B model). One-step-ahead forecasts:

* WarmServe: mean of the same window on all earlier days + 2^-d weighted error of the last 10
  windows (online prior; naive before day 1);
* seasonal-naive: the same window one day earlier;
* Holt-Winters (optional, statsmodels): additive, fitted on days 0–6, run one step ahead.

Error: MAPE over days 7–13, leaving out windows below 10% of the median (ServeGen's zero-rate
windows are data gaps; the partial windows at their edges would dominate a relative error).
Usage: ``python bench/forecast_servegen.py``.
"""

from __future__ import annotations

import warnings

import numpy as np

from tidal.cluster.forecast import holt_winters, mape, seasonal_naive, warmserve_forecast
from tidal.workload.concurrency import window_concurrency
from tidal.workload.multimodel import read_aggregate_rates

FLOOR = 0.1
"""Windows whose actual value is below 10% of the median are left out (gap edges)."""


def evaluate(series: np.ndarray, period: int, train_days: int = 7) -> dict[str, float]:
    start = train_days * period
    out = {
        "warmserve": mape(series, warmserve_forecast(series, period), start, FLOOR),
        "seasonal-naive": mape(series, seasonal_naive(series, period), start, FLOOR),
    }
    try:
        filled = series.copy()
        gaps = filled <= 0
        if gaps.any():  # Holt-Winters cannot skip gaps: fill them from the day before
            idx = np.where(gaps)[0]
            for i in idx:
                filled[i] = filled[i - period] if i >= period else np.nan
            filled = np.where(np.isnan(filled), np.nanmean(filled), filled)
        out["holt-winters"] = mape(series, holt_winters(filled, period, start), start, FLOOR)
    except ImportError:
        out["holt-winters"] = float("nan")
    return out


def concurrency_series(rate: np.ndarray, rng: np.random.Generator, scale: float):
    lam = rate / rate[rate > 0].mean() * scale
    counts = rng.poisson(lam * 600)
    t = np.repeat(np.arange(len(rate)) * 600.0, counts) + rng.random(counts.sum()) * 600
    out_tokens = rng.geometric(1 / 150, len(t))
    svc = (35 + 15 * out_tokens) / 1000.0
    n = len(rate) * 2
    return window_concurrency(np.sort(t), svc, 300.0, n)


def main() -> None:
    warnings.filterwarnings("ignore")
    rates = read_aggregate_rates()
    rng = np.random.default_rng(0)
    print("| pool | series | WarmServe MAPE | seasonal-naive MAPE | Holt-Winters MAPE |")
    print("|---|---|---|---|---|")
    for pool in ("m-small", "m-mid", "m-large"):
        r = rates[pool]
        rows = {"rate (10 min)": (r, 144)}
        avg, peak = concurrency_series(r, rng, 2.0)
        rows["avg in-flight (5 min)"] = (avg, 288)
        rows["peak in-flight (5 min)"] = (peak, 288)
        for name, (series, period) in rows.items():
            e = evaluate(series, period)
            print(
                f"| {pool} | {name} | {e['warmserve']:.1%} | {e['seasonal-naive']:.1%} | "
                f"{e['holt-winters']:.1%} |"
            )


if __name__ == "__main__":
    main()
