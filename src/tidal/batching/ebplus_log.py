"""EB⁺'s results: the decision log (one row per selector event, the ``ebplus`` table) and metrics.

Each row records the event, the mode after it, the demand and its EMA N_obs, the estimates
(r, μ̂_L, μ̂_O, θ̂, k̂, N̂*, N_MB), the crossover's two sides, its signal and δ, and the
cooldown left (:class:`tidal.batching.ebplus.EBPlus` appends them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tidal.batching.ebplus import EBPlus

SERIES = (
    "time_ns",
    "event",
    "mode",
    "demand",
    "n_obs",
    "r",
    "mu_l",
    "mu_o",
    "theta",
    "k_hat",
    "n_hat",
    "n_mb",
    "lhs",
    "rhs",
    "signal",
    "delta",
    "cooldown",
)
_INT_COLUMNS = ("time_ns", "demand", "n_hat", "n_mb", "cooldown")


def new_series() -> dict[str, list[Any]]:
    """An empty log: one list per column of :data:`SERIES`."""
    return {k: [] for k in SERIES}


def selector_row(
    p: EBPlus, now_ns: int, event: str, lhs: float, rhs: float, signal: float, delta: float
) -> tuple[Any, ...]:
    """The row of :data:`SERIES` for an event of selector ``p`` in its current state."""
    ctl = p.ctl
    s = ctl.stats
    return (
        now_ns,
        event,
        p.mode,
        p.demand,
        p.n_obs,
        s.mu_o / (s.mu_l + s.mu_o),
        s.mu_l,
        s.mu_o,
        ctl.theta,
        ctl.theta * max(1.0, p.n_obs),
        ctl.n_hat,
        -1 if p.n_mb is None else p.n_mb,
        lhs,
        rhs,
        signal,
        delta,
        p.cooldown_left,
    )


def append_row(series: dict[str, list[Any]], row: tuple[Any, ...]) -> None:
    """Append ``row`` (one value per column, in :data:`SERIES` order) to the log."""
    for key, v in zip(series, row, strict=True):
        series[key].append(v)


def series_columns(series: dict[str, list[Any]]) -> dict[str, Any]:
    """The log as table columns: event and mode as lists, counts int64, the rest float64."""
    cols: dict[str, Any] = {}
    for key, vals in series.items():
        if key in ("event", "mode"):
            cols[key] = list(vals)
        elif key in _INT_COLUMNS:
            cols[key] = np.asarray(vals, dtype=np.int64)
        else:
            cols[key] = np.asarray(vals, dtype=np.float64)
    return cols


def selector_metrics(p: EBPlus) -> dict[str, Any]:
    """The run's metrics of selector ``p``: EB's counters and gauges, the final mode, MB mode's
    cap (-1: none), when the forecast first missed (-1.0: never) and the probes run."""
    return {
        **p.stats().metrics(),
        "ebplus_final_mode": p.mode,
        "ebplus_mb_cap": -1 if (cap := p.mb_cap()) is None else cap,
        "ebplus_forecast_missed_s": p.missed_ns / 1e9 if p.missed_ns >= 0 else -1.0,
        **p.eb.gauges(),
        **({"ebplus_probes": p.probe.num_probes} if p.probe.opts.measure else {}),
    }
