"""``tidal plan --pareto``: the deployment modes' points, the front and its figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

from tidal.cli.app import console, err_console, on_interrupt


def run_pareto(spec: Any, out: Path, workers: int) -> None:
    """Simulate every (option, load) point (resuming from ``out``), write ``pareto.parquet``,
    ``pareto.json`` and ``pareto.png``, and print the front and the cheapest point at the SLO."""
    import json

    # lazy: keeps tidal --help fast (the planner loads the simulator)
    from tidal.experiments.pareto import pareto, write_pareto
    from tidal.experiments.pareto_points import SIMS_DIR
    from tidal.report.pareto_figure import pareto_figure

    def show(row: dict[str, Any]) -> None:
        what = row["error"] or (
            f"{row['tokens_per_s_per_gpu']:.0f} tok/s/GPU, "
            f"{row['tokens_per_s_per_user']:.1f} tok/s/user"
        )
        err_console.print(f"  {row['option']} @ {row['load']:g}: {what}", highlight=False)

    def kept() -> str:
        n = len(list((out / SIMS_DIR).glob("*.json")))
        return f"{n} points kept in {out / SIMS_DIR}; run the same command again to resume"

    with on_interrupt(kept):
        outcome = pareto(spec, workers=workers, out_dir=out, on_point=show)
        path = write_pareto(outcome, out)
    info = json.loads((out / "pareto.json").read_text())
    fig = pareto_figure(path, out / "pareto.png", info)
    console.print(pareto_table(outcome.front, f"Pareto front on {spec.pareto.gpus} GPUs"))
    best = outcome.cheapest_at_slo
    if best is None:
        console.print(f"no point meets the SLO {spec.targets()}", style="bold")
    else:
        console.print(
            f"cheapest meeting {spec.targets()}: {best['option']} at {best['load_key']} "
            f"{best['load']:g} — {best['dollars_per_mtok']:.3f} $/Mtok, "
            f"{best['tokens_per_s_per_gpu']:.0f} tok/s/GPU"
        )
    for s in outcome.skipped:
        console.print(f"skipped: {s}", style="dim")
    reused = f", {outcome.simulations_reused} reused" if outcome.simulations_reused else ""
    console.print(
        f"{outcome.simulations_run} simulations{reused} in {outcome.wall_s:.1f} s; points in "
        f"{path}" + (f", figure {fig.path}" if fig else "")
    )


def pareto_table(front: list[dict[str, Any]], title: str) -> Table:
    """The front's points, most throughput per GPU (least per user) first."""
    t = Table(title=title)
    cols = ["option", "load", "tok/s/GPU", "tok/s/user", "TTFT p99 s", "TPOT p99 ms", "$/Mtok"]
    for col in cols:
        t.add_column(col, justify="left" if col == "option" else "right")
    for r in front:
        tpot = r["tpot_p99_s"]
        t.add_row(
            r["option"], f"{r['load']:g}", f"{r['tokens_per_s_per_gpu']:.0f}",
            f"{r['tokens_per_s_per_user']:.1f}", f"{r['ttft_p99_s']:.3f}",
            f"{tpot * 1e3:.1f}" if tpot is not None else "—", f"{r['dollars_per_mtok']:.3f}",
        )  # fmt: skip
    return t
