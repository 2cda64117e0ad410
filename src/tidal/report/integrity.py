"""A results directory checked before it is drawn: a truncated
``summary.json`` or ``requests.parquet`` (a full disk, a copy cut short) is a named error
naming the file, not a JSON or Parquet traceback halfway through the figures."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from tidal.core.errors import TidalError


def _visible(root: Path, pattern: str) -> list[Path]:
    """Files matching ``pattern`` under ``root``, skipping hidden (temporary) entries."""
    return [
        p for p in sorted(root.rglob(pattern))
        if not any(part.startswith(".") for part in p.relative_to(root).parts)
    ]  # fmt: skip


def check_results(root: Path) -> None:
    """Every JSON file under ``root`` parses and every Parquet file has a readable footer."""
    for p in _visible(root, "*.json"):
        try:
            json.loads(p.read_text(encoding="utf-8"))
        except (ValueError, OSError) as err:
            raise TidalError(
                f"results: {p} is damaged or unreadable ({err}); re-run the command that "
                "wrote it (a run directory is replaced whole)"
            ) from None
    for p in _visible(root, "*.parquet"):
        try:
            pl.read_parquet_schema(p)
        except (pl.exceptions.PolarsError, OSError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise TidalError(
                f"results: {p} is damaged or unreadable ({first}); re-run the command that "
                "wrote it"
            ) from None
