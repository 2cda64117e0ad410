"""Find what a results directory holds: one run, a sweep, a plan, or several runs side by side.

* a run: ``DIR/summary.json`` (see :mod:`tidal.experiments.results`);
* a sweep: ``DIR/sweep.json`` + ``DIR/results.parquet``, runs under ``DIR/cells/*``;
* a plan: ``DIR/plan.json`` (+ ``DIR/evaluations.parquet``), runs under ``DIR/runs/*``;
* otherwise every sub-directory holding a ``summary.json`` (``tidal demo`` output).

Only files are read — this module does not import the code that wrote them — so a figure whose
input file is absent (no cluster timeline, no EB+ mode series) is simply skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidal.core.errors import ConfigError


@dataclass
class RunDir:
    name: str
    path: Path
    summary: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    """JSON side files of the run (``deployment.json`` …), by stem."""

    @property
    def config(self) -> dict[str, Any]:
        return self.summary.get("config", {})

    @property
    def metrics(self) -> dict[str, Any]:
        return self.summary.get("metrics", {})

    def table(self, name: str) -> Path | None:
        p = self.path / f"{name}.parquet"
        return p if p.exists() else None

    def tables(self) -> list[str]:
        return sorted(p.stem for p in self.path.glob("*.parquet"))


@dataclass
class Results:
    kind: str
    """``run``, ``sweep``, ``plan`` or ``runs``."""
    path: Path
    runs: list[RunDir]
    sweep: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None

    def file(self, name: str) -> Path | None:
        p = self.path / name
        return p if p.exists() else None


def load_run(path: Path, name: str | None = None) -> RunDir:
    summary = json.loads((path / "summary.json").read_text())
    extra = {}
    for p in sorted(path.glob("*.json")):
        if p.stem not in ("summary", "run", "cell"):
            try:
                extra[p.stem] = json.loads(p.read_text())
            except ValueError:
                continue
    cell = path / "cell.json"
    if name is None and cell.exists():
        name = json.loads(cell.read_text()).get("cell_id")
    return RunDir(name or path.name, path, summary, extra)


def _runs_under(path: Path) -> list[RunDir]:
    if not path.is_dir():
        return []
    return [load_run(d) for d in sorted(path.iterdir()) if (d / "summary.json").exists()]


def collect(path: str | Path) -> Results:
    root = Path(path)
    if not root.is_dir():
        raise ConfigError("results", f"{root} is not a directory", "give a run, sweep or plan dir")
    if (root / "plan.json").exists():
        plan = json.loads((root / "plan.json").read_text())
        runs = _runs_under(root / "runs")
        for run in runs:  # the SLO the plan was asked for, not the thresholds derived from it
            run.extra.setdefault("slo_targets", plan.get("slo") or {})
        return Results("plan", root, runs, plan=plan)
    if (root / "sweep.json").exists():
        sweep = json.loads((root / "sweep.json").read_text())
        order = {c["cell_id"]: i for i, c in enumerate(sweep.get("cells", []))}
        runs = [r for r in _runs_under(root / "cells") if r.path.name in order]
        runs.sort(key=lambda r: order[r.path.name])
        return Results("sweep", root, runs, sweep=sweep)
    if (root / "summary.json").exists():
        return Results("run", root, [load_run(root, root.name)])
    runs = _runs_under(root)
    if not runs:
        raise ConfigError(
            "results",
            f"{root} holds no summary.json, sweep.json or plan.json",
            "give the --out directory of tidal simulate, sweep, plan or demo",
        )
    return Results("runs", root, runs)
