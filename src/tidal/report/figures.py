"""PNG figures of results. Each function draws one figure from files, or returns None when its
input is absent (no sweep table, no cluster timeline, no EB+ mode series), so the report picks
up new result files without changes here.

Figures are standalone ``matplotlib.figure.Figure`` objects rendered by the Agg canvas (no
pyplot, no global state). Every figure is titled with the configuration the runs share
(:func:`tidal.report.describe.describe`); curves are labelled with what differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from tidal.core.metrics import request_latencies
from tidal.report.collect import Results, RunDir
from tidal.report.describe import describe
from tidal.report.figure_base import (
    _REQ_COLS,
    MAX_CURVES,
    MAX_ROWS,
    FigureFile,
    _new,
    _save,
    _shown,
    _title,
    legend_outside,
    pick,
    run_config,
    slo_lines,
)
from tidal.report.plan_figures import plan_costs, plan_search
from tidal.report.timeline_figures import (
    cluster_memory_timeline,
    ebplus_modes,
    gpu_timeline,
    queue_timeline,
)

__all__ = [
    "MAX_CURVES",
    "MAX_ROWS",
    "FigureFile",
    "all_figures",
    "cluster_memory_timeline",
    "ebplus_modes",
    "gpu_timeline",
    "latency_cdfs",
    "pick",
    "plan_costs",
    "plan_search",
    "queue_timeline",
    "rate_curves",
    "roofline",
    "run_config",
]


# ---------------------------------------------------------------------------- per request
def latency_cdfs(
    runs: Sequence[RunDir], out: Path, slo: dict[str, Any] | None = None
) -> FigureFile | None:
    """Empirical CDFs of TTFT and TPOT (completed requests), one curve per run; dotted lines
    at the SLO in force: ``slo`` (a plan's targets) or else the runs' per-request thresholds
    when they share them."""
    have = [r for r in runs if r.table("requests")]
    if not have:
        return None
    shown = pick(have)
    title, labels = _title(shown)
    fig, ax = _new(1, 2, w=9.0)
    q = np.linspace(0.0, 1.0, 401)
    for run, label in zip(shown, labels, strict=True):
        path = run.table("requests")
        assert path is not None
        df = pl.read_parquet(path, columns=_REQ_COLS)
        lat = request_latencies({c: df[c].to_numpy() for c in _REQ_COLS})
        for a, key in zip(ax[0], ("ttft_s", "tpot_s"), strict=True):
            x = lat[key][~np.isnan(lat[key])]
            if len(x):
                a.plot(np.quantile(x, q), q, label=label, lw=1.3)
    if slo is None:
        slos = [run_config(r).get("slo", {}) for r in shown]
        slo = {k: v for k, v in slos[0].items() if all(s.get(k) == v for s in slos)}
    lines = slo_lines(slo)
    for a, name, key in zip(ax[0], ("TTFT", "TPOT"), ("ttft_s", "tpot_s"), strict=True):
        a.set_xscale("log")
        _plain_log_ticks(a)
        a.set_xlabel(f"{name} (s)")
        a.set_ylabel("fraction of requests")
        a.grid(alpha=0.3, which="both")
        if key in lines:
            value, text = lines[key]
            a.axvline(value, color="k", ls=":", lw=1, label=f"{name} {text}")
        a.axhline(0.99, color="grey", ls="--", lw=0.6, label="p99")
    legend_outside(ax[0][1], ax[0][0])
    caption = (
        "TTFT and TPOT distributions per run; dotted: the SLO, dashed: the p99 line."
        + _shown(len(have), len(shown))
    )
    return _save(fig, out / "latency_cdf.png", title, caption, "TTFT and TPOT distributions")


def _plain_log_ticks(a: Any) -> None:
    """Plain numbers on a log x axis: at 1, 2 and 5 per decade over a short range, at the
    powers of ten over more than two and a half decades (never crowded)."""
    lo, hi = a.get_xlim()
    decades = np.log10(hi / lo) if lo > 0 and hi > lo else 1.0
    a.xaxis.set_major_locator(LogLocator(subs=(1.0,) if decades > 2.5 else (1.0, 2.0, 5.0)))
    a.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.xaxis.set_minor_formatter(NullFormatter())
    a.tick_params(axis="x", labelsize=8)


# ---------------------------------------------------------------------------- sweeps
def _rate_key(keys: Sequence[str], df: pl.DataFrame) -> str | None:
    numeric = [k for k in keys if df.schema[k].is_numeric()]
    for k in numeric:
        if k.rsplit(".", 1)[-1] in ("rate", "rate_scale", "concurrency"):
            return k
    return numeric[0] if numeric else None


def rate_curves(res: Results, out: Path) -> FigureFile | None:
    """Goodput and SLO attainment versus request rate (or the first numeric grid key), one
    line per combination of the other grid values."""
    path = res.file("results.parquet")
    if path is None or res.sweep is None:
        return None
    df = pl.read_parquet(path)
    keys = [k for k in res.sweep.get("grid", {}) if k in df.columns]
    if df.height == 0 or "goodput" not in df.columns:
        return None
    title = _title(res.runs)[0] if res.runs else describe(res.sweep.get("base", {}), skip=keys)
    xkey = _rate_key(keys, df)
    fig, ax = _new(1, 2, w=9.0)
    base = run_config(res.runs[0]) if res.runs else res.sweep.get("base", {})
    lines = slo_lines(base.get("slo", {}))
    within = ", ".join(f"{k.split('_')[0].upper()} ≤ {v:g} s" for k, (v, _) in lines.items())
    within = f" (SLO per request: {within})" if within else ""
    metrics = (
        ("goodput", "goodput (req/s within the SLO)"),
        ("slo_attainment", "SLO attainment (share of requests)"),
    )
    if xkey is None:
        labels = [
            ", ".join(f"{k.rsplit('.', 1)[-1]}={row[k]}" for k in keys)
            for row in df.iter_rows(named=True)
        ]
        for a, (m, name) in zip(ax[0], metrics, strict=True):
            a.bar(range(df.height), df[m].to_list())
            a.set_xticks(range(df.height), labels, rotation=60, ha="right", fontsize=6)
            a.set_ylabel(name)
        caption = f"Goodput and SLO attainment{within} per cell."
    else:
        others = [k for k in keys if k != xkey]
        groups = df.partition_by(others, maintain_order=True) if others else [df]
        shown = pick(groups)
        for g in shown:
            g = g.sort(xkey)
            label = ", ".join(f"{k.rsplit('.', 1)[-1]}={g[k][0]}" for k in others) or "all"
            for a, (m, _) in zip(ax[0], metrics, strict=True):
                a.plot(g[xkey].to_list(), g[m].to_list(), marker="o", ms=3, label=label)
        for a, (_, name) in zip(ax[0], metrics, strict=True):
            a.set_xlabel(axis_label(xkey))
            a.set_ylabel(name)
            a.grid(alpha=0.3)
        ax[0][1].set_ylim(-0.02, 1.02)
        legend_outside(ax[0][1])
        caption = (
            f"Goodput and SLO attainment{within} versus {xkey}, one line per setting of "
            f"{', '.join(others) or 'the sweep'}." + _shown(len(groups), len(shown))
        )
    return _save(fig, out / "goodput_vs_rate.png", title, caption, "Goodput and SLO attainment")


UNITS = {"rate": "req/s", "rate_scale": "× the trace's rate", "concurrency": "clients"}
UNITS.update({"token_budget": "tokens", "max_seqs": "requests", "ttft_s": "s", "tpot_s": "s"})


def axis_label(key: str) -> str:
    """A grid key as an axis label with its unit: ``workload.rate`` → ``rate (req/s)``."""
    leaf = key.rsplit(".", 1)[-1]
    unit = UNITS.get(leaf)
    name = "request rate" if leaf == "rate" else leaf.replace("_", " ")
    return f"{name} ({unit})" if unit else name


# ---------------------------------------------------------------------------- throughput
def roofline(runs: Sequence[RunDir], out: Path) -> FigureFile | None:
    """Achieved token throughput beside the roofline upper bound, per run."""
    have = [
        r
        for r in runs
        if r.metrics.get("roofline_token_throughput") and r.metrics.get("token_throughput")
    ]
    if not have:
        return None
    shown = pick(have, 12)
    title, labels = _title(shown)
    got = [r.metrics["token_throughput"] for r in shown]
    bound = [r.metrics["roofline_token_throughput"] for r in shown]
    x = np.arange(len(shown))
    if max((len(str(lb)) for lb in labels), default=0) > 16:
        # long run labels: horizontal bars, the labels readable on the y axis
        fig, ax = _new(1, 1, w=9.0, h=1.6 + 0.55 * len(shown))
        a = ax[0][0]
        a.barh(x - 0.2, bound, 0.4, label="roofline bound", color="0.75")
        a.barh(x + 0.2, got, 0.4, label="achieved", color="C0")
        for i, (g, rb) in enumerate(zip(got, bound, strict=True)):
            a.text(g, i + 0.2, f" {g / rb:.0%}", ha="left", va="center", fontsize=7)
        a.set_yticks(x, labels, fontsize=7)
        a.invert_yaxis()
        a.set_xlabel("tokens/s (prompt + output)")
        a.grid(alpha=0.3, axis="x")
    else:
        fig, ax = _new(1, 1, w=max(5.0, 1.0 + 0.7 * len(shown)), h=4.0)
        a = ax[0][0]
        a.bar(x - 0.2, bound, 0.4, label="roofline bound", color="0.75")
        a.bar(x + 0.2, got, 0.4, label="achieved", color="C0")
        for i, (g, rb) in enumerate(zip(got, bound, strict=True)):
            a.text(i + 0.2, g, f"{g / rb:.0%}", ha="center", va="bottom", fontsize=7)
        a.set_xticks(x, labels, rotation=30 if len(shown) > 3 else 0, ha="right", fontsize=7)
        a.set_ylabel("tokens/s (prompt + output)")
        a.set_xlabel("run")
        a.grid(alpha=0.3, axis="y")
    legend_outside(a)
    caption = (
        "Achieved token throughput beside the roofline bound (peak FLOPs and bandwidth, "
        "no schedule can beat it); the percentage is achieved / bound. At low load the achieved "
        "throughput is the offered load, not a limit." + _shown(len(have), len(shown))
    )
    return _save(fig, out / "roofline.png", title, caption, "Throughput and the roofline bound")


FigureProgress = Callable[[int, int, str], None]
"""Told ``(done, total, name)`` before each figure is drawn (``tidal report``'s status line)."""


def all_figures(
    res: Results, out: Path, progress: FigureProgress | None = None
) -> list[FigureFile]:
    """Every figure the results allow, in report order; ``progress`` hears of each before it
    is drawn (a big plan or cluster run takes seconds per figure)."""
    todo: list[tuple[str, Callable[[], FigureFile | None]]] = []
    if res.kind == "plan":
        todo += [("plan costs", lambda: plan_costs(res, out))]
        todo += [("planner search", lambda: plan_search(res, out))]
    if res.kind == "sweep":
        todo.append(("goodput vs rate", lambda: rate_curves(res, out)))
    plan_slo = res.plan.get("slo") if res.plan is not None else None
    todo.append(("latency CDFs", lambda: latency_cdfs(res.runs, out, plan_slo)))
    todo.append(("queue timeline", lambda: queue_timeline(res.runs, out)))
    if res.runs:
        # the plan's best deployment comes first; in a sweep, the last (highest-valued) cell
        run = res.runs[0] if res.kind == "plan" else res.runs[-1]
        todo.append(("per-GPU timeline", lambda: gpu_timeline(run, out)))
    todo.append(("EB+ modes", lambda: ebplus_modes(res.runs, out)))
    todo.append(("roofline", lambda: roofline(res.runs, out)))
    figs = []
    for i, (name, draw) in enumerate(todo):
        if progress is not None:
            progress(i, len(todo), name)
        figs.append(draw())
    return [f for f in figs if f is not None]
