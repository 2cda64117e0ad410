"""The figure of ``tidal plan --pareto``: throughput per GPU against throughput per user for every
deployment option under the load sweep, one line per option coloured by mode, the Pareto front
highlighted (``pareto.parquet``, :mod:`tidal.experiments.pareto`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from tidal.report.figure_base import FigureFile, _new, _save, legend_outside

MODE_COLOURS = {"mb": "C0", "ebplus": "C2", "disagg": "C3"}
MODE_NAMES = {"mb": "MB", "ebplus": "EB⁺", "disagg": "disagg"}


def pareto_figure(
    parquet: str | Path, out: str | Path, info: dict[str, Any] | None = None
) -> FigureFile | None:
    """``out`` (a PNG): every completed point, one line per option through its loads
    (solid: no speculation, dashed: with it; a mode's options share its colour), the front as
    a black line with ringed points (of the points meeting the TTFT targets; dotted grey: of
    all) and a star on the cheapest point meeting the SLO.
    ``info``: ``pareto.json``'s document (GPU count, SLO, cheapest point) for the title."""
    df = pl.read_parquet(parquet)
    df = df.filter(pl.col("error").is_null() & (pl.col("num_completed") == pl.col("num_requests")))
    if df.height == 0:
        return None
    info = info or {}
    fig, ax = _new(1, 1, w=9.5, h=5.0)
    a = ax[0][0]
    seen: set[str] = set()
    for opt in dict.fromkeys(df["option"].to_list()):
        d = df.filter(pl.col("option") == opt).sort("load")
        mode = str(d["mode"][0])
        spec = str(d["speculative"][0])
        key = f"{MODE_NAMES.get(mode, mode)}{'' if spec == 'off' else ' + spec'}"
        a.plot(
            d["tokens_per_s_per_user"].to_numpy(),
            d["tokens_per_s_per_gpu"].to_numpy(),
            marker="o", ms=3, lw=1.0, alpha=0.75,
            color=MODE_COLOURS.get(mode, "C7"), ls="-" if spec == "off" else "--",
            label=None if key in seen else key,
        )  # fmt: skip
        seen.add(key)
    loose = df.filter(pl.col("on_front")).sort("tokens_per_s_per_user")
    a.plot(
        loose["tokens_per_s_per_user"].to_numpy(), loose["tokens_per_s_per_gpu"].to_numpy(),
        color="0.5", lw=1.0, ls=":", label="front, TTFT unconstrained",
    )  # fmt: skip
    front = df.filter(pl.col("on_front_ttft")).sort("tokens_per_s_per_user")
    a.plot(
        front["tokens_per_s_per_user"].to_numpy(), front["tokens_per_s_per_gpu"].to_numpy(),
        color="k", lw=2.0, label="Pareto front (TTFT SLO met)",
    )  # fmt: skip
    a.scatter(
        front["tokens_per_s_per_user"].to_numpy(), front["tokens_per_s_per_gpu"].to_numpy(),
        s=60, facecolors="none", edgecolors="k", zorder=3,
    )  # fmt: skip
    best = info.get("cheapest_at_slo")
    if best:
        a.scatter(
            [best["tokens_per_s_per_user"]], [best["tokens_per_s_per_gpu"]], marker="*",
            s=220, color="gold", edgecolors="k", zorder=4, label="cheapest meeting the SLO",
        )  # fmt: skip
    a.set_xlabel("tokens/s/user (1 / mean TPOT)")
    a.set_ylabel("output tokens/s/GPU")
    a.grid(alpha=0.3)
    legend_outside(a)
    title = f"Deployment modes on {info.get('gpus', '?')}× {info.get('gpu', '')}: Pareto front"
    if best:
        title += f" · cheapest at SLO: {best['option']} @ {best['load_key']} {best['load']:g}"
    caption = (
        f"Each line is one option through the loads ({info.get('load_key', 'load')} "
        f"{info.get('loads', '')}); the front joins the points no other point beats on both "
        f"axes. SLO: {info.get('slo', {})}."
    )
    return _save(fig, Path(out), title, caption, "Pareto front")
