"""Forecast error on the ServeGen 14-day language pools (issue 5; warmserve.md §2.1).

Series: each pool's total request rate per 10-minute window (``servegen_aggregate_rate_10min``,
144 windows a day), and — what WarmServe forecasts — the average and peak in-flight load per
5-minute window of requests sampled from that rate: Poisson within the 10-minute windows, the
rate rescaled to a mean of ``--scales`` req/s, output lengths from the pool's ServeGen length
quantiles (capped to [3, 1023] as the artifact does), the artifact's service time of a 7B model
(35 ms + 15 ms per output token) and its peak definition (maximum in-flight count at arrivals).

One-step-ahead forecasts:

* WarmServe: mean of the same window on the earlier days + 2^-d weighted error of the last 10
  windows (the artifact's ``update_loads``), with an online prior over all earlier days
  (warmserve.md §5 Q3) or over the last 6 (the most a one-week trace gives the artifact);
* seasonal-naive: the same window one day earlier;
* Holt-Winters (optional, statsmodels): additive, fitted on days 0–6, run one step ahead;
* rate oracle (in-flight series only): the mean of ``--replicas`` independent samples drawn from
  the same rate series — what a forecaster that knew the true rate of every window would
  predict. Its error is the Poisson noise of the sampled load, which no forecaster removes.

Error: MAPE over days 7–13, leaving out windows below 10% of the median (ServeGen's zero-rate
windows are data gaps; the partial windows at their edges would dominate a relative error).
Usage: ``python bench/forecast_servegen.py [--scales 2 10] [--replicas 4]``.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from tidal.cluster.forecast import holt_winters, mape, seasonal_naive, warmserve_forecast
from tidal.workload.concurrency import window_concurrency
from tidal.workload.lengths import quantile_lengths
from tidal.workload.multimodel import QUANTILES_FILE, read_aggregate_rates
from tidal.workload.paths import traces_dir
from tidal.workload.servegen import length_quantiles

FLOOR = 0.1
"""Windows whose actual value is below 10% of the median are left out (gap edges)."""
TRAIN_DAYS = 7


def evaluate(series: np.ndarray, period: int) -> dict[str, float]:
    start = TRAIN_DAYS * period
    out = {
        "warmserve": mape(series, warmserve_forecast(series, period), start, FLOOR),
        "warmserve-6d": mape(series, warmserve_forecast(series, period, max_days=6), start, FLOOR),
        "seasonal-naive": mape(series, seasonal_naive(series, period), start, FLOOR),
    }
    try:
        filled = series.copy()
        gaps = filled <= 0
        if gaps.any():  # Holt-Winters cannot skip gaps: fill them from the day before
            for i in np.where(gaps)[0]:
                filled[i] = filled[i - period] if i >= period else np.nan
            filled = np.where(np.isnan(filled), np.nanmean(filled), filled)
        out["holt-winters"] = mape(series, holt_winters(filled, period, start), start, FLOOR)
    except ImportError:
        out["holt-winters"] = float("nan")
    return out


def concurrency_series(
    rate: np.ndarray,
    output_q: tuple[np.ndarray, np.ndarray],
    rng: np.random.Generator,
    scale: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(avg, peak) per 5-minute window of one Poisson sample of the rate series."""
    lam = rate / rate[rate > 0].mean() * scale
    counts = rng.poisson(lam * 600)
    t = np.repeat(np.arange(len(rate)) * 600.0, counts) + rng.random(counts.sum()) * 600
    out_tokens = np.clip(quantile_lengths(*output_q, len(t), rng), 3, 1023)
    svc = (35 + 15 * out_tokens) / 1000.0
    order = np.argsort(t)
    return window_concurrency(t[order], svc[order], 300.0, len(rate) * 2)


def fmt(x: float) -> str:
    return "—" if x != x else f"{x:.1%}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scales", type=float, nargs="+", default=[2.0, 10.0])
    ap.add_argument("--replicas", type=int, default=4)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    rates = read_aggregate_rates()
    qfile = traces_dir() / QUANTILES_FILE
    rng = np.random.default_rng(0)
    print(
        "| pool | series | WarmServe (all days) | WarmServe (last 6 days) | seasonal-naive | "
        "Holt-Winters | rate oracle |"
    )
    print("|---|---|---|---|---|---|---|")
    for pool in ("m-small", "m-mid", "m-large"):
        r = rates[pool]
        output_q = length_quantiles(pool, qfile)["output_tokens"]
        rows: dict[str, tuple[np.ndarray, int, np.ndarray | None]] = {
            "rate (10 min)": (r, 144, None)
        }
        for scale in args.scales:
            avg, peak = concurrency_series(r, output_q, rng, scale)
            reps = [concurrency_series(r, output_q, rng, scale) for _ in range(args.replicas)]
            oracle_avg = np.mean([a for a, _ in reps], axis=0)
            oracle_peak = np.mean([p for _, p in reps], axis=0)
            rows[f"avg in-flight (5 min, {scale:g} req/s)"] = (avg, 288, oracle_avg)
            rows[f"peak in-flight (5 min, {scale:g} req/s)"] = (peak, 288, oracle_peak)
        for name, (series, period, oracle) in rows.items():
            e = evaluate(series, period)
            orc = (
                mape(series, oracle, TRAIN_DAYS * period, FLOOR)
                if oracle is not None
                else float("nan")
            )
            print(
                f"| {pool} | {name} | {fmt(e['warmserve'])} | {fmt(e['warmserve-6d'])} | "
                f"{fmt(e['seasonal-naive'])} | {fmt(e['holt-winters'])} | {fmt(orc)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
