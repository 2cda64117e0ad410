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

import os
import re

import numpy as np
import polars as pl

from tidal.core.bounded import PARQUET_MAGIC, sniff
from tidal.core.errors import ConfigError, TraceError
from tidal.core.units import NS_PER_MS
from tidal.workload._io import (
    LINE,
    MAX_SPAN_NS,
    fail_at,
    int_column,
    outlier_beyond_span,
    read_bytes,
    read_csv_strings,
    span_message,
)
from tidal.workload._mooncake import mooncake_content, read_records
from tidal.workload.base import RequestSet
from tidal.workload.content import PrefixContent
from tidal.workload.measured import is_measured, load_measured
from tidal.workload.paths import resolve_trace
from tidal.workload.servegen import CHUNK_RE, load_servegen

FORMATS = ("azure", "mooncake", "servegen", "measured")
AZURE_TIME = "TIMESTAMP"
AZURE_PROMPT = "ContextTokens"
AZURE_OUTPUT = "GeneratedTokens"
AZURE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S%.f"
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
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
    if len(df) == 0:
        raise TraceError(where, None, None, "the file holds a header but no requests")
    t_ns = _azure_times(df, where)
    prompt = int_column(df, AZURE_PROMPT, where)
    output = int_column(df, AZURE_OUTPUT, where)
    return sorted_request_set(t_ns, prompt, output, f"azure:{p}")


# --- Mooncake ----------------------------------------------------------------------------


def _read_mooncake(
    data: bytes, where: str, hash_ids: bool = False
) -> tuple[pl.DataFrame, list[int]]:
    """The validated records (:mod:`tidal.workload._mooncake`) and their physical lines; times
    must span at most :data:`MAX_SPAN_NS`."""
    df, lines = read_records(data, where, hash_ids)
    if len(df) == 0:
        raise TraceError(where, None, None, "the file holds no requests")
    t_ms = df["timestamp"].to_numpy()
    i = outlier_beyond_span(t_ms, MAX_SPAN_NS / NS_PER_MS)
    if i is not None:
        off = abs(float(t_ms[i]) - float(np.median(t_ms))) / 1e3
        raise TraceError(where, lines[i], "timestamp", span_message(f"{t_ms[i]:g} ms", off))
    return df, lines


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
    df, lines = _read_mooncake(read_bytes(p), where, hash_block_tokens is not None)
    content = None
    if hash_block_tokens is not None:
        content = mooncake_content(df, lines, where, hash_block_tokens)
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


def _first_line(head: bytes, where: str) -> str:
    """The first non-blank line of a file's first bytes (:func:`tidal.core.bounded.sniff`)."""
    nul = head.find(b"\0")
    if nul >= 0:
        line = head.count(b"\n", 0, nul) + 1
        raise TraceError(where, line, None, "binary data (a NUL byte): not a text file")
    text = head.decode("utf-8", errors="replace").lstrip()
    if not text:
        raise TraceError(where, None, None, "the file is empty")
    return text.split("\n", 1)[0]


def detect_format(path: str | os.PathLike[str]) -> str:
    """``azure``, ``mooncake``, ``servegen`` or ``measured`` from the name, the first bytes
    (Parquet and tar magic numbers, a JSON object, an Azure header), never the whole file."""
    p = resolve_trace(path)
    name = p.name.lower()
    if is_measured(p):
        return "measured"
    if p.is_dir() or _TAR_RE.search(name) or CHUNK_RE.search(p.name):
        return "servegen"
    head = sniff(p)
    if head.startswith(PARQUET_MAGIC):
        return "measured"
    if head[257:262] == b"ustar":
        return "servegen"
    if _JSONL_RE.search(name):
        return "mooncake"
    first = _first_line(head, str(p))
    if first.startswith("{"):
        return "mooncake"
    header = [c.strip().strip('"') for c in first.split(",")]
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
        f"cannot tell the format of {p} (its first line: {first[:80]!r})",
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
    if kind == "measured":
        return load_measured(path)
    if kind == "servegen":
        if rng is None:
            raise ValueError("sampling a ServeGen trace needs a random generator")
        return load_servegen(path, rng)
    raise ConfigError(
        "trace_format", f"unknown value {fmt!r}", "valid: auto, " + ", ".join(FORMATS)
    )
