"""The ``tidal`` application and what its commands share: the typer ``app``, consoles, error
display, option helpers. Each command module (:mod:`tidal.cli`) registers on ``app``; heavy
imports stay inside the commands so that ``tidal --help`` is fast."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

import tidal
from tidal.cli import help_layout
from tidal.cli.plain import styled
from tidal.core.errors import TidalError

app = typer.Typer(
    help="Tidal: LLM serving — an exact fast simulator and a real engine under one scheduler.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
help_layout.install()
UNWRAPPED_WIDTH = 1000
"""Columns of a console whose stream is not a terminal (a pipe, a file, a test's capture):
nothing wraps, whatever $COLUMNS says."""


class _StreamConsole:
    """A rich ``Console`` for whatever ``sys.stdout`` (``sys.stderr``) is *now*: a terminal gets
    its own width and colours, anything else (a pipe, a file, a test runner's buffer) lines
    that never wrap and no colour codes. The console is rebuilt when the stream object
    changes, so a decision taken at import (under a terminal) never leaks into a later
    capture (``pytest -s``, ``CliRunner``), whatever ``$COLUMNS`` says."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr
        self._stream: Any = None
        self._console: Console | None = None

    def _get(self) -> Console:
        stream = sys.stderr if self._stderr else sys.stdout
        # A rich ``Live`` (every progress bar) swaps the streams for ``FileProxy`` objects that
        # write through this very console: the same stream, so the same console, or the live
        # display's state (``set_live`` / ``clear_live``) would land on a fresh console.
        stream = getattr(stream, "rich_proxied_file", stream)
        if self._console is None or stream is not self._stream:
            tty = hasattr(stream, "isatty") and stream.isatty()
            self._stream = stream
            self._console = Console(
                stderr=self._stderr,
                width=None if tty else UNWRAPPED_WIDTH,
                soft_wrap=not tty,
                markup=False,  # user values print as given (tidal.cli.plain)
            )
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)

    # Special methods are looked up on the type, never through ``__getattr__``: rich's ``Live``
    # does ``with console:`` (buffered output) on every refresh.
    def __enter__(self) -> Console:
        return self._get().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._get().__exit__(*exc)


def _console(stderr: bool = False) -> Console:
    """The console of the current stream (see :class:`_StreamConsole`)."""
    return cast(Console, _StreamConsole(stderr))


console = _console()
err_console = _console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        console.print(f"tidal {tidal.__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", is_eager=True,
        callback=_print_version,
    ),
) -> None:
    """Tidal: LLM serving — an exact fast simulator and a real engine under one scheduler."""

Opt = typer.Option


def _fail(err: Exception) -> None:
    err_console.print(styled(("error:", "bold red"), " ", str(err)))
    raise typer.Exit(2)


@contextmanager
def on_interrupt(note: Callable[[], str]) -> Iterator[None]:
    """Ctrl-C within the block prints ``interrupted: NOTE`` — what was kept and how to resume —
    on stderr and exits 130 (128 + SIGINT), rather than typer's silent 130."""
    try:
        yield
    except KeyboardInterrupt:
        err_console.print(
            Text.assemble("\n", ("interrupted:", "bold yellow"), f" {note()}"), highlight=False
        )
        raise typer.Exit(130) from None


def _set(d: dict[str, Any], dotted: str, value: Any) -> None:
    if value is None:
        return
    keys = dotted.split(".")
    for k in keys[:-1]:
        d = d.setdefault(k, {})
    d[keys[-1]] = value


def _parse_rate(rate: str | None) -> float | None:
    if rate is None:
        return None
    try:
        value = float(rate)
    except ValueError:
        raise TidalError(f"rate: {rate!r} is not a number (give req/s, or inf)") from None
    if math.isnan(value) or value <= 0:
        raise TidalError(f"rate: must be > 0 requests per second or inf, got {rate}")
    return value


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def metrics_table(title: str, rows: dict[str, dict[str, Any]]) -> Table:
    """One column per run, one row per headline metric."""
    keys = [
        ("num_completed", "completed", "{:.0f}"),
        ("request_throughput", "req/s", "{:.3f}"),
        ("token_throughput", "tok/s (in+out)", "{:,.0f}"),
        ("roofline_token_throughput", "roofline tok/s", "{:,.0f}"),
        ("ttft_p50_s", "TTFT p50 s", "{:.3f}"),
        ("ttft_p90_s", "TTFT p90 s", "{:.3f}"),
        ("ttft_p95_s", "TTFT p95 s", "{:.3f}"),
        ("ttft_p99_s", "TTFT p99 s", "{:.3f}"),
        ("ttft_client_p50_s", "TTFT p50 s (client)", "{:.3f}"),
        ("ttft_client_p99_s", "TTFT p99 s (client)", "{:.3f}"),
        ("tpot_p50_s", "TPOT p50 ms", "ms"),
        ("tpot_p99_s", "TPOT p99 ms", "ms"),
        ("itl_p99_s", "ITL p99 ms", "ms"),
        ("e2e_p50_s", "E2E p50 s", "{:.2f}"),
        ("e2e_p99_s", "E2E p99 s", "{:.2f}"),
        ("goodput", "goodput req/s", "{:.3f}"),
        ("slo_attainment", "SLO attainment", "{:.1%}"),
        ("num_preemptions", "preemptions", "{:.0f}"),
        ("mode_switches", "EB+ mode switches", "{:.0f}"),
        ("eb_time_share", "EB time share", "{:.1%}"),
        ("prefix_cache_hit_rate", "prefix cache hit rate", "{:.1%}"),
        ("cold_starts", "cold starts", "{:.0f}"),
        ("prewarm_hit_rate", "prewarm hit rate", "{:.1%}"),
        ("gpu_seconds", "GPU-seconds", "{:,.0f}"),
    ]
    augmented = [
        ("effective_throughput", "effective req/s", "{:.3f}"),
        ("normalized_latency_p50_s", "norm. latency p50 ms/tok", "ms"),
        ("normalized_latency_p99_s", "norm. latency p99 ms/tok", "ms"),
        ("num_intercepts", "intercepts", "{:.0f}"),
        ("waste_preserve_gb_s", "waste preserve GB·s", "{:,.0f}"),
        ("waste_recompute_gb_s", "waste recompute GB·s", "{:,.0f}"),
        ("waste_swap_gb_s", "waste swap GB·s", "{:,.0f}"),
    ]
    keys += augmented
    present = {k for r in rows.values() for k in r}
    if not any(r.get("prefix_caching") and r.get("prefix_cache_queries") for r in rows.values()):
        present.discard("prefix_cache_hit_rate")  # caching off, or nothing it could cache
    keys = [k for k in keys if k[0] in present]
    t = Table(title=title)
    t.add_column("metric")
    for name in rows:
        t.add_column(name, justify="right")
    for key, label, fmt in keys:
        cells = []
        for r in rows.values():
            v = r.get(key)
            if v is None:
                cells.append("—")
            elif fmt == "ms":
                cells.append(f"{v * 1e3:.1f}")
            else:
                cells.append(fmt.format(v))
        t.add_row(label, *cells)
    return t


def _run_and_write(cfg: Any, out: Path | None, show_progress: bool = True) -> Any:
    # lazy: keeps tidal --help fast
    from tidal.core.signals import sigterm_as_exit
    from tidal.report.io import check_run_dir
    from tidal.sim.run import load_requests

    if out is not None:
        check_run_dir(out)  # before the run, not after it
    note = "nothing written (a run's files are written when it ends); run the command again"
    with on_interrupt(lambda: note), sigterm_as_exit():
        return _simulate_and_write(cfg, out, show_progress, load_requests(cfg))


def _simulate_and_write(cfg: Any, out: Path | None, show_progress: bool, reqs: Any) -> Any:
    # lazy: keeps tidal --help fast
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from tidal.report.results import write_run
    from tidal.sim.run import run_simulation

    if show_progress and len(reqs) >= 20_000 and sys.stderr.isatty():
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        ) as bar:
            task = bar.add_task("simulating", total=len(reqs))
            result = run_simulation(
                cfg, reqs, progress=lambda done, total: bar.update(task, completed=done)
            )
    else:
        result = run_simulation(cfg, reqs)
    if out is not None:
        write_run(
            out,
            cfg.model_dump(mode="json"),
            cfg.seed,
            result.metrics,
            result.columns,
            result.run_info,
            extra_tables=result.extras.get("tables"),
            extra_json=result.extras.get("json"),
            extra_summary=result.extras.get("summary"),
        )
    return result


def main() -> None:  # pragma: no cover
    app()
