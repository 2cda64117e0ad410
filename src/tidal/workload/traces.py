"""Replay of real traces as :class:`RequestSet` (arrivals re-based so the earliest is at 0).

- Azure LLM 2023 CSV(.gz): ``TIMESTAMP`` (``YYYY-MM-DD HH:MM:SS.fffffff``, parsed exactly to
  the ns), ``ContextTokens`` → prompt, ``GeneratedTokens`` → output. Rows are sorted stably by
  time, so equal or out-of-order timestamps keep their file order among themselves.
- Mooncake JSONL(.gz): ``timestamp`` (ms), ``input_length``, ``output_length``; other keys
  (``hash_ids``) are ignored. ``spread_ticks`` moves each request uniformly within its tick.
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
from tidal.workload._io import fail_at, int_column, read_bytes, read_csv_strings
from tidal.workload.base import RequestSet
from tidal.workload.measured import is_measured, load_measured
from tidal.workload.paths import resolve_trace
from tidal.workload.servegen import CHUNK_RE, load_servegen

FORMATS = ("azure", "mooncake", "servegen", "measured")
AZURE_TIME = "TIMESTAMP"
AZURE_PROMPT = "ContextTokens"
AZURE_OUTPUT = "GeneratedTokens"
AZURE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S%.f"
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
_MOONCAKE_SCHEMA = {"timestamp": pl.Float64, "input_length": pl.Int64, "output_length": pl.Int64}
_TAR_RE = re.compile(r"\.(tar|tar\.gz|tgz)$")
_JSONL_RE = re.compile(r"\.(jsonl|ndjson|json)(\.gz)?$")


def sorted_request_set(
    t_ns: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    source: str,
    extra: dict[str, np.ndarray] | None = None,
    origin_ns: int | None = None,
) -> RequestSet:
    """Stable sort by time and subtract ``origin_ns`` (default: the earliest arrival)."""
    order = np.argsort(t_ns, kind="stable")
    t = t_ns[order]
    if len(t):
        t = t - (t[0] if origin_ns is None else origin_ns)
    cols = {k: v[order] for k, v in (extra or {}).items()}
    return RequestSet(t.astype(np.int64, copy=False), prompt[order], output[order], source, cols)


# --- Azure -------------------------------------------------------------------------------


def load_azure(path: str | os.PathLike[str]) -> RequestSet:
    """Azure LLM inference trace 2023 (CSV or CSV.gz)."""
    p = resolve_trace(path)
    where = str(p)
    df = read_csv_strings(read_bytes(p), where, [AZURE_TIME, AZURE_PROMPT, AZURE_OUTPUT])
    ts = (
        df[AZURE_TIME]
        .str.strip_chars()
        .str.to_datetime(AZURE_TIME_FORMAT, time_unit="ns", strict=False)
    )
    fail_at(
        df,
        ts.is_null().to_numpy(),
        where,
        AZURE_TIME,
        "expected a timestamp 'YYYY-MM-DD HH:MM:SS.fffffff'",
    )
    t_ns = ts.cast(pl.Int64).to_numpy().astype(np.int64, copy=False)
    prompt = int_column(df, AZURE_PROMPT, where)
    output = int_column(df, AZURE_OUTPUT, where)
    return sorted_request_set(t_ns, prompt, output, f"azure:{p}")


# --- Mooncake ----------------------------------------------------------------------------


def _check_json_value(value: object, where: str, line: int, key: str) -> None:
    minimum = 0 if key == "timestamp" else 1
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < minimum
    ):
        raise TraceError(where, line, key, f"expected a number ≥ {minimum}, got {value!r}")
    if key != "timestamp" and value != int(value):
        raise TraceError(where, line, key, f"expected an integer, got {value!r}")


def _scan_jsonl(data: bytes, where: str) -> None:
    """Line-by-line check that raises at the first malformed line (slow path, for errors)."""
    for line, raw in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TraceError(where, line, None, f"not valid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise TraceError(where, line, None, "expected a JSON object")
        for key in MOONCAKE_KEYS:
            if key not in obj:
                raise TraceError(where, line, key, "missing key")
            _check_json_value(obj[key], where, line, key)


def _valid_mooncake(df: pl.DataFrame) -> bool:
    if df.null_count().sum_horizontal().item() != 0:
        return False
    ts = df["timestamp"].to_numpy()
    lengths_ok = (df["input_length"] >= 1).all() and (df["output_length"] >= 1).all()
    return bool(np.all(np.isfinite(ts) & (ts >= 0))) and bool(lengths_ok)


def _read_mooncake(data: bytes, where: str) -> pl.DataFrame:
    """Fast path with polars; on any problem a line-by-line scan names the bad line."""
    try:
        df = pl.read_ndjson(io.BytesIO(data), schema=_MOONCAKE_SCHEMA)
    except pl.exceptions.PolarsError:
        df = None
    if df is None or not _valid_mooncake(df):
        _scan_jsonl(data, where)
        raise TraceError(where, None, None, "unreadable JSON Lines")
    return df


def tick_ms_of(t_ms: np.ndarray) -> float:
    """Quantisation step: the median gap between distinct timestamps (0 if fewer than 2)."""
    distinct = np.unique(t_ms)
    return float(np.median(np.diff(distinct))) if len(distinct) > 1 else 0.0


def load_mooncake(
    path: str | os.PathLike[str],
    *,
    spread_ticks: bool = False,
    rng: np.random.Generator | None = None,
    tick_ms: float | None = None,
) -> RequestSet:
    """Mooncake FAST'25 JSON Lines trace.

    Times are relative to the earliest timestamp. With ``spread_ticks`` every request moves
    from t to ``t + U·tick`` (U uniform on [0, 1), drawn in file order) and the set is re-sorted,
    still relative to the earliest *tick* (so the first request need not be at 0); ``tick``
    defaults to :func:`tick_ms_of` (3000 ms for the conversation trace). Needs ``rng``.
    """
    p = resolve_trace(path)
    where = str(p)
    df = _read_mooncake(read_bytes(p), where)
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
    return sorted_request_set(t_ns, prompt, output, source, origin_ns=0)


# --- format detection and dispatch -------------------------------------------------------


def _first_line(path: Path) -> str:
    data = read_bytes(path)[:4096]
    text = data.decode("utf-8", errors="replace").lstrip()
    return text.split("\n", 1)[0]


def detect_format(path: str | os.PathLike[str]) -> str:
    """``azure``, ``mooncake`` or ``servegen`` from the name, the extension, then the content."""
    p = resolve_trace(path)
    name = p.name.lower()
    if is_measured(p):
        return "measured"
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
) -> RequestSet:
    """Load any supported trace. ServeGen is sampled in full (see :func:`load_servegen` for the
    window, rate and size arguments) and needs ``rng``."""
    kind = detect_format(path) if fmt == "auto" else fmt
    if kind == "azure":
        return load_azure(path)
    if kind == "mooncake":
        return load_mooncake(path, spread_ticks=spread_ticks, rng=rng)
    if kind == "measured":
        return load_measured(path)
    if kind == "servegen":
        if rng is None:
            raise ValueError("sampling a ServeGen trace needs a random generator")
        return load_servegen(path, rng)
    raise ConfigError(
        "trace_format", f"unknown value {fmt!r}", "valid: auto, " + ", ".join(FORMATS)
    )
