"""Atomic writes: a result file, or a whole run directory, is either complete or absent.

Files are written to a temporary sibling and renamed into place; they get the permissions an
ordinary ``open()`` would give (``0o666 & ~umask``), not ``mkstemp``'s 0600. A run directory is
built as a temporary sibling ``.NAME.tmp-*`` and swapped in by two renames (old → ``.NAME.old-*``,
new → NAME, then the old one is removed), so a reader never sees files of two runs mixed; a kill
between the renames leaves the old run under ``.NAME.old-*`` and the next write clears it.
On any failure, including SIGINT and (within :func:`tidal.core.signals.sigterm_as_exit`)
SIGTERM, the temporary file or directory is removed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

from tidal.core.errors import ConfigError
from tidal.core.outpath import check_out_dir
from tidal.core.spool import ColumnSet

_TEMP_SUFFIX = re.compile(r"[A-Za-z0-9_]+")
"""What ``tempfile.mkdtemp`` appends to a prefix (letters, digits, ``_``; no ``.``)."""
RUN_MARKERS = ("summary.json", "run.json")
"""Files whose presence makes a directory a run directory (which a new run may replace)."""


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _file_mode() -> int:
    return 0o666 & ~_umask()


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        os.chmod(tmp_path, _file_mode())
        write(tmp_path)
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def write_json(path: str | Path, obj: Any) -> None:
    text = json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"
    atomic_write(path, lambda p: p.write_text(text))


def write_parquet(path: str | Path, columns: Mapping[str, Any]) -> None:
    """Columns as one Parquet file (zstd, no statistics). A :class:`ColumnSet` (columns on
    disk) is streamed (:func:`sink_parquet`); the file is the same byte for byte."""
    if isinstance(columns, ColumnSet):
        atomic_write(path, lambda p: sink_parquet(p, columns))
        return
    df = pl.DataFrame(dict(columns))
    atomic_write(path, lambda p: df.write_parquet(p, statistics=False))


def write_parts(n: int) -> list[int]:
    """Row counts of the parts polars' ``DataFrame.write_parquet`` writes a one-chunk frame of
    ``n`` rows in: ⌈n / 2¹⁷⌉ near-equal parts, the first ``n mod parts`` one row longer (its
    streaming sink then merges parts below 100,000 rows into one row group). Measured on
    polars 2.1 and checked byte for byte by ``tests/report/test_spool_io.py``."""
    m = max(1, -(-n // 131072))
    q, r = divmod(n, m)
    return [q + 1] * r + [q] * (m - r)


def sink_parquet(path: Path, cols: ColumnSet) -> None:
    """Write ``cols`` through polars' streaming sink from temporary parts of
    :func:`write_parts`' sizes (one part in memory at a time)."""
    if cols.num_rows == 0:
        pl.DataFrame(dict(cols)).write_parquet(path, statistics=False)
        return
    parts_dir = Path(tempfile.mkdtemp(prefix=f".{path.name}.parts-", dir=path.parent))
    try:
        files, start = [], 0
        for j, k in enumerate(write_parts(cols.num_rows)):
            part = pl.DataFrame({c: cols.read(c, start, start + k) for c in cols})
            files.append(parts_dir / f"{j:06d}.parquet")
            part.write_parquet(files[-1], statistics=False)
            del part
            start += k
        pl.scan_parquet(files).sink_parquet(path, statistics=False)
    finally:
        shutil.rmtree(parts_dir, ignore_errors=True)


def clear_stale(final: Path) -> None:
    """Remove ``.NAME.tmp-*`` / ``.NAME.old-*`` siblings left by a killed writer of ``final``.

    NAME is matched literally (never as a glob: ``--out 'o_*'`` must not clear other runs'
    siblings) and the rest must be what ``mkdtemp`` appends."""
    if not final.parent.is_dir():
        return
    prefixes = tuple(f".{final.name}.{kind}-" for kind in ("tmp", "old"))
    for p in final.parent.iterdir():
        for prefix in prefixes:
            rest = p.name[len(prefix) :]
            if p.name.startswith(prefix) and _TEMP_SUFFIX.fullmatch(rest):
                shutil.rmtree(p, ignore_errors=True)


def check_run_dir(final: str | Path) -> None:
    """Refuse a ``final`` that :func:`replacing_dir` may not replace (see there), or cannot
    create (:func:`tidal.core.outpath.check_out_dir`)."""
    final = check_out_dir(final)
    if final.exists() and not final.is_dir():
        raise ConfigError("out", f"{final} exists and is not a directory", "give a directory")
    nonempty = final.is_dir() and any(final.iterdir())
    if nonempty and not any((final / m).exists() for m in RUN_MARKERS):
        raise ConfigError(
            "out",
            f"{final} holds files but is not a run directory (no summary.json), and a run "
            "replaces its directory as a whole",
            "give a new or empty directory, or a previous run's",
        )


@contextmanager
def replacing_dir(final: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary sibling of ``final``; on success it replaces ``final`` whole.

    ``final`` may be absent, empty, or a previous run (it holds ``summary.json`` or
    ``run.json``); anything else is refused with a :class:`ConfigError` rather than deleted.
    """
    final = Path(final)
    check_run_dir(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    clear_stale(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        old = None
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
            os.replace(final, old / final.name)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
