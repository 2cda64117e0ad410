"""Parsing Mooncake FAST'25 JSON Lines records into a validated table (used by
:func:`tidal.workload.traces.load_mooncake`).

One contract, whichever path reads the file: a record is a JSON object on one physical line
(lines are split at ``\\n`` only; blank lines are skipped) with ``timestamp`` (a finite number
≥ 0, ms), ``input_length`` and ``output_length`` (numbers with an integral value in
``[1, MAX_TOKENS]``; ``1000.0`` is 1000) and, when the prompts' content is wanted, optional
``hash_ids``: null or a list of JSON integers in int64 range (not floats, strings, booleans or
null elements). Anything else raises :class:`TraceError` naming the file, the physical line and
the key. polars reads the common case at once; when it cannot (a ``1000.0``, a bad line), a
line-by-line scan reads the same records with the same rules, ``hash_ids`` included, so a
single odd value never changes what the rest of the file means
(``tests/workload/test_loader_contract.py`` checks both paths agree).
"""

from __future__ import annotations

import io
import json
import math
from typing import cast

import numpy as np
import polars as pl

from tidal.core.errors import TraceError
from tidal.workload._io import MAX_TOKENS
from tidal.workload.content import PrefixContent

KEYS = ("timestamp", "input_length", "output_length")
SCHEMA = {"timestamp": pl.Float64, "input_length": pl.Int64, "output_length": pl.Int64}
HASH_IDS = "hash_ids"
_ID_RANGE = (-(2**63), 2**63 - 1)


def record_lines(data: bytes) -> list[tuple[int, bytes]]:
    """(physical line, bytes) of each non-blank line; lines end at ``\\n`` only."""
    return [(i, raw) for i, raw in enumerate(data.split(b"\n"), start=1) if raw.strip()]


def _check_value(value: object, where: str, line: int, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TraceError(where, line, key, f"expected a number, got {value!r}")
    if key == "timestamp":
        if value < 0:
            raise TraceError(where, line, key, f"expected a time ≥ 0 ms, got {value!r}")
    elif value != int(value) or not 1 <= value <= MAX_TOKENS:
        raise TraceError(
            where, line, key, f"expected an integer in [1, {MAX_TOKENS}], got {value!r}"
        )


def _check_ids(value: object, where: str, line: int) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise TraceError(where, line, HASH_IDS, f"expected a list of integer ids, got {value!r}")
    lo, hi = _ID_RANGE
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise TraceError(
                where, line, HASH_IDS, f"expected integer ids in [-2^63, 2^63 - 1], got {v!r}"
            )
    return value


def _parse(raw: bytes, where: str, line: int) -> dict[str, object]:
    try:
        obj = json.loads(raw.decode("utf-8", errors="replace"))
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise TraceError(where, line, None, f"not valid JSON: {msg}") from None
    if not isinstance(obj, dict):
        raise TraceError(where, line, None, "expected a JSON object")
    return obj


def scan_jsonl(data: bytes, where: str, hash_ids: bool) -> tuple[pl.DataFrame, list[int]]:
    """Line-by-line parse that raises at the first malformed line (the reference path): the
    table and the physical line of each record."""
    rows: dict[str, list[object]] = {k: [] for k in KEYS}
    ids: list[list[int] | None] = []
    lines = []
    for line, raw in record_lines(data):
        obj = _parse(raw, where, line)
        for key in KEYS:
            if key not in obj:
                raise TraceError(where, line, key, "missing key")
            value = obj[key]
            _check_value(value, where, line, key)
            rows[key].append(value if key == "timestamp" else int(cast(float, value)))
        if hash_ids:
            ids.append(_check_ids(obj.get(HASH_IDS), where, line))
        lines.append(line)
    df = pl.DataFrame(rows, schema=SCHEMA)
    if hash_ids:
        df = df.with_columns(pl.Series(HASH_IDS, ids, dtype=pl.List(pl.Int64)))
    return df, lines


def _fast(data: bytes, hash_ids: bool, count: int) -> pl.DataFrame | None:
    """polars' reading when it gives exactly what :func:`scan_jsonl` would, else None."""
    schema: dict[str, pl.DataType | type[pl.DataType]] = dict(SCHEMA)
    if hash_ids:
        schema[HASH_IDS] = pl.List(pl.Int64)
    try:
        df = pl.read_ndjson(io.BytesIO(data), schema=schema)
    except pl.exceptions.PolarsError:
        return None
    if len(df) != count or df.select(KEYS).null_count().sum_horizontal().item() != 0:
        return None
    ts = df["timestamp"].to_numpy()
    if not bool(np.all(np.isfinite(ts) & (ts >= 0))):
        return None
    if not all(bool(df[k].is_between(1, MAX_TOKENS).all()) for k in KEYS[1:]):
        return None
    if hash_ids and df[HASH_IDS].list.eval(pl.element().is_null()).list.any().any():
        return None  # a null inside a list: the scan names its line
    return df


def read_records(data: bytes, where: str, hash_ids: bool) -> tuple[pl.DataFrame, list[int]]:
    """The validated table (``hash_ids`` column when asked) and each record's physical line."""
    lines = [line for line, _ in record_lines(data)]
    df = _fast(data, hash_ids, len(lines))
    if df is None:
        return scan_jsonl(data, where, hash_ids)
    return df, lines


def mooncake_content(
    df: pl.DataFrame, lines: list[int], where: str, block_tokens: int
) -> PrefixContent | None:
    """``hash_ids`` as segments (ids, lengths, count per request): each id covers
    ``block_tokens`` tokens, the last one the rest of the prompt; the trace guarantees
    ``len(hash_ids) == ceil(input_length / block_tokens)``, checked per record (the error
    names its physical line). None when no record has ids; a request without ids shares
    nothing."""
    if HASH_IDS not in df.columns or df[HASH_IDS].null_count() == len(df):
        return None
    given = df[HASH_IDS].is_not_null().to_numpy()
    ids_col = df[HASH_IDS].fill_null([])
    count = ids_col.list.len().to_numpy().astype(np.int64)
    prompt = df["input_length"].to_numpy().astype(np.int64)
    bad = np.flatnonzero(given & (count != -(-prompt // block_tokens)))
    if len(bad):
        i = int(bad[0])
        raise TraceError(
            where,
            lines[i],
            HASH_IDS,
            f"{count[i]} ids for {prompt[i]} prompt tokens, expected ceil(input_length / "
            f"{block_tokens}) = {-(-prompt[i] // block_tokens)}; set workload.hash_block_tokens "
            "(--hash-block-tokens) to the trace's block size",
        )
    ids = ids_col.explode().drop_nulls().to_numpy().astype(np.int64)
    lens = np.full(len(ids), block_tokens, dtype=np.int64)
    last = np.cumsum(count) - 1
    lens[last[count > 0]] = (prompt - block_tokens * (count - 1))[count > 0]
    return PrefixContent.from_segments(ids, lens, count)
