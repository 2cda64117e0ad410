"""Plot of an EB⁺ run's selector trace (``DIR/ebplus.parquet``): mode, demand, the crossover
signal Δ(N) against its hysteresis band, and the controller's θ̂, k̂, N̂* and MB-mode cap N_MB
over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tidal.core.io import atomic_write


def _col(table: Any, key: str) -> np.ndarray:
    v = table[key]
    return np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v)


def plot_ebplus(
    table: Any, path: str | Path, title: str = "EB⁺ selector", sticky: float = 3.0
) -> Path:
    """Write a 4-panel PNG of the selector trace. ``table`` is the ``ebplus`` table (a dict of
    columns or a polars DataFrame) as :meth:`tidal.batching.ebplus.EBPlus.extra_tables`
    returns it."""
    import matplotlib  # lazy: optional dependency (matplotlib)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: optional dependency (matplotlib)

    t = _col(table, "time_ns") / 1e9
    mode = np.array([1 if m == "eb" else 0 for m in _col(table, "mode")])
    events = _col(table, "event")
    ev = np.isin(events, ["evaluate", "surge"])
    fig, axes = plt.subplots(4, 1, figsize=(11, 9), sharex=True, constrained_layout=True)
    outside = {"loc": "upper left", "fontsize": 8, "borderaxespad": 0.0}

    ax = axes[0]
    ax.step(t, mode, where="post", color="tab:red", label="mode (left axis: MB / EB)")
    ax.set_yticks([0, 1], ["MB", "EB"])
    ax.set_ylim(-0.2, 1.2)
    ax2 = ax.twinx()
    ax2.plot(t, _col(table, "demand"), ".", ms=2, color="0.6", label="demand")
    ax2.plot(t, _col(table, "n_obs"), color="tab:blue", lw=1, label="N_obs (EMA)")
    ax2.set_ylabel("requests")
    handles = [*ax.get_legend_handles_labels()[0], *ax2.get_legend_handles_labels()[0]]
    ax2.legend(handles=handles, bbox_to_anchor=(1.09, 1.0), **outside)  # past the right axis
    ax.set_title(title)

    ax = axes[1]
    sig = _col(table, "signal")
    delta = _col(table, "delta")
    ax.plot(t[ev], sig[ev] * 1e6, ".-", ms=3, lw=0.8, label="Δ(N) = LHS − RHS")
    ax.plot(t[ev], delta[ev] * 1e6, "--", color="tab:green", lw=0.8, label="δ (→ EB)")
    ax.plot(
        t[ev], -sticky * delta[ev] * 1e6, "--", color="tab:orange", lw=0.8, label="−sticky·δ (→ MB)"
    )
    ax.axhline(0, color="0.5", lw=0.5)
    ax.set_ylabel("µs / token")
    ax.legend(bbox_to_anchor=(1.01, 1.0), **outside)

    ax = axes[2]
    ax.plot(t, _col(table, "theta"), color="tab:purple", label="θ̂ (decode share)")
    ax.set_ylabel("θ̂")
    ax.legend(bbox_to_anchor=(1.01, 1.0), **outside)

    ax = axes[3]
    ax.plot(t, _col(table, "k_hat"), label="k̂ = θ̂·N_obs")
    ax.plot(t, _col(table, "n_hat"), label="N̂* (memory-safe)")
    if "n_mb" in table:  # traces written before the MB-mode cap existed lack the column
        n_mb = _col(table, "n_mb").astype(float)
        ax.plot(t, np.where(n_mb >= 0, n_mb, np.nan), label="N_MB (MB-mode cap)")
    ax.set_ylabel("requests")
    ax.set_xlabel("time (s)")
    ax.legend(bbox_to_anchor=(1.01, 1.0), **outside)

    out = Path(path)
    atomic_write(out, lambda p: fig.savefig(p, dpi=110, format="png"))
    plt.close(fig)
    return out
