"""PNG figures of results. Each function draws one figure from files, or returns None when its
input is absent (no sweep table, no cluster timeline, no EB+ mode series), so the report picks
up new result files without changes here.

Figures are standalone ``matplotlib.figure.Figure`` objects rendered by the Agg canvas (no
pyplot, no global state). Every figure is titled with the configuration the runs share
(:func:`tidal.report.describe.describe`); curves are labelled with what differs.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from tidal.core.metrics import request_latencies
from tidal.report.collect import Results, RunDir
from tidal.report.describe import describe, differences

MAX_CURVES = 8
MAX_ROWS = 4
_REQ_COLS = ["arrival_ns", "first_scheduled_ns", "first_token_ns", "finish_ns", "output_tokens"]


@dataclass(frozen=True)
class FigureFile:
    path: Path
    title: str
    caption: str


def run_config(run: RunDir) -> dict[str, Any]:
    """The run's config, with the replica count of a planner deployment when there is one."""
    cfg = dict(run.config)
    dep = run.extra.get("deployment")
    if isinstance(dep, dict) and "replicas" in dep:
        cfg["replicas"] = dep["replicas"]
    return cfg


def pick(items: Sequence[Any], limit: int = MAX_CURVES) -> list[Any]:
    """At most ``limit`` items, evenly spaced (first and last kept)."""
    if len(items) <= limit:
        return list(items)
    idx = np.unique(np.linspace(0, len(items) - 1, limit).round().astype(int))
    return [items[i] for i in idx]


def _title(runs: Sequence[RunDir]) -> tuple[str, list[str]]:
    configs = [run_config(r) for r in runs]
    varying, labels = differences(configs)
    if not varying:
        labels = [r.name for r in runs]
    return describe(configs[0], skip=varying), labels


def _new(nrows: int = 1, ncols: int = 1, w: float = 8.0, h: float = 4.0) -> tuple[Figure, Any]:
    fig = Figure(figsize=(w, h), dpi=100, layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def _save(fig: Figure, path: Path, title: str, caption: str) -> FigureFile:
    fig.suptitle(textwrap.fill(title, int(fig.get_figwidth() * 13)), fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return FigureFile(path, title, caption)


def _shown(n_all: int, n_shown: int) -> str:
    return f" ({n_shown} of {n_all} runs shown, evenly spaced)" if n_shown < n_all else ""


# ---------------------------------------------------------------------------- per request
def latency_cdfs(runs: Sequence[RunDir], out: Path) -> FigureFile | None:
    """Empirical CDFs of TTFT and TPOT (completed requests), one curve per run; dotted lines
    at the SLO thresholds."""
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
    slo = run_config(shown[0]).get("slo", {})
    for a, name, key in zip(ax[0], ("TTFT", "TPOT"), ("ttft_s", "tpot_s"), strict=True):
        a.set_xscale("log")
        a.set_xlabel(f"{name} (s)")
        a.set_ylabel("fraction of requests")
        a.grid(alpha=0.3, which="both")
        if key in slo and all(run_config(r).get("slo", {}).get(key) == slo[key] for r in shown):
            a.axvline(slo[key], color="k", ls=":", lw=1, label=f"SLO {slo[key]:g} s")
        a.axhline(0.99, color="grey", ls="--", lw=0.6)
    ax[0][1].legend(fontsize=7, loc="lower right")
    caption = "TTFT and TPOT distributions per run; dashed: the p99 line." + _shown(
        len(have), len(shown)
    )
    return _save(fig, out / "latency_cdf.png", title, caption)


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
    metrics = (("goodput", "goodput (req/s within SLO)"), ("slo_attainment", "SLO attainment"))
    if xkey is None:
        labels = [
            ", ".join(f"{k.rsplit('.', 1)[-1]}={row[k]}" for k in keys)
            for row in df.iter_rows(named=True)
        ]
        for a, (m, name) in zip(ax[0], metrics, strict=True):
            a.bar(range(df.height), df[m].to_list())
            a.set_xticks(range(df.height), labels, rotation=60, ha="right", fontsize=6)
            a.set_ylabel(name)
        caption = "Goodput and SLO attainment per cell."
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
            a.set_xlabel(xkey)
            a.set_ylabel(name)
            a.grid(alpha=0.3)
        ax[0][1].set_ylim(-0.02, 1.02)
        ax[0][1].legend(fontsize=7)
        caption = (
            f"Goodput and SLO attainment versus {xkey}, one line per setting of "
            f"{', '.join(others) or 'the sweep'}." + _shown(len(groups), len(shown))
        )
    return _save(fig, out / "goodput_vs_rate.png", title, caption)


# ---------------------------------------------------------------------------- timelines
def _seconds(col: str, values: np.ndarray) -> np.ndarray:
    return values / 1e9 if col.endswith("_ns") else values.astype(np.float64)


def _time_col(df: pl.DataFrame) -> str | None:
    for c in ("time_ns", "t_ns", "time_s", "t_s"):
        if c in df.columns:
            return c
    return next((c for c in df.columns if "time" in c and df.schema[c].is_numeric()), None)


def _ffill_sum(df: pl.DataFrame, col: str, grid_s: np.ndarray) -> np.ndarray:
    """Sum over instances of each instance's last sample at or before each grid time."""
    total = np.zeros(len(grid_s))
    for part in df.partition_by("instance", maintain_order=True):
        t = part["time_ns"].to_numpy() / 1e9
        v = part[col].to_numpy()
        i = np.searchsorted(t, grid_s, side="right") - 1
        total += np.where(i >= 0, v[np.maximum(i, 0)], 0)
    return total


def queue_timeline(runs: Sequence[RunDir], out: Path) -> FigureFile | None:
    """Waiting and running requests over time (summed over instances), one panel per run."""
    have = [r for r in runs if r.table("timeline")]
    if not have:
        return None
    shown = pick(have, MAX_ROWS)
    title, labels = _title(shown)
    fig, ax = _new(len(shown), 1, w=8.0, h=1.2 + 1.6 * len(shown))
    for a, run, label in zip(ax[:, 0], shown, labels, strict=True):
        path = run.table("timeline")
        assert path is not None
        tl = pl.read_parquet(path).sort("time_ns")
        if tl.height == 0:
            continue
        if "instance" not in tl.columns:
            tl = tl.with_columns(pl.lit(0).alias("instance"))
        end = float(tl["time_ns"].to_numpy().max()) / 1e9
        grid = np.linspace(0.0, end, 600) if end > 0 else np.zeros(1)
        a.step(grid, _ffill_sum(tl, "waiting", grid), where="post", label="waiting", lw=1.1)
        a.step(grid, _ffill_sum(tl, "running", grid), where="post", label="running", lw=1.1)
        a.set_ylabel("requests")
        a.set_title(label, fontsize=8)
        a.grid(alpha=0.3)
    ax[-1][0].set_xlabel("time (s)")
    ax[0][0].legend(fontsize=7, loc="upper left")
    caption = (
        "Queue length over time: requests waiting for admission and running, sampled at step "
        "starts about once per simulated second." + _shown(len(have), len(shown))
    )
    return _save(fig, out / "queue.png", title, caption)


def _memory_log(run: RunDir) -> pl.DataFrame | None:
    """A cluster's GPU memory log, if the run has one: a table with ``time_ns``, ``gpu``,
    ``model`` and ``pages`` columns, each row setting the pages a model (of a ``kind``:
    weights, KV, prewarmed copy) holds on a GPU from that time on (``gpu_memory.parquet``
    of multi-model cluster runs)."""
    for name in run.tables():
        path = run.table(name)
        assert path is not None
        cols = set(pl.read_parquet_schema(path))
        if {"time_ns", "gpu", "model", "pages"} <= cols:
            return pl.read_parquet(path)
    return None


def cluster_memory_timeline(run: RunDir, log: pl.DataFrame, out: Path) -> FigureFile | None:
    """One row per GPU: the memory each model holds over time (stacked steps, one colour per
    model, all kinds summed), from a cluster memory log (see :func:`_memory_log`)."""
    if log.height == 0:
        return None
    log = log.sort("time_ns", maintain_order=True)
    if "kind" not in log.columns:
        log = log.with_columns(pl.lit(0).alias("kind"))
    gpus = sorted(log["gpu"].unique().to_list())[:16]
    models = sorted(log["model"].unique().to_list())
    names = run.summary.get("models")
    page_mib = run.config.get("cluster", {}) or {}
    page_mib = page_mib.get("page_mib") if isinstance(page_mib, dict) else None
    scale, unit = (page_mib / 1024, "GiB") if page_mib else (1.0, "pages")
    end = float(log["time_ns"].to_numpy().max()) / 1e9
    fig, ax = _new(len(gpus), 1, w=8.0, h=1.0 + 0.55 * len(gpus))
    for a, g in zip(ax[:, 0], gpus, strict=True):
        part = log.filter(pl.col("gpu") == g)
        t = np.concatenate([[0.0], part["time_ns"].to_numpy() / 1e9, [end]])
        state: dict[tuple[Any, Any], float] = {}
        series = {m: [0.0] for m in models}
        for m, k, pages in part.select("model", "kind", "pages").iter_rows():
            state[(m, k)] = float(pages)
            for mm in models:
                series[mm].append(sum(v for (x, _), v in state.items() if x == mm))
        base = np.zeros(len(t))
        for i, m in enumerate(models):
            y = np.append(series[m], series[m][-1]) * scale
            label = (
                names[m]
                if isinstance(names, list) and isinstance(m, int) and m < len(names)
                else str(m)
            )
            a.fill_between(t, base, base + y, step="post", color=f"C{i % 10}", lw=0, label=label)
            base = base + y
        a.set_ylabel(f"GPU {g}", rotation=0, ha="right", va="center", fontsize=7)
        a.tick_params(labelsize=6)
    ax[0][0].legend(fontsize=6, ncol=min(len(models), 6), loc="lower left", bbox_to_anchor=(0, 1.0))
    ax[-1][0].set_xlabel("time (s)")
    title = describe(run_config(run))
    caption = (
        f"Per-GPU timeline: memory ({unit}) each model holds on each GPU — weights, prewarmed "
        f"copies and KV cache summed — from the cluster's memory log ({run.name})."
    )
    return _save(fig, out / "gpu_timeline.png", title, caption)


def _gpu_table(run: RunDir) -> tuple[pl.DataFrame, str] | None:
    """The instance timeline, one row per instance."""
    path = run.table("timeline")
    if path is None:
        return None
    df = pl.read_parquet(path)
    return (df, "instance") if "instance" in df.columns else None


def gpu_timeline(run: RunDir, out: Path) -> FigureFile | None:
    """The per-GPU timeline: a cluster's memory by model when the run has a memory log, else
    heatmaps per instance over time of KV-cache occupancy and running requests."""
    log = _memory_log(run)
    if log is not None:
        return cluster_memory_timeline(run, log, out)
    found = _gpu_table(run)
    if found is None:
        return None
    df, row_key = found
    tcol = _time_col(df)
    if tcol is None or df.height == 0:
        return None
    t = _seconds(tcol, df[tcol].to_numpy())
    rows = sorted(df[row_key].unique().to_list(), key=str)
    row_of = {v: i for i, v in enumerate(rows)}
    r = np.array([row_of[v] for v in df[row_key].to_list()])
    nbins = 300
    edges = np.linspace(0.0, max(float(t.max()), 1e-9), nbins + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, nbins - 1)
    panels: list[tuple[str, np.ndarray]] = []
    cap = None
    if "kv_capacity_blocks" in df.columns:
        cap = df["kv_capacity_blocks"].to_numpy().astype(np.float64)
    else:
        tokens = run.metrics.get("kv_capacity_tokens")
        block = run.config.get("memory", {}).get("block_size")
        if tokens and block:
            cap = np.full(df.height, tokens / block)
    if "kv_used_blocks" in df.columns and cap is not None:
        panels.append(("KV occupancy", df["kv_used_blocks"].to_numpy() / np.maximum(cap, 1)))
    if "running" in df.columns:
        panels.append(("running requests", df["running"].to_numpy().astype(np.float64)))
    if not panels:
        return None
    fig, ax = _new(len(panels), 1, w=8.0, h=1.0 + (0.35 * len(rows) + 0.8) * len(panels))
    for a, (name, v) in zip(ax[:, 0], panels, strict=True):
        grid = np.full((len(rows), nbins), np.nan)
        # the mean of the samples in each (row, bin); empty bins stay blank (idle, no sample)
        s = np.zeros((len(rows), nbins))
        n = np.zeros((len(rows), nbins))
        np.add.at(s, (r, b), v)
        np.add.at(n, (r, b), 1)
        np.divide(s, n, out=grid, where=n > 0)
        im = a.imshow(
            grid,
            aspect="auto",
            interpolation="nearest",
            extent=(0.0, float(edges[-1]), len(rows) - 0.5, -0.5),
            cmap="viridis",
            vmin=0.0,
            vmax=1.0 if name == "KV occupancy" else None,
        )
        a.set_yticks(range(len(rows)), [f"{row_key} {x}" for x in rows], fontsize=7)
        a.set_title(name, fontsize=8)
        fig.colorbar(im, ax=a, pad=0.01)
    ax[-1][0].set_xlabel("time (s)")
    title = describe(run_config(run))
    caption = f"Per-{row_key} timeline: " + ", ".join(p[0] for p in panels) + f" ({run.name})."
    return _save(fig, out / "gpu_timeline.png", title, caption)


def ebplus_modes(runs: Sequence[RunDir], out: Path) -> FigureFile | None:
    """The EB+ mode series (``ebplus.parquet``: a time column and a ``mode`` column), one
    panel per run that has it; numeric side columns on a second axis."""
    have = [r for r in runs if r.table("ebplus")]
    if not have:
        return None
    shown = pick(have, MAX_ROWS)
    title, labels = _title(shown)
    fig, ax = _new(len(shown), 1, w=8.0, h=1.2 + 1.6 * len(shown))
    for a, run, label in zip(ax[:, 0], shown, labels, strict=True):
        path = run.table("ebplus")
        assert path is not None
        df = pl.read_parquet(path)
        tcol = _time_col(df)
        if tcol is None or df.height == 0:
            continue
        df = df.sort(tcol)
        t = _seconds(tcol, df[tcol].to_numpy())
        mode_col = "mode" if "mode" in df.columns else None
        if mode_col is None:
            mode_col = next((c for c in df.columns if not df.schema[c].is_numeric()), None)
        if mode_col is not None:
            modes = [str(m) for m in df[mode_col].to_list()]
            levels = sorted(set(modes))
            a.step(t, [levels.index(m) for m in modes], where="post", lw=1.2, color="C0")
            a.set_yticks(range(len(levels)), levels)
        numeric = [
            c
            for c in df.columns
            if c not in (tcol, mode_col) and df.schema[c].is_numeric() and not c.endswith("_ns")
        ]
        # the selector's load signals when present (EB+ writes demand and its EMA, n_obs)
        side = [c for c in ("demand", "n_obs") if c in numeric] or numeric[:2]
        if side:
            b = a.twinx()
            for i, c in enumerate(side):
                b.plot(t, df[c].to_numpy(), lw=0.8, color=f"C{i + 1}", label=c)
            b.legend(fontsize=6, loc="upper right")
        a.set_title(label, fontsize=8)
        a.grid(alpha=0.3)
    ax[-1][0].set_xlabel("time (s)")
    caption = "EB+ batching mode over time (from ebplus.parquet)." + _shown(len(have), len(shown))
    return _save(fig, out / "ebplus_modes.png", title, caption)


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
    fig, ax = _new(1, 1, w=max(5.0, 1.0 + 0.7 * len(shown)), h=4.0)
    a = ax[0][0]
    x = np.arange(len(shown))
    got = [r.metrics["token_throughput"] for r in shown]
    bound = [r.metrics["roofline_token_throughput"] for r in shown]
    a.bar(x - 0.2, bound, 0.4, label="roofline bound", color="0.75")
    a.bar(x + 0.2, got, 0.4, label="achieved", color="C0")
    for i, (g, rb) in enumerate(zip(got, bound, strict=True)):
        a.text(i + 0.2, g, f"{g / rb:.0%}", ha="center", va="bottom", fontsize=7)
    a.set_xticks(x, labels, rotation=30 if len(shown) > 3 else 0, ha="right", fontsize=7)
    a.set_ylabel("tokens/s (prompt + output)")
    a.legend(fontsize=7)
    a.grid(alpha=0.3, axis="y")
    caption = (
        "Achieved token throughput beside the roofline bound (peak FLOPs and bandwidth, "
        "no schedule can beat it); the percentage is achieved / bound. At low load the achieved "
        "throughput is the offered load, not a limit." + _shown(len(have), len(shown))
    )
    return _save(fig, out / "roofline.png", title, caption)


# ---------------------------------------------------------------------------- plans
def plan_search(res: Results, out: Path) -> FigureFile | None:
    """Every simulation the planner ran: one row per configuration it simulated, a mark per
    GPU count tried — green when the deployment met the SLO, red when it missed (hollow: the
    run was stopped as soon as the miss was certain) — and a star on the best."""
    path = res.file("evaluations.parquet")
    if path is None or res.plan is None:
        return None
    ev = pl.read_parquet(path)
    if ev.height == 0:
        return None
    options = list(dict.fromkeys(ev["candidate"].to_list()))
    row = {o: i for i, o in enumerate(options)}
    fig, ax = _new(1, 1, w=8.0, h=1.2 + 0.22 * len(options))
    a = ax[0][0]
    y = np.array([row[c] for c in ev["candidate"].to_list()])
    x = ev["num_gpus"].to_numpy()
    ok = ev["passed"].to_numpy()
    early = ev["stopped_early"].to_numpy()
    a.scatter(x[ok], y[ok], marker="o", color="C2", s=22, label="meets the SLO")
    a.scatter(x[~ok & ~early], y[~ok & ~early], marker="x", color="C3", s=22, label="misses")
    a.scatter(
        x[early],
        y[early],
        marker="o",
        facecolors="none",
        edgecolors="C3",
        s=22,
        label="misses (stopped early)",
    )
    best = res.plan.get("best") or {}
    if best.get("option") in row:
        a.scatter(
            [best["num_gpus"]],
            [row[best["option"]]],
            marker="*",
            s=160,
            color="gold",
            edgecolors="k",
            zorder=3,
            label="best",
        )
    a.set_yticks(range(len(options)), options, fontsize=6)
    a.invert_yaxis()
    a.xaxis.set_major_locator(MaxNLocator(integer=True))
    a.set_xlabel("GPUs")
    a.grid(alpha=0.3)
    a.legend(fontsize=7, loc="lower right")
    cfg = dict(best.get("config", {}), replicas=best.get("replicas"))
    title = "Planner search — best: " + (describe(cfg) if best else "no feasible deployment")
    caption = (
        f"The {res.plan.get('simulations_run')} simulations the planner ran, of "
        f"{res.plan.get('exhaustive_simulations')} for the exhaustive grid (every configuration "
        "at every replica count); configurations pruned without a simulation are not shown."
    )
    return _save(fig, out / "plan_search.png", title, caption)


def plan_costs(res: Results, out: Path) -> FigureFile | None:
    """The cheapest feasible deployments found, by cost."""
    if res.plan is None or not res.plan.get("candidates"):
        return None
    cands = res.plan["candidates"][:12]
    objective = res.plan.get("objective", "gpu_hours")
    fig, ax = _new(1, 1, w=8.0, h=1.0 + 0.35 * len(cands))
    a = ax[0][0]
    y = np.arange(len(cands))
    a.barh(y, [c[objective] for c in cands], color=["C2"] + ["C0"] * (len(cands) - 1))
    a.set_yticks(y, [c["label"] for c in cands], fontsize=7)
    a.invert_yaxis()
    a.set_xlabel(objective.replace("_", " "))
    a.grid(alpha=0.3, axis="x")
    best = res.plan.get("best") or {}
    cfg = dict(best.get("config", {}), replicas=best.get("replicas"))
    title = "Cheapest deployments meeting the SLO — best: " + describe(cfg)
    caption = f"Feasible deployments by {objective} (green: the best)."
    return _save(fig, out / "plan_costs.png", title, caption)


def all_figures(res: Results, out: Path) -> list[FigureFile]:
    """Every figure the results allow, in report order."""
    figs: list[FigureFile | None] = []
    if res.kind == "plan":
        figs += [plan_costs(res, out), plan_search(res, out)]
    if res.kind == "sweep":
        figs.append(rate_curves(res, out))
    figs.append(latency_cdfs(res.runs, out))
    figs.append(queue_timeline(res.runs, out))
    if res.runs:
        # the plan's best deployment comes first; in a sweep, the last (highest-valued) cell
        figs.append(gpu_timeline(res.runs[0] if res.kind == "plan" else res.runs[-1], out))
    figs.append(ebplus_modes(res.runs, out))
    figs.append(roofline(res.runs, out))
    return [f for f in figs if f is not None]
