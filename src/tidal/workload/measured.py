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

from tidal.core.errors import ConfigError
from tidal.workload.base import RequestSet

REQUIRED = ("arrival_ns", "prompt_len", "finish_ns", "output_tokens")


def is_measured(path: str | os.PathLike[str]) -> bool:
    """A ``requests.parquet``, or a benchmark client's per-request result file."""
    from tidal.workload.client_results import client_format

    return Path(path).name.lower().endswith(".parquet") or client_format(path) is not None


def _read(path: Path) -> dict[str, np.ndarray]:
    import polars as pl

    from tidal.workload.client_results import client_format, read_client_results

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
    cols = {c: df[c].to_numpy() for c in df.columns if c not in ("error", "itl_ns")}
    return cols


def _completed(cols: dict[str, np.ndarray]) -> np.ndarray:
    """Rows of completed requests, in arrival order (ties by row)."""
    ok = (cols["finish_ns"] >= 0) & (cols["output_tokens"] >= 1) & (cols["prompt_len"] >= 1)
    if "success" in cols:
        ok &= cols["success"].astype(bool)
    rows = np.flatnonzero(ok)
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
