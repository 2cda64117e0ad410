"""A measured run as a trace: the ``requests.parquet`` of ``tidal bench serve`` (or of any
tidal run) replayed with its own arrivals and lengths.

Each request that completed becomes one request arriving at its recorded ``arrival_ns`` (for a
measured run: when the client sent it), with ``prompt_len`` prompt tokens and as many output
tokens as it actually produced (``output_tokens``; a server may stop before ``max_tokens``).
Requests that failed or never finished are left out: they cost the server nothing to replay.
Rows are sorted by arrival; ``extra["source_row"]`` keeps each request's row in the file, so a
simulation can be compared with the measurement request by request
(:func:`measured_columns`). The result files of ``vllm bench serve``, aiperf and guidellm are
read alike (:mod:`tidal.workload.client_results`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tidal.core.errors import ConfigError, TraceError
from tidal.workload._io import MAX_SPAN_NS, MAX_TOKENS
from tidal.workload.base import RequestSet
from tidal.workload.client_results import client_format, read_client_results

REQUIRED = ("arrival_ns", "prompt_len", "finish_ns", "output_tokens")
TIMES = ("arrival_ns", "first_scheduled_ns", "first_token_ns", "finish_ns")
"""Integer columns checked when present (ns; −1 means "never" except for arrivals)."""


def is_measured(path: str | os.PathLike[str]) -> bool:
    """A ``requests.parquet``, or a benchmark client's per-request result file."""
    return Path(path).name.lower().endswith(".parquet") or client_format(path) is not None


def _row_error(path: Path, row: int, column: str, message: str) -> TraceError:
    """A bad value: the file, the row (1-based, in file order) and the column."""
    return TraceError(f"{path}, row {row + 1}", None, column, message)


def _int_column(df: Any, path: Path, column: str) -> np.ndarray:
    """An integer column as int64, without nulls (a float, string or null is refused)."""
    s = df[column]
    if s.dtype == pl.Boolean or not s.dtype.is_integer():
        raise TraceError(
            str(path), None, column, f"expected an integer column (Int64), got {s.dtype}"
        )
    nulls = s.is_null().to_numpy()
    if nulls.any():
        raise _row_error(path, int(np.argmax(nulls)), column, "expected an integer, got null")
    if s.dtype == pl.UInt64 and len(s) and int(s.max()) > 2**63 - 1:
        row = int(np.argmax(s.to_numpy() > 2**63 - 1))
        raise _row_error(path, row, column, f"expected an integer < 2^63, got {s[row]}")
    return s.cast(pl.Int64).to_numpy()


def _success(df: Any, path: Path) -> np.ndarray:
    if "success" not in df.columns:
        return np.ones(len(df), dtype=bool)
    s = df["success"]
    if s.dtype != pl.Boolean:
        raise TraceError(
            str(path), None, "success", f"expected a boolean column, got {s.dtype}"
        )
    nulls = s.is_null().to_numpy()
    if nulls.any():
        raise _row_error(path, int(np.argmax(nulls)), "success", "expected true or false, got null")
    return s.to_numpy().astype(bool)


def _read(path: Path) -> dict[str, np.ndarray]:
    """The columns, every one the loader uses typed and checked (:func:`_check_rows`)."""
    if not path.name.lower().endswith(".parquet") and client_format(path) is not None:
        return read_client_results(path)

    if not path.is_file():
        raise ConfigError("trace", f"{path} does not exist", "give DIR/requests.parquet of a run")
    try:
        df = pl.read_parquet(path)
    except Exception as err:
        raise ConfigError("trace", f"{path} is not a readable Parquet file: {err}") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ConfigError(
            "trace",
            f"{path} has no column {', '.join(missing)}",
            "give the requests.parquet of `tidal bench serve` or `tidal simulate`",
        )
    checked = {c: _int_column(df, path, c) for c in (*REQUIRED, *TIMES) if c in df.columns}
    checked["success"] = _success(df, path)
    skip = ("error", "itl_ns", *checked)
    cols = {c: df[c].to_numpy() for c in df.columns if c not in skip}
    cols.update(checked)
    _check_rows(cols, path)
    return cols


def _first(mask: np.ndarray) -> int | None:
    idx = np.flatnonzero(mask)
    return int(idx[0]) if idx.size else None


def _check_rows(cols: dict[str, np.ndarray], path: Path) -> None:
    """Values in range: arrivals ≥ 0 and within :data:`MAX_SPAN_NS`; a completed request's
    prompt in ``[1, MAX_TOKENS]``, its output ≤ MAX_TOKENS and its finish not before its
    arrival; other times ≥ −1."""
    arrival = cols["arrival_ns"]
    span = f"expected ns in [0, {MAX_SPAN_NS}]"
    checks: list[tuple[str, np.ndarray, str]] = [
        ("arrival_ns", (arrival < 0) | (arrival > MAX_SPAN_NS), span)
    ]
    for c in TIMES[1:]:
        if c in cols:
            checks.append((c, (cols[c] < -1) | (cols[c] > 2 * MAX_SPAN_NS), "expected ns or −1"))
    done = _done(cols)
    prompt, out = cols["prompt_len"], cols["output_tokens"]
    bad_prompt = done & ((prompt < 1) | (prompt > MAX_TOKENS))
    checks += [
        ("prompt_len", bad_prompt, f"expected [1, {MAX_TOKENS}]"),
        ("output_tokens", (out < 0) | (out > MAX_TOKENS), f"expected [0, {MAX_TOKENS}]"),
        ("finish_ns", done & (cols["finish_ns"] < arrival), "a request finishes before it arrives"),
    ]
    for column, bad, what in checks:
        row = _first(bad)
        if row is not None:
            raise _row_error(path, row, column, f"{what}, got {cols[column][row]}")
    kept = arrival[done]
    if len(kept) and int(kept.max()) - int(kept.min()) > MAX_SPAN_NS:
        raise TraceError(str(path), None, "arrival_ns", f"arrivals span more than {MAX_SPAN_NS} ns")


def _done(cols: dict[str, np.ndarray]) -> np.ndarray:
    """Completed requests: a success (when recorded) that finished with ≥ 1 output token."""
    return cols["success"] & (cols["finish_ns"] >= 0) & (cols["output_tokens"] >= 1)


def _completed(cols: dict[str, np.ndarray]) -> np.ndarray:
    """Rows of completed requests, in arrival order (ties by row)."""
    rows = np.flatnonzero(_done(cols))
    return rows[np.argsort(cols["arrival_ns"][rows], kind="stable")]


def load_measured(path: str | os.PathLike[str]) -> RequestSet:
    p = Path(path)
    cols = _read(p)
    rows = _completed(cols)
    if len(rows) == 0:
        raise ConfigError("trace", f"{p} holds no completed request")
    arrival = cols["arrival_ns"][rows].astype(np.int64)
    return RequestSet(
        arrival - arrival[0],
        cols["prompt_len"][rows].astype(np.int64),
        cols["output_tokens"][rows].astype(np.int64),
        source=f"measured {p}",
        extra={"source_row": rows.astype(np.int64)},
    )


def measured_columns(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The measurement's columns of the requests :func:`load_measured` keeps, in its order,
    times shifted as its arrivals are (first kept arrival at 0)."""
    cols = _read(Path(path))
    rows = _completed(cols)
    out = {k: v[rows] for k, v in cols.items()}
    t0 = int(out["arrival_ns"][0]) if len(rows) else 0
    for k in ("arrival_ns", "first_scheduled_ns", "first_token_ns", "finish_ns"):
        if k in out:
            v = out[k].astype(np.int64)
            out[k] = np.where(v >= 0, v - t0, -1)
    if "first_scheduled_ns" not in out:
        out["first_scheduled_ns"] = np.full(len(rows), -1, dtype=np.int64)
    return out
