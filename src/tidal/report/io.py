"""Atomic file writes: a result file is either complete or absent, never half-written."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def write_json(path: str | Path, obj: Any) -> None:
    text = json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"
    atomic_write(path, lambda p: p.write_text(text))


def write_parquet(path: str | Path, columns: dict[str, Any]) -> None:
    import polars as pl

    df = pl.DataFrame(columns)
    atomic_write(path, lambda p: df.write_parquet(p, statistics=False))
