"""``tidal sweep``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tidal.cli import vllm_names
from tidal.cli.app import (
    Opt,
    TidalError,
    _fail,
    app,
    console,
    err_console,
    on_interrupt,
)
from tidal.cli.plain import styled


@app.command()
def sweep(
    config: Annotated[
        Path,
        typer.Argument(
            help="YAML simulation config; an optional `grid:` block maps dotted keys to lists."
        ),
    ],
    out: Annotated[Path, Opt(help="Output directory (results.parquet, cells/<id>/).")],
    grid: Annotated[
        list[str] | None,
        Opt(
            help="KEY=V1,V2,... over a dotted config key (or vLLM's name: max_num_seqs, "
            "max_num_batched_tokens, tensor_parallel_size, request_rate, ...); repeat for more "
            "axes (cartesian)."
        ),
    ] = None,
    backend: Annotated[str, Opt(help="process (local pool) | serial | ray.")] = "process",
    workers: Annotated[
        int | None, Opt(help="Parallel workers (default: one per CPU; Ray: local CPUs).")
    ] = None,
    seed_policy: Annotated[
        str,
        Opt(
            help="workload (seed from the base seed and the workload.* values) | per-cell | common."
        ),
    ] = "workload",
) -> None:
    """Run the cartesian grid of a config in parallel; resumable (finished cells are reused)."""
    # lazy: keeps tidal --help fast
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from tidal.core.outpath import check_out_dir
    from tidal.experiments.grid import parse_grid
    from tidal.experiments.sweep import run_sweep, split_sweep_config
    from tidal.sim.config import load_yaml

    try:
        check_out_dir(out, "out", replaced=False)
        base, yaml_grid = split_sweep_config(load_yaml(config))
        axes = [vllm_names.grid_key(k, v) for k, v in parse_grid(grid or [], yaml_grid).items()]
        g = dict(axes)
        if len(g) < len(axes):
            raise TidalError("grid: an axis is given twice (under vLLM's name and Tidal's)")
        def kept() -> str:
            done = len(list((out / "cells").glob("*/summary.json")))
            return (
                f"{done} finished cells kept in {out / 'cells'} (results.parquet has them); "
                "run the same command again to resume (finished cells are reused)"
            )

        with on_interrupt(kept), Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=err_console,
            transient=False,
            disable=not err_console.is_terminal,
        ) as bar:
            task = bar.add_task("sweep", total=None)

            def start(total: int, to_run: int) -> None:
                bar.update(task, total=total, description=f"sweep ({total - to_run} reused)")

            outcome = run_sweep(
                base,
                g,
                out,
                backend=backend,
                workers=workers,
                seed_policy=seed_policy,
                on_start=start,
                on_cell_done=lambda cell, res: bar.advance(task),
            )
    except TidalError as err:
        _fail(err)
        return
    n = len(outcome.cells)
    console.print(
        f"{n} cells: {len(outcome.ran)} run, {len(outcome.reused)} reused, "
        f"{len(outcome.failed)} failed in {outcome.wall_s:.1f} s; results in {outcome.results_path}"
    )
    for cid, msg in outcome.failed.items():
        err_console.print(styled((f"cell {cid} failed:", "bold red"), " ", msg))
    if outcome.failed:
        raise typer.Exit(1)
