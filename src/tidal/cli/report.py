"""``tidal report``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from tidal.cli.app import Opt, TidalError, _fail, app, console, err_console, on_interrupt


@contextmanager
def figure_status(out: Any) -> Iterator[Callable[[int, int, str], None] | None]:
    """A progress line on ``out`` (a rich console, stderr) naming the figure being drawn and
    how many are done — big plans and cluster runs take seconds per figure; None (silence)
    when ``out`` is not a terminal, so pipes, files and logs get no progress frames."""
    if not out.is_terminal:
        yield None
        return
    # lazy: keeps tidal --help fast
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

    columns = (SpinnerColumn(), TextColumn("drawing {task.description}"), BarColumn())
    with Progress(*columns, MofNCompleteColumn(), console=out, transient=True) as bar:
        task = bar.add_task("figures", total=None)

        def update(done: int, total: int, name: str) -> None:
            bar.update(task, completed=done, total=total, description=name)
            bar.refresh()

        yield update


@app.command()
def report(
    results: Annotated[
        Path, typer.Argument(help="A run, sweep or plan directory (the --out of those commands).")
    ],
    format: Annotated[
        str, Opt("--format", help="html (self-contained) or md (figures beside).")
    ] = "html",
) -> None:
    """Draw the figures of a results directory and write a report beside them."""
    from tidal.report.integrity import check_results  # lazy: keeps tidal --help fast
    from tidal.report.render import render_report  # lazy: loads matplotlib

    try:
        note = "the figures drawn so far are kept; run the command again to draw them all"
        if results.is_dir():
            check_results(results)
        with on_interrupt(lambda: note), figure_status(err_console) as progress:
            target, figs = render_report(results, format, progress)
    except TidalError as err:
        _fail(err)
        return
    console.print(f"{len(figs)} figures in {results / 'figures'}; report: {target}")
