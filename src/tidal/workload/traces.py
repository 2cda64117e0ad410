"""Replay of real traces as :class:`RequestSet` (arrivals re-based so the earliest is at 0).

- Azure LLM 2023 CSV(.gz): ``TIMESTAMP`` (``YYYY-MM-DD HH:MM:SS.fffffff``, parsed exactly to
  the ns), ``ContextTokens`` → prompt, ``GeneratedTokens`` → output. Rows are sorted stably by
  time, so equal or out-of-order timestamps keep their file order among themselves.
- Mooncake JSONL(.gz): ``timestamp`` (ms), ``input_length``, ``output_length``; ``hash_ids``
  (ids of the prompt's ``hash_block_tokens``-token prefix blocks, 512 in the FAST'25 traces)
  become the prompt content of prefix caching. ``spread_ticks`` moves each request uniformly
  within its tick.
- ServeGen (``*_trace_csv.tar.gz``, a directory or a single ``chunk-N-trace.csv``): sampled,
  see :mod:`tidal.workload.servegen`.

Malformed content raises :class:`TraceError` with file, 1-based line and column.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from pathlib import Path

import numpy as np
import polars as pl

from tidal.core.errors import ConfigError, TraceError
from tidal.core.units import NS_PER_MS
from tidal.workload._io import (
    LINE,
    MAX_SPAN_NS,
    MAX_TOKENS,
    fail_at,
    int_column,
    outlier_beyond_span,
    read_bytes,
    read_csv_strings,
    span_message,
)
from tidal.workload.base import RequestSet
from tidal.workload.content import PrefixContent
from tidal.workload.paths import resolve_trace
from tidal.workload.servegen import CHUNK_RE, load_servegen

FORMATS = ("azure", "mooncake", "servegen")
AZURE_TIME = "TIMESTAMP"
AZURE_PROMPT = "ContextTokens"
AZURE_OUTPUT = "GeneratedTokens"
AZURE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S%.f"
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
_MOONCAKE_SCHEMA = {"timestamp": pl.Float64, "input_length": pl.Int64, "output_length": pl.Int64}
_TAR_RE = re.compile(r"\.(tar|tar\.gz|tgz)$")
_JSONL_RE = re.compile(r"\.(jsonl|ndjson|json)(\.gz)?$")
_NS_RANGE_US = (2**63 - 1) // 1000
"""Largest |µs since the epoch| whose ns value fits int64 (years 1678–2261)."""


def sorted_request_set(
    t_ns: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    source: str,
    extra: dict[str, np.ndarray] | None = None,
    origin_ns: int | None = None,
    content: PrefixContent | None = None,
) -> RequestSet:
    """Stable sort by time and subtract ``origin_ns`` (default: the earliest arrival)."""
    order = np.argsort(t_ns, kind="stable")
    t = t_ns[order]
    if len(t):
        t = t - (t[0] if origin_ns is None else origin_ns)
    cols = {k: v[order] for k, v in (extra or {}).items()}
    sorted_content = None if content is None else content.take(order)
    return RequestSet(
        t.astype(np.int64, copy=False),
        prompt[order],
        output[order],
        source,
        cols,
        content=sorted_content,
    )


# --- Azure -------------------------------------------------------------------------------


def _azure_times(df: pl.DataFrame, where: str) -> np.ndarray:
    """Timestamps as int64 ns since the epoch, each within :data:`MAX_SPAN_NS` of the earliest.

    Parsed in µs first (whose range is wide), because polars wraps ns past year 2262 silently.
    """
    text = df[AZURE_TIME].str.strip_chars()
    us = text.str.to_datetime(AZURE_TIME_FORMAT, time_unit="us", strict=False)
    fail_at(
        df,
        us.is_null().to_numpy(),
        where,
        AZURE_TIME,
        "expected a timestamp 'YYYY-MM-DD HH:MM:SS.fffffff'",
    )
    t_us = us.cast(pl.Int64).to_numpy()
    wide = np.flatnonzero(np.abs(t_us) > _NS_RANGE_US)
    i = int(wide[0]) if wide.size else outlier_beyond_span(t_us, MAX_SPAN_NS / 1000)
    if i is not None:
        off = abs(float(t_us[i]) - float(np.median(t_us))) / 1e6
        raise TraceError(where, int(df[LINE][i]), AZURE_TIME, span_message(repr(text[i]), off))
    ts = text.str.to_datetime(AZURE_TIME_FORMAT, time_unit="ns", strict=False)
    return ts.cast(pl.Int64).to_numpy().astype(np.int64, copy=False)


def load_azure(path: str | os.PathLike[str]) -> RequestSet:
    """Azure LLM inference trace 2023 (CSV or CSV.gz)."""
    p = resolve_trace(path)
    where = str(p)
    df = read_csv_strings(read_bytes(p), where, [AZURE_TIME, AZURE_PROMPT, AZURE_OUTPUT])
    t_ns = _azure_times(df, where)
    prompt = int_column(df, AZURE_PROMPT, where)
    output = int_column(df, AZURE_OUTPUT, where)
    return sorted_request_set(t_ns, prompt, output, f"azure:{p}")


# --- Mooncake ----------------------------------------------------------------------------


def _check_json_value(value: object, where: str, line: int, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TraceError(where, line, key, f"expected a number, got {value!r}")
    if key == "timestamp":
        if value < 0:
            raise TraceError(where, line, key, f"expected a time ≥ 0 ms, got {value!r}")
    elif value != int(value) or not 1 <= value <= MAX_TOKENS:
        raise TraceError(
            where, line, key, f"expected an integer in [1, {MAX_TOKENS}], got {value!r}"
        )


def _scan_jsonl(data: bytes, where: str) -> tuple[pl.DataFrame, list[int]]:
    """Line-by-line parse that raises at the first malformed line (slow path): the table and
    the physical line of each record."""
    rows: dict[str, list[float | int]] = {k: [] for k in MOONCAKE_KEYS}
    lines = []
    for line, raw in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, RecursionError) as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise TraceError(where, line, None, f"not valid JSON: {msg}") from None
        if not isinstance(obj, dict):
            raise TraceError(where, line, None, "expected a JSON object")
        for key in MOONCAKE_KEYS:
            if key not in obj:
                raise TraceError(where, line, key, "missing key")
            _check_json_value(obj[key], where, line, key)
            rows[key].append(obj[key] if key == "timestamp" else int(obj[key]))
        lines.append(line)
    return pl.DataFrame(rows, schema=_MOONCAKE_SCHEMA), lines


def _valid_mooncake(df: pl.DataFrame) -> bool:
    if df.select(MOONCAKE_KEYS).null_count().sum_horizontal().item() != 0:
        return False
    ts = df["timestamp"].to_numpy()
    lengths_ok = all(
        bool(df[k].is_between(1, MAX_TOKENS).all()) for k in ("input_length", "output_length")
    )
    return bool(np.all(np.isfinite(ts) & (ts >= 0))) and lengths_ok


def _record_lines(data: bytes) -> list[int]:
    """Physical line (1-based) of each non-blank line, i.e. of each JSON Lines record."""
    text = data.decode("utf-8", errors="replace").splitlines()
    return [i for i, raw in enumerate(text, start=1) if raw.strip()]


def _read_mooncake(data: bytes, where: str, hash_ids: bool = False) -> pl.DataFrame:
    """Fast path with polars; on any problem a line-by-line scan names the bad line (or reads
    what polars would not, e.g. ``5.0`` tokens; it keeps no ``hash_ids``). Times must span at
    most :data:`MAX_SPAN_NS`."""
    schema: dict[str, pl.DataType | type[pl.DataType]] = dict(_MOONCAKE_SCHEMA)
    if hash_ids:
        schema["hash_ids"] = pl.List(pl.Int64)
    try:
        df = pl.read_ndjson(io.BytesIO(data), schema=schema)
    except pl.exceptions.PolarsError:
        df = None
    lines = None
    if df is None or not _valid_mooncake(df):
        df, lines = _scan_jsonl(data, where)
    if len(df) == 0:
        raise TraceError(where, None, None, "the file holds no requests")
    t_ms = df["timestamp"].to_numpy()
    i = outlier_beyond_span(t_ms, MAX_SPAN_NS / NS_PER_MS)
    if i is not None:
        line = (lines or _record_lines(data))[i]
        off = abs(float(t_ms[i]) - float(np.median(t_ms))) / 1e3
        raise TraceError(where, line, "timestamp", span_message(f"{t_ms[i]:g} ms", off))
    return df


def tick_ms_of(t_ms: np.ndarray) -> float:
    """Quantisation step: the median gap between distinct timestamps (0 if fewer than 2)."""
    distinct = np.unique(t_ms)
    return float(np.median(np.diff(distinct))) if len(distinct) > 1 else 0.0


def mooncake_content(df: pl.DataFrame, where: str, block_tokens: int) -> PrefixContent | None:
    """``hash_ids`` as segments: each id covers ``block_tokens`` tokens, the last one the rest
    of the prompt; the trace guarantees ``len(hash_ids) == ceil(input_length / 512)``. A file
    read by the slow path (no ``hash_ids`` column) or without any ids has no content (None);
    a request without ids shares nothing."""
    if "hash_ids" not in df.columns or df["hash_ids"].null_count() == len(df):
        return None
    given = df["hash_ids"].is_not_null().to_numpy()
    ids_col = df["hash_ids"].fill_null([])
    count = ids_col.list.len().to_numpy().astype(np.int64)
    prompt = df["input_length"].to_numpy().astype(np.int64)
    bad = np.flatnonzero(given & (count != -(-prompt // block_tokens)))
    if len(bad):
        i = int(bad[0])
        raise TraceError(
            where,
            i + 1,
            "hash_ids",
            f"{count[i]} ids for {prompt[i]} prompt tokens, expected ceil(input_length / "
            f"{block_tokens}) = {-(-prompt[i] // block_tokens)}; set workload.hash_block_tokens "
            "(--hash-block-tokens) to the trace's block size",
        )
    ids = ids_col.explode().drop_nulls().to_numpy().astype(np.int64)
    lens = np.full(len(ids), block_tokens, dtype=np.int64)
    last = np.cumsum(count) - 1
    lens[last[count > 0]] = (prompt - block_tokens * (count - 1))[count > 0]
    return PrefixContent.from_segments(ids, lens, count)


def load_mooncake(
    path: str | os.PathLike[str],
    *,
    spread_ticks: bool = False,
    rng: np.random.Generator | None = None,
    tick_ms: float | None = None,
    hash_block_tokens: int | None = None,
) -> RequestSet:
    """Mooncake FAST'25 JSON Lines trace.

    Times are relative to the earliest timestamp. With ``spread_ticks`` every request moves
    from t to ``t + U·tick`` (U uniform on [0, 1), drawn in file order) and the set is re-sorted,
    still relative to the earliest *tick* (so the first request need not be at 0); ``tick``
    defaults to :func:`tick_ms_of` (3000 ms for the conversation trace). Needs ``rng``.
    With ``hash_block_tokens`` the ``hash_ids`` are kept as the requests' prompt content.
    """
    p = resolve_trace(path)
    where = str(p)
    df = _read_mooncake(read_bytes(p), where, hash_block_tokens is not None)
    content = None
    if hash_block_tokens is not None:
        content = mooncake_content(df, where, hash_block_tokens)
    t_ms = df["timestamp"].to_numpy().astype(np.float64)
    if len(t_ms):
        t_ms = t_ms - t_ms.min()
    source = f"mooncake:{p}"
    if spread_ticks:
        if rng is None:
            raise ValueError("spread_ticks needs a random generator")
        tick = tick_ms_of(t_ms) if tick_ms is None else tick_ms
        t_ms = t_ms + rng.random(len(t_ms)) * tick
        source += f" (spread over {tick:g} ms ticks)"
    t_ns = np.rint(t_ms * NS_PER_MS).astype(np.int64)
    prompt = df["input_length"].to_numpy().astype(np.int64)
    output = df["output_length"].to_numpy().astype(np.int64)
    return sorted_request_set(t_ns, prompt, output, source, origin_ns=0, content=content)


# --- format detection and dispatch -------------------------------------------------------


def _first_line(path: Path) -> str:
    data = read_bytes(path)[:4096]
    text = data.decode("utf-8", errors="replace").lstrip()
    return text.split("\n", 1)[0]


def detect_format(path: str | os.PathLike[str]) -> str:
    """``azure``, ``mooncake`` or ``servegen`` from the name, the extension, then the content."""
    p = resolve_trace(path)
    name = p.name.lower()
    if p.is_dir() or _TAR_RE.search(name) or CHUNK_RE.search(p.name):
        return "servegen"
    if _JSONL_RE.search(name):
        return "mooncake"
    first = _first_line(p)
    if first.startswith("{"):
        return "mooncake"
    header = [c.strip() for c in first.split(",")]
    if AZURE_TIME in header:
        return "azure"
    if "num_prefill_tokens" in header:
        raise ConfigError(
            "trace",
            f"{p} holds lengths without arrival times",
            f"use length_dist: 'empirical:{p}' with a rate instead",
        )
    raise ConfigError(
        "trace_format",
        f"cannot tell the format of {p}",
        "set trace_format to one of: " + ", ".join(FORMATS),
    )


def load_trace(
    path: str | os.PathLike[str],
    fmt: str = "auto",
    *,
    rng: np.random.Generator | None = None,
    spread_ticks: bool = False,
    hash_block_tokens: int | None = None,
) -> RequestSet:
    """Load any supported trace. ServeGen is sampled in full (see :func:`load_servegen` for the
    window, rate and size arguments) and needs ``rng``."""
    kind = detect_format(path) if fmt == "auto" else fmt
    if kind == "azure":
        return load_azure(path)
    if kind == "mooncake":
        return load_mooncake(
            path, spread_ticks=spread_ticks, rng=rng, hash_block_tokens=hash_block_tokens
        )
    if kind == "servegen":
        if rng is None:
            raise ValueError("sampling a ServeGen trace needs a random generator")
        return load_servegen(path, rng)
    raise ConfigError(
        "trace_format", f"unknown value {fmt!r}", "valid: auto, " + ", ".join(FORMATS)
    )
