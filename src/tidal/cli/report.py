"""``tidal report``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tidal.cli import Opt, TidalError, _fail, app, console


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
    from tidal.report.render import render_report

    try:
        target, figs = render_report(results, format)
    except TidalError as err:
        _fail(err)
        return
    console.print(f"{len(figs)} figures in {results / 'figures'}; report: {target}")
