"""``tidal trace ...``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from tidal.cli.app import (
    Opt,
    TidalError,
    _fail,
    app,
    console,
)

trace_app = typer.Typer(help="Inspect workload traces.", no_args_is_help=True)
app.add_typer(trace_app, name="trace")


@trace_app.command("info")
def trace_info_cmd(
    path: Annotated[str, typer.Argument(help="Trace file (or a name under shared/traces).")],
    fmt: Annotated[str, Opt("--format", help="auto | azure | mooncake | servegen.")] = "auto",
) -> None:
    """Rows, span, rates, burstiness and length statistics of a trace."""
    from tidal.workload.info import trace_info  # lazy: keeps tidal --help fast

    try:
        info = trace_info(path, fmt)
    except TidalError as err:
        _fail(err)
        return
    t = Table(title=str(path))
    t.add_column("statistic")
    t.add_column("value", justify="right")
    for k, v in info.items():
        t.add_row(k, f"{v:,.4g}" if isinstance(v, float) else str(v))
    console.print(t)
