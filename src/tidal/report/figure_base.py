"""Shared pieces of the report's figures: the figure record, the title from the configuration
the runs share, evenly spaced curve picking, and the Agg-canvas figure/save helpers."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from tidal.report.collect import RunDir
from tidal.report.describe import describe, differences

MAX_CURVES = 8
MAX_ROWS = 4
_REQ_COLS = ["arrival_ns", "first_scheduled_ns", "first_token_ns", "finish_ns", "output_tokens"]


@dataclass(frozen=True)
class FigureFile:
    """A drawn figure: its PNG, the title drawn on it (the configuration its runs share), the
    caption, a short ``name`` for the report's heading (so the title is shown once), and the
    ``figure`` itself (for checks of what was drawn)."""

    path: Path
    title: str
    caption: str
    name: str = ""
    figure: Any = field(default=None, compare=False, repr=False)


def run_config(run: RunDir) -> dict[str, Any]:
    """The run's config, with the replica count of a planner deployment when there is one."""
    cfg = dict(run.config)
    dep = run.extra.get("deployment")
    if isinstance(dep, dict) and "replicas" in dep:
        cfg["replicas"] = dep["replicas"]
    targets = run.extra.get("slo_targets")
    if targets:  # a plan's deployment: its SLO is the plan's percentile targets
        cfg["slo_targets"] = dict(targets)
        cfg.pop("slo", None)
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


def _save(fig: Figure, path: Path, title: str, caption: str, name: str = "") -> FigureFile:
    fig.suptitle(wrap_title(title, int(fig.get_figwidth() * 13)), fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return FigureFile(path, title, caption, name or path.stem.replace("_", " "), fig)


def wrap_title(title: str, width: int) -> str:
    """Lines of at most ``width`` characters, broken between the `` · ``-separated parts of a
    configuration description (a part longer than a line is wrapped on its own)."""
    lines: list[str] = []
    for part in title.split(" · "):
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " · " + part
        else:
            lines += textwrap.wrap(part, width) or [""]
    return "\n".join(lines)


def legend_outside(a: Any, *more: Any, x: float = 1.01, **kw: Any) -> None:
    """The legend of ``a`` (and of the axes ``more``: their entries once each) right of its
    plotting area (``x`` in axes widths: further right past a twin axis' ticks), never over
    the data; the constrained layout makes room for it."""
    handles, labels = [], []
    for axes in (a, *more):
        for h, label in zip(*axes.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    if handles:
        a.legend(
            handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(x, 1.0),
            borderaxespad=0.0, **kw,
        )  # fmt: skip


def slo_lines(slo: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """The SLO thresholds in force, per latency (``ttft_s``, ``tpot_s``): a plan's targets
    (``ttft_p99_s: 1`` → ``(1.0, "SLO p99 ≤ 1 s")``) or a run's per-request thresholds
    (``ttft_s: 2`` → ``(2.0, "SLO 2 s")``)."""
    out: dict[str, tuple[float, str]] = {}
    for key, value in slo.items():
        m = re.fullmatch(r"(ttft|tpot)_(?:(p\d+)_)?s", key)
        if m is None or not isinstance(value, int | float) or isinstance(value, bool):
            continue
        metric, stat = m.groups()
        text = f"SLO {stat} ≤ {value:g} s" if stat else f"SLO {value:g} s"
        out.setdefault(f"{metric}_s", (float(value), text))
    return out


def _shown(n_all: int, n_shown: int) -> str:
    return f" ({n_shown} of {n_all} runs shown, evenly spaced)" if n_shown < n_all else ""
