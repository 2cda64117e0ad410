"""Figures over simulated time: the request queue, cluster GPU memory and per-GPU state, and the
EB+ batching mode. Each returns None when its timeline is absent from the runs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tidal.report.collect import RunDir
from tidal.report.describe import describe
from tidal.report.figure_base import (
    MAX_ROWS,
    FigureFile,
    _new,
    _save,
    _shown,
    _title,
    legend_outside,
    pick,
    run_config,
)


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
    legend_outside(ax[0][0])
    caption = (
        "Queue length over time: requests waiting for admission and running, sampled at step "
        "starts about once per simulated second." + _shown(len(have), len(shown))
    )
    return _save(fig, out / "queue.png", title, caption, "Queue length over time")


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
    legend_outside(ax[0][0], title=f"memory ({unit})", title_fontsize=7)
    ax[-1][0].set_xlabel("time (s)")
    title = describe(run_config(run))
    caption = (
        f"Per-GPU timeline: memory ({unit}) each model holds on each GPU — weights, prewarmed "
        f"copies and KV cache summed — from the cluster's memory log ({run.name})."
    )
    return _save(fig, out / "gpu_timeline.png", title, caption, "GPU memory by model")


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
    units = {"KV occupancy": "share of KV blocks", "running requests": "requests"}
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
        fig.colorbar(im, ax=a, pad=0.01).set_label(units[name], fontsize=7)
    ax[-1][0].set_xlabel("time (s)")
    title = describe(run_config(run))
    caption = f"Per-{row_key} timeline: " + ", ".join(p[0] for p in panels) + f" ({run.name})."
    return _save(fig, out / "gpu_timeline.png", title, caption, f"Per-{row_key} timeline")


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
            a.set_ylabel("batching mode")
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
            b.set_ylabel(" / ".join(side), fontsize=7)
            legend_outside(b, x=1.12)
        a.set_title(label, fontsize=8)
        a.grid(alpha=0.3)
    ax[-1][0].set_xlabel("time (s)")
    caption = "EB+ batching mode over time (from ebplus.parquet)." + _shown(len(have), len(shown))
    return _save(fig, out / "ebplus_modes.png", title, caption, "EB+ batching mode over time")
