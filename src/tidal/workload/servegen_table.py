"""ServeGen per-client window tables: reading ``chunk-<client>-trace.csv`` files.

Input: ``<category>/<model>/chunk-<client>-trace.csv`` files (no header; columns
``window_start_s, rate, cv, pattern, param1, param2``), read from a ``*.tar.gz`` with
:mod:`tarfile` (nothing is extracted to disk), from a directory, or a single file. Every value is
validated (finite, ≥ 0; a used row's shape ≥ :data:`MIN_SHAPE`; window starts within
:data:`tidal.workload._io.MAX_SPAN_NS` of each other); a bad one raises :class:`TraceError`
naming the member, the line and the column. Sampling is in :mod:`tidal.workload.servegen`.
"""

from __future__ import annotations

import os
import re
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import polars as pl

from tidal.core.bounded import max_input_bytes, read_stream
from tidal.core.errors import TraceError
from tidal.workload._io import (
    LINE,
    MAX_SPAN_S,
    fail_at,
    float_column,
    outlier_beyond_span,
    read_bytes,
    read_csv_strings,
    span_message,
)
from tidal.workload.paths import resolve_trace

CHUNK_RE = re.compile(r"chunk-(\d+)-trace\.csv(\.gz)?$")
COLUMNS = ["window_start_s", "rate", "cv", "pattern", "param1", "param2"]
PATTERNS = {"Gamma": 1, "Weibull": 2}
NONE, GAMMA, WEIBULL = 0, 1, 2
MIN_SHAPE = 1e-3
"""Smallest gap shape k sampled (the released files go down to 0.0067): below it the Gamma and
Weibull gaps degenerate to 0 or ∞ in float64 and the renewal process stops advancing."""


@dataclass(frozen=True)
class ServeGenTable:
    """All rows of all clients, concatenated (one row per client and window)."""

    source: str
    model: str | None
    client: np.ndarray
    window_start_s: np.ndarray
    rate: np.ndarray
    cv: np.ndarray
    kind: np.ndarray
    """0 = no requests, 1 = Gamma, 2 = Weibull."""
    shape: np.ndarray
    window_s: float

    @property
    def origin_s(self) -> float:
        return float(self.window_start_s.min()) if len(self.window_start_s) else 0.0


def _members(path: Path) -> Iterator[tuple[str, str, bytes]]:
    """(where, member path, bytes) of every chunk trace file under ``path``; each read under
    :mod:`tidal.core.bounded`'s limits, all of them together under one file's text limit."""
    if path.is_dir():
        for f in sorted(path.rglob("chunk-*-trace.csv*")):
            if CHUNK_RE.search(f.name):
                yield str(f), f.relative_to(path.parent).as_posix(), read_bytes(f)
        return
    if CHUNK_RE.search(path.name):
        yield str(path), f"{path.parent.name}/{path.name}", read_bytes(path)
        return
    yield from _tar_members(path)


def _tar_members(path: Path) -> Iterator[tuple[str, str, bytes]]:
    """Chunk files of a (compressed) tar archive, streamed; a truncated or corrupt archive
    raises :class:`TraceError` naming it."""
    budget = max_input_bytes()
    try:
        with tarfile.open(path, "r:*") as tar:
            for m in tar:
                if not (m.isfile() and CHUNK_RE.search(m.name)):
                    continue
                where = f"{path}:{m.name}"
                member = tar.extractfile(m)
                assert member is not None
                data = read_stream(member, where, limit=budget)  # type: ignore[arg-type]
                budget -= len(data)
                yield where, m.name, data
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise TraceError(
            str(path), None, None, f"not a readable tar file (truncated or corrupt?): {exc}"
        ) from None


def _parse_member(data: bytes, where: str) -> dict[str, np.ndarray]:
    """One chunk file, fully validated (the slow path that names the bad line and column)."""
    df = read_csv_strings(data, where, COLUMNS, header=False)
    pattern = df["pattern"].str.strip_chars().fill_null("")
    known = pattern.is_in(["", *PATTERNS]).to_numpy()
    fail_at(df, ~known, where, "pattern", "expected Gamma, Weibull or empty")
    kind = pattern.replace_strict(PATTERNS, default=NONE, return_dtype=pl.Int8).to_numpy()
    cols = {
        c: float_column(df, c, where, allow_missing=c not in ("window_start_s", "rate"))
        for c in ("window_start_s", "rate", "cv", "param1", "param2")
    }
    used = (kind != NONE) & (cols["rate"] > 0)
    fail_at(
        df, used & (cols["param1"] < MIN_SHAPE), where, "param1", f"expected a shape ≥ {MIN_SHAPE}"
    )
    cols["kind"] = np.where(used, kind, NONE).astype(np.int8)
    return cols


def _fast_parse(frames: list[pl.DataFrame]) -> dict[str, np.ndarray] | None:
    """All chunk files at once; ``None`` when any value is malformed (then use the slow path)."""
    df = pl.concat(frames)
    num = [
        pl.col(c).str.strip_chars().cast(pl.Float64, strict=False)
        for c in ("window_start_s", "rate", "cv", "param1", "param2")
    ]
    pattern = pl.col("pattern").str.strip_chars().fill_null("")
    out = df.select(*num, pattern.alias("pattern"), pl.col("__member"), pl.col(LINE))
    blank_ok = [
        df[c].is_null() | (df[c].str.strip_chars() == "") for c in ("cv", "param1", "param2")
    ]
    if out["window_start_s"].null_count() or out["rate"].null_count():
        return None
    for c, blank in zip(("cv", "param1", "param2"), blank_ok, strict=True):
        if (out[c].is_null() & ~blank).any():
            return None
    cols = {
        c: out[c].fill_null(0.0).to_numpy()
        for c in ("window_start_s", "rate", "cv", "param1", "param2")
    }
    if not all(np.all(np.isfinite(v) & (v >= 0)) for v in cols.values()):
        return None
    if not out["pattern"].is_in(["", *PATTERNS]).all():
        return None
    kind = out["pattern"].replace_strict(PATTERNS, default=NONE, return_dtype=pl.Int8).to_numpy()
    used = (kind != NONE) & (cols["rate"] > 0)
    if np.any(used & (cols["param1"] < MIN_SHAPE)):
        return None
    cols["kind"] = np.where(used, kind, NONE).astype(np.int8)
    cols["member"] = out["__member"].to_numpy()
    cols["line"] = out[LINE].to_numpy()
    return cols


def _check_span(cols: dict[str, np.ndarray], members: list[tuple[str, str, bytes]]) -> None:
    """Window starts must lie within :data:`MAX_SPAN_NS` of each other (ns arrival times)."""
    starts = cols["window_start_s"]
    i = outlier_beyond_span(starts, MAX_SPAN_S - _window_s(starts))
    if i is not None:
        off = abs(float(starts[i]) - float(np.median(starts)))
        where = members[int(cols["member"][i])][0]
        message = span_message(f"window_start_s {starts[i]:g} s", off)
        raise TraceError(where, int(cols["line"][i]), "window_start_s", message)


def _window_s(starts: np.ndarray) -> float:
    gaps = np.diff(np.unique(starts))
    return float(gaps.min()) if len(gaps) else 600.0


def read_servegen(path: str | os.PathLike[str]) -> ServeGenTable:
    """Parse every ``chunk-<client>-trace.csv`` of a tar.gz, a directory or a single file."""
    p = resolve_trace(path)
    members = list(_members(p))
    if not members:
        raise TraceError(str(p), None, None, "no chunk-<client>-trace.csv files found")
    frames = [
        read_csv_strings(data, where, COLUMNS, header=False).with_columns(
            pl.lit(i, dtype=pl.Int64).alias("__member")
        )
        for i, (where, _, data) in enumerate(members)
    ]
    cols = _fast_parse(frames)
    if cols is None:
        for where, _, data in members:
            _parse_member(data, where)
        raise TraceError(str(p), None, None, "malformed ServeGen trace")
    _check_span(cols, members)
    ids = np.array([_chunk_id(name, where) for where, name, _ in members], dtype=np.int64)
    models = {PurePosixPath(name).parent.name for _, name, _ in members} - {""}
    return ServeGenTable(
        source=str(p),
        model=models.pop() if len(models) == 1 else None,
        client=ids[cols["member"]],
        window_start_s=cols["window_start_s"],
        rate=cols["rate"],
        cv=cols["cv"],
        kind=cols["kind"],
        shape=cols["param1"],
        window_s=_window_s(cols["window_start_s"]),
    )


def _chunk_id(name: str, where: str) -> int:
    """The chunk index in a ServeGen member's file name (members are filtered by CHUNK_RE):
    a client id, which must fit int64."""
    m = CHUNK_RE.search(name)
    assert m is not None
    if len(m.group(1)) > 18 and int(m.group(1)) > 2**63 - 1:
        raise TraceError(where, None, None, f"the chunk (client) id {m.group(1)} exceeds 2^63 - 1")
    return int(m.group(1))
