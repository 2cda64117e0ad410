"""Reading trace bytes and turning string columns into validated numpy arrays.

Every check that fails raises :class:`TraceError` with the file, the 1-based line number and
the column. CSV tables are read with all columns as strings; the ``__line`` column added here
keeps the physical line number of each row (polars keeps blank lines as all-null rows, which are
dropped after the numbering, so the numbers stay exact).
"""

from __future__ import annotations

import csv
import io

import numpy as np
import polars as pl

from tidal.core.bounded import read_bytes  # noqa: F401  (re-exported)
from tidal.core.errors import TraceError
from tidal.core.units import NS_PER_S

LINE = "__line"
MAX_SPAN_NS = 2**60
"""Longest supported time from a trace's first arrival to any later time it holds (arrivals,
tool-call durations): about 36.5 years. Simulated times are int64 nanoseconds and "never" is
``INF_NS = 2**62``, so arrivals and call times below this bound leave room for the serving
itself; larger values are corrupt rows in practice (a year-2300 timestamp)."""
MAX_SPAN_S = MAX_SPAN_NS / NS_PER_S
MAX_TOKENS = 2**31 - 1
"""Largest accepted token count of one field (sums of a few stay exact in int64)."""


def outlier_beyond_span(t: np.ndarray, limit: float) -> int | None:
    """Index of the time to blame when ``max(t) − min(t) > limit``: the extreme farther from the
    median (a single corrupt row is then the one named), else None."""
    if len(t) == 0:
        return None
    lo, hi = int(np.argmin(t)), int(np.argmax(t))
    if not float(t[hi]) - float(t[lo]) > limit:
        return None
    med = float(np.median(t))
    return hi if float(t[hi]) - med >= med - float(t[lo]) else lo


def span_message(written: str, offset_s: float) -> str:
    """The message of a time beyond :data:`MAX_SPAN_NS` (``written``: the value and its unit)."""
    return (
        f"{written} lies {offset_s:.3g} s from the trace's other times, beyond the "
        f"{MAX_SPAN_S:.3g} s (about {MAX_SPAN_S / 31_557_600:.0f} years) a trace may span in "
        "integer nanoseconds; fix or delete that row"
    )


def _ragged_line(data: bytes, ncols: int) -> tuple[int, int] | None:
    """First (line, field count) whose field count differs from ``ncols`` (slow, for errors)."""
    reader = csv.reader(io.StringIO(data.decode("utf-8", errors="replace")))
    try:
        for row in reader:
            if row and len(row) != ncols:
                return reader.line_num, len(row)
    except csv.Error:  # e.g. a lone carriage return in a field: no count to report
        return None
    return None


def _check_field_counts(data: bytes, where: str, ncols: int) -> None:
    """Headerless files: polars pads short rows with nulls, so count the separators."""
    lines = sum(1 for line in data.splitlines() if line.strip())
    if b'"' in data or data.count(b",") == (ncols - 1) * lines:
        return
    bad = _ragged_line(data, ncols)
    if bad is not None:
        raise TraceError(where, bad[0], None, f"expected {ncols} fields, found {bad[1]}")


def read_csv_strings(
    data: bytes, where: str, columns: list[str], *, header: bool = True
) -> pl.DataFrame:
    """A CSV as string columns plus ``__line``; ``columns`` must be present (extra ones are kept).

    Without a header, ``columns`` names the fields in order and each row must have exactly
    that many. Blank lines are skipped.
    """
    if not data.strip():
        raise TraceError(where, None, None, "the file is empty")
    try:
        if header:
            df = pl.read_csv(io.BytesIO(data), infer_schema=False)
        else:
            df = pl.read_csv(
                io.BytesIO(data), has_header=False, new_columns=columns, infer_schema=False
            )
    except pl.exceptions.PolarsError as exc:
        ncols = len(columns) if not header else len(data.split(b"\n", 1)[0].split(b","))
        bad = _ragged_line(data, ncols)
        if bad is not None:
            raise TraceError(
                where, bad[0], None, f"expected {ncols} fields, found {bad[1]}"
            ) from None
        raise TraceError(where, None, None, f"unreadable CSV: {exc}") from None
    if not header:
        _check_field_counts(data, where, len(columns))
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise TraceError(where, 1, missing[0], f"missing column (header: {df.columns})")
    first = 2 if header else 1
    df = df.with_row_index(LINE, offset=first)
    return df.filter(~pl.all_horizontal(pl.col(c).is_null() for c in df.columns if c != LINE))


def fail_at(df: pl.DataFrame, mask: np.ndarray, where: str, column: str, what: str) -> None:
    """Raise at the first row where ``mask`` is true: ``what`` followed by the raw value."""
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return
    i = int(idx[0])
    raw = df[column][i] if column in df.columns else None
    value = "missing value" if raw is None else repr(raw)
    raise TraceError(where, int(df[LINE][i]), column, f"{what}, got {value}")


def int_column(df: pl.DataFrame, column: str, where: str, *, minimum: int = 1) -> np.ndarray:
    """Column as int64 in ``[minimum, MAX_TOKENS]``; anything else raises TraceError."""
    values = df[column].str.strip_chars().cast(pl.Int64, strict=False)
    fail_at(df, values.is_null().to_numpy(), where, column, "expected an integer")
    out = values.to_numpy().astype(np.int64, copy=False)
    fail_at(
        df,
        (out < minimum) | (out > MAX_TOKENS),
        where,
        column,
        f"expected an integer in [{minimum}, {MAX_TOKENS}]",
    )
    return out


def float_column(
    df: pl.DataFrame, column: str, where: str, *, minimum: float = 0.0, allow_missing: bool = False
) -> np.ndarray:
    """Column as finite float64 ≥ ``minimum``; blanks become 0 when ``allow_missing``."""
    values = df[column].str.strip_chars().cast(pl.Float64, strict=False)
    if allow_missing:
        blank = df[column].is_null() | (df[column].str.strip_chars() == "")
        bad = values.is_null() & ~blank
        values = values.fill_null(0.0)
    else:
        bad = values.is_null()
    fail_at(df, bad.to_numpy(), where, column, "expected a number")
    out = values.to_numpy().astype(np.float64, copy=False)
    fail_at(
        df,
        ~np.isfinite(out) | (out < minimum),
        where,
        column,
        f"expected a finite number ≥ {minimum}",
    )
    return out
