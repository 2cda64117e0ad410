"""Parameter sweeps: the cartesian grid of a base config, run in parallel, resumable.

Layout of a sweep directory::

    DIR/sweep.json             base config, grid, seed policy and the cells (id, values, seed)
    DIR/cells/<cell-id>/       one run directory per cell (summary.json, requests.parquet,
                               timeline.parquet, run.json, cell.json) — see experiments/results.py
    DIR/results.parquet        one row per cell: cell_id, one column per grid key, seed, and
                               every scalar metric of the cell's summary.json
    DIR/sweep_run.json         wall-clock time, status (complete or interrupted), counts of
                               cells run, reused, failed and not run, each failure's error

A cell directory is written under a temporary name and renamed into place when complete, so it
is either whole or absent. A cell counts as finished when its ``summary.json`` holds exactly the
config and seed the grid now asks for; re-running a sweep skips finished cells (resume after a
kill, or grow a grid by adding values), and recomputes cells whose config changed.
``results.parquet`` is built from the ``summary.json`` files, so it is byte-identical whichever
executor ran the cells and whether they were run now or before.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tidal.core.errors import ConfigError, TidalError
from tidal.core.io import write_json, write_parquet
from tidal.core.signals import sigterm_as_exit
from tidal.experiments.executors import run_cells
from tidal.experiments.grid import Grid, apply_cell, canonical, cell_id, cell_seed, cells
from tidal.experiments.results import _clean, _config_values, write_run
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

CELLS_DIR = "cells"
RESULTS_FILE = "results.parquet"
MANIFEST_FILE = "sweep.json"


@dataclass(frozen=True)
class Cell:
    cell_id: str
    values: dict[str, Any]
    seed: int
    config: dict[str, Any]
    """The validated config (``SimulationConfig.model_dump(mode="json")``) with the cell's seed."""


@dataclass
class SweepOutcome:
    out_dir: Path
    cells: list[Cell]
    ran: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def results_path(self) -> Path:
        return self.out_dir / RESULTS_FILE


def plan_cells(base: Mapping[str, Any], grid: Grid, seed_policy: str = "workload") -> list[Cell]:
    """Validate every cell's config up front (an error names the cell and the field)."""
    base_seed = int(base.get("seed", 0) or 0)
    out: list[Cell] = []
    for values in cells(grid):
        data = apply_cell(base, values)
        seed = cell_seed(base_seed, values, seed_policy)
        data["seed"] = seed
        cid = cell_id(values)
        try:
            cfg = load_config(data)
        except ConfigError as err:
            raise ConfigError(
                f"grid cell {cid}", str(err).removeprefix("config:").strip()
            ) from None
        out.append(Cell(cid, dict(values), seed, cfg.model_dump(mode="json")))
    return out


def is_finished(cell_dir: Path, cell: Cell) -> bool:
    try:
        summary = json.loads((cell_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    config = _config_values(cell.config)
    return summary.get("config") == config and summary.get("seed") == cell.seed


@dataclass
class CellOutput:
    """What a worker sends back: everything ``write_run`` needs, or the error it met."""

    metrics: dict[str, Any] | None = None
    columns: Mapping[str, Any] | None = None
    run_info: dict[str, Any] | None = None
    tables: dict[str, Any] | None = None
    json_extras: dict[str, Any] | None = None
    error: str | None = None


def describe_error(err: BaseException) -> str:
    """``Type: message``; for an unexpected error (a bug, not bad input) also where it arose."""
    text = f"{type(err).__name__}: {err}"
    if isinstance(err, TidalError):
        return text
    frames = traceback.extract_tb(err.__traceback__)
    if frames:
        last = frames[-1]
        text += f" (at {Path(last.filename).name}:{last.lineno} in {last.name})"
    return text


def simulate_cell(config: dict[str, Any]) -> CellOutput:
    """Run one cell (in a worker process). Errors a user can act on come back as text."""
    try:
        res = run_simulation(load_config(config))
    except Exception as err:  # one cell's failure, whatever it is, must not end the sweep
        return CellOutput(error=describe_error(err))
    return CellOutput(
        res.metrics, res.columns, res.run_info, res.extras.get("tables"), res.extras.get("json")
    )


def write_cell(cells_dir: Path, cell: Cell, out: CellOutput) -> Path:
    """Write the cell's run directory under a temporary name, then rename it into place."""
    final = cells_dir / cell.cell_id
    cells_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{cell.cell_id}.", dir=cells_dir))
    try:
        write_run(
            tmp,
            cell.config,
            cell.seed,
            out.metrics or {},
            out.columns or {},
            out.run_info or {},
            extra_tables=out.tables,
            extra_json=out.json_extras,
            atomic=False,
        )
        write_json(tmp / "cell.json", _clean({"cell_id": cell.cell_id, "values": cell.values}))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _clear_partial(cells_dir: Path) -> None:
    """Remove temporary cell directories left by a killed sweep."""
    if cells_dir.is_dir():
        for p in cells_dir.glob(".tmp-*"):
            shutil.rmtree(p, ignore_errors=True)


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, bool | int | float | str)


def results_rows(out_dir: Path, cell_list: list[Cell]) -> list[dict[str, Any]]:
    """One row per finished cell, in grid order, read back from the cells' summary.json."""
    rows = []
    for cell in cell_list:
        path = out_dir / CELLS_DIR / cell.cell_id / "summary.json"
        if not path.exists():
            continue
        summary = json.loads(path.read_text())
        row: dict[str, Any] = {"cell_id": cell.cell_id}
        for key, value in cell.values.items():
            row[key] = value if _scalar(value) else canonical(value)
        row["seed"] = cell.seed
        for key, value in summary["metrics"].items():
            if _scalar(value) and key not in row:
                row[key] = value
        rows.append(row)
    return rows


def _columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Rows → columns with a consistent type per column (ints widen to floats when mixed)."""
    keys: list[str] = []
    for r in rows:
        keys.extend(k for k in r if k not in keys)
    cols: dict[str, list[Any]] = {}
    for k in keys:
        col = [r.get(k) for r in rows]
        present = [v for v in col if v is not None]
        if any(isinstance(v, str) for v in present):
            col = [None if v is None else str(v) for v in col]
        elif any(isinstance(v, float) for v in present):
            col = [None if v is None else float(v) for v in col]
        cols[k] = col
    return cols


def write_results(out_dir: Path, cell_list: list[Cell]) -> Path:
    rows = results_rows(out_dir, cell_list)
    path = out_dir / RESULTS_FILE
    if rows:
        write_parquet(path, _columns(rows))
    else:
        write_parquet(path, pl.DataFrame({"cell_id": pl.Series([], dtype=pl.String)}).to_dict())
    return path


def run_sweep(
    base: Mapping[str, Any],
    grid: Grid,
    out_dir: str | Path,
    backend: str = "process",
    workers: int | None = None,
    seed_policy: str = "workload",
    on_cell_done: Callable[[Cell, CellOutput | None], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
) -> SweepOutcome:
    """Run every unfinished cell of ``grid`` over ``base`` and gather ``results.parquet``.

    ``on_start(total, to_run)`` is called once before the first cell; ``on_cell_done(cell,
    output)`` after each cell is written (``output`` is None for a reused cell). If the sweep is
    interrupted, the cells finished so far stay on disk and are reused by the next call.
    """
    t0 = time.perf_counter()
    out = Path(out_dir)
    cell_list = plan_cells(base, grid, seed_policy)
    ids = [c.cell_id for c in cell_list]
    if len(set(ids)) != len(ids):  # pragma: no cover - a SHA-256 prefix collision
        raise ConfigError("grid", "two cells share an id")
    cells_dir = out / CELLS_DIR
    _clear_partial(cells_dir)
    write_json(
        out / MANIFEST_FILE,
        _clean(
            {
                "base": dict(base),
                "grid": grid,
                "seed_policy": seed_policy,
                "cells": [
                    {"cell_id": c.cell_id, "values": c.values, "seed": c.seed} for c in cell_list
                ],
            }
        ),
    )
    outcome = SweepOutcome(out, cell_list)
    todo: list[Cell] = []
    for cell in cell_list:
        if is_finished(cells_dir / cell.cell_id, cell):
            outcome.reused.append(cell.cell_id)
        else:
            todo.append(cell)
    if on_start is not None:
        on_start(len(cell_list), len(todo))
    if on_cell_done is not None:
        for cell in cell_list:
            if cell.cell_id in outcome.reused:
                on_cell_done(cell, None)
    status = "complete"
    try:
        with sigterm_as_exit():
            for i, result in run_cells(simulate_cell, [c.config for c in todo], backend, workers):
                cell = todo[i]
                if result.error is not None:
                    outcome.failed[cell.cell_id] = result.error
                else:
                    write_cell(cells_dir, cell, result)
                    outcome.ran.append(cell.cell_id)
                if on_cell_done is not None:
                    on_cell_done(cell, result)
    except BaseException as err:
        status = f"interrupted ({describe_error(err)})"
        raise
    finally:
        write_results(out, cell_list)
        outcome.wall_s = time.perf_counter() - t0
        write_json(out / "sweep_run.json", _run_record(outcome, status, backend, workers))
    return outcome


def _run_record(
    outcome: SweepOutcome, status: str, backend: str, workers: int | None
) -> dict[str, Any]:
    """``sweep_run.json``: counts that add up to ``cells`` (``not_run``: left by an interrupt)."""
    done = len(outcome.ran) + len(outcome.reused) + len(outcome.failed)
    return {
        "wall_s": outcome.wall_s,
        "status": status,
        "backend": backend,
        "workers": workers,
        "cells": len(outcome.cells),
        "ran": len(outcome.ran),
        "reused": len(outcome.reused),
        "num_failed": len(outcome.failed),
        "not_run": len(outcome.cells) - done,
        "failed": outcome.failed,
    }


def split_sweep_config(data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A sweep YAML is a simulation config plus an optional ``grid:`` mapping."""
    data = dict(data)
    grid = data.pop("grid", None) or {}
    if not isinstance(grid, Mapping):
        raise ConfigError("grid", "must map dotted keys to lists of values")
    return data, dict(grid)
