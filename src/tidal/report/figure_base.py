"""Shared pieces of the report's figures: the figure record, the title from the configuration
the runs share, evenly spaced curve picking, and the Agg-canvas figure/save helpers."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
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
