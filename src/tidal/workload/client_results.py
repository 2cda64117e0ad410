"""The per-request result files of the benchmark clients people use, read as a measured run.

Each becomes the columns of a ``tidal bench serve`` ``requests.parquet``
(:mod:`tidal.measure.results`): ``arrival_ns`` (the send time, ns from the first send),
``prompt_len``, ``output_tokens``, ``first_token_ns``, ``finish_ns`` (−1 when the request
failed), ``success``; ``output_len`` is the output received (a client file does not say what
``max_tokens`` was sent), ``first_scheduled_ns`` −1 (no client sees it). So ``tidal fidelity
--measured FILE`` and ``tidal simulate --trace FILE`` replay them request by request.

* **vLLM** ``vllm bench serve --save-result --save-detailed`` (one JSON object): per-request
  lists ``input_lens``, ``output_lens``, ``ttfts``, ``itls``, ``errors`` and ``start_times``
  (the send times; a file without them has no arrivals and is refused). A request failed when
  its error is non-empty; its latency is TTFT plus its ITLs.
* **aiperf** ``profile_export.jsonl`` (one JSON record per request): ``metadata``
  (``request_start_ns``, ``request_end_ns``, ``benchmark_phase``; warmup records are left
  out) and ``metrics`` (``time_to_first_token``; the server's ``usage_prompt_tokens`` and
  ``usage_completion_tokens`` when it sent usage, else aiperf's own ``input_sequence_length``
  and ``output_sequence_length``; each ``{value, unit}``); a record with an ``error`` failed.
* **guidellm** ``benchmarks.json``: every benchmark's ``requests`` — ``successful``,
  ``errored`` and ``incomplete`` — with ``request_start_time``/``request_end_time`` (s),
  ``time_to_first_token_ms``, ``prompt_tokens``, ``output_tokens``.

Token counts are the client's: aiperf and guidellm count with the tokenizer they were given
(use the server's: ``tidal serve`` prints where its tokenizer is), guidellm prefers the
server's ``usage``; vLLM's ``output_lens`` are the server's usage.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from tidal.core.errors import ConfigError

CLIENT_FORMATS = ("vllm", "aiperf", "guidellm")
SNIFF_BYTES = 4 << 20
MAX_FILE_BYTES = 2 << 30
"""Result files larger than this are refused (each is read whole)."""


def client_format(path: str | os.PathLike[str]) -> str | None:
    """``vllm``, ``aiperf`` or ``guidellm`` from the file's first bytes; None for others."""
    p = Path(path)
    name = p.name.lower()
    if not p.is_file() or not name.endswith((".json", ".jsonl")):
        return None
    with p.open("rb") as f:
        head = f.read(SNIFF_BYTES).decode("utf-8", errors="replace")
    first = head.lstrip().split("\n", 1)[0]
    if name.endswith(".jsonl") or first.endswith("}"):
        try:
            rec = json.loads(first)
        except ValueError:
            rec = None
        if isinstance(rec, dict) and "metadata" in rec and "metrics" in rec:
            return "aiperf"
    if '"guidellm_version"' in head and '"benchmarks"' in head:
        return "guidellm"
    if '"ttfts"' in head and '"input_lens"' in head:
        return "vllm"
    return None


def read_client_results(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The file's requests as measured-run columns (rows in send order)."""
    p = Path(path)
    fmt = client_format(p)
    if fmt is None:
        raise ConfigError(
            "trace",
            f"{p} is no result file of vllm bench serve, aiperf or guidellm",
            "give a vLLM --save-detailed JSON, aiperf's profile_export.jsonl or guidellm's "
            "benchmarks.json",
        )
    if p.stat().st_size > MAX_FILE_BYTES:
        raise ConfigError("trace", f"{p} is over {MAX_FILE_BYTES >> 30} GiB")
    try:
        rows = {"vllm": _vllm, "aiperf": _aiperf, "guidellm": _guidellm}[fmt](p)
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise ConfigError("trace", f"{p}: not a readable {fmt} result ({err!r})") from None
    if not rows:
        raise ConfigError("trace", f"{p} holds no request")
    return _columns(rows, p)


Row = tuple[float, float, float, int, int, bool]
"""(send s, first token s or nan, end s or nan, prompt tokens, output tokens, success)."""


def _vllm(p: Path) -> list[Row]:
    d = json.loads(p.read_text())
    if "start_times" not in d:
        raise ConfigError(
            "trace",
            f"{p} has no start_times (the requests' send times)",
            "save it with a vLLM whose bench serve --save-detailed writes start_times",
        )
    errors = d.get("errors") or [""] * len(d["ttfts"])
    rows: list[Row] = []
    for i, t0 in enumerate(d["start_times"]):
        ok = not errors[i]
        ttft = float(d["ttfts"][i]) if ok else float("nan")
        end = t0 + ttft + sum(d["itls"][i]) if ok else float("nan")
        out = int(d["output_lens"][i]) if ok else 0
        rows.append((float(t0), t0 + ttft, end, int(d["input_lens"][i]), out, ok))
    return rows


def _value(metrics: dict[str, Any], name: str, scale: dict[str, float]) -> float:
    m = metrics.get(name)
    if not isinstance(m, dict) or m.get("value") is None:
        return float("nan")
    return float(m["value"]) * scale.get(str(m.get("unit", "")), 1.0)


_TO_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}


def _aiperf(p: Path) -> list[Row]:
    rows: list[Row] = []
    with p.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            meta, metrics = rec["metadata"], rec.get("metrics") or {}
            if str(meta.get("benchmark_phase", "profiling")).lower() == "warmup":
                continue
            t0 = int(meta["request_start_ns"]) / 1e9
            ok = not rec.get("error") and not meta.get("was_cancelled")
            ttft = _value(metrics, "time_to_first_token", _TO_S)
            end = int(meta["request_end_ns"]) / 1e9 if meta.get("request_end_ns") else np.nan
            isl = _value(metrics, "usage_prompt_tokens", {})  # the server's, when it sent usage
            if np.isnan(isl):
                isl = _value(metrics, "input_sequence_length", {})
            osl = _value(metrics, "usage_completion_tokens", {})
            if np.isnan(osl):
                osl = _value(metrics, "output_sequence_length", {})
            rows.append(
                (
                    t0,
                    t0 + ttft if ok else np.nan,
                    end if ok else np.nan,
                    0 if np.isnan(isl) else int(isl),
                    0 if np.isnan(osl) or not ok else int(osl),
                    ok,
                )
            )
    return rows


def _guidellm(p: Path) -> list[Row]:
    d = json.loads(p.read_text())
    rows: list[Row] = []
    for bench in d["benchmarks"]:
        reqs = bench["requests"]
        for status in ("successful", "errored", "incomplete"):
            for r in reqs.get(status) or []:
                ok = status == "successful"
                t0 = float(r["request_start_time"])
                ttft = r.get("time_to_first_token_ms")
                first = t0 + float(ttft) / 1e3 if ok and ttft is not None else np.nan
                end = float(r["request_end_time"]) if ok else np.nan
                out = int(r.get("output_tokens") or 0) if ok else 0
                rows.append((t0, first, end, int(r.get("prompt_tokens") or 0), out, ok))
    return rows


def _columns(rows: list[Row], p: Path) -> dict[str, np.ndarray]:
    rows = sorted(rows, key=lambda r: r[0])
    send = np.array([r[0] for r in rows], dtype=np.float64)
    first = np.array([r[1] for r in rows], dtype=np.float64)
    end = np.array([r[2] for r in rows], dtype=np.float64)
    if not np.isfinite(send).all():
        raise ConfigError("trace", f"{p}: a request has no finite send time")
    t0 = send[0]

    def ns(t: np.ndarray) -> np.ndarray:
        ok = np.isfinite(t)
        return np.where(ok, np.round((np.where(ok, t, t0) - t0) * 1e9), -1).astype(np.int64)

    success = np.array([r[5] for r in rows], dtype=bool) & np.isfinite(first) & np.isfinite(end)
    first_ns, finish_ns = ns(first), ns(end)
    out = np.array([r[4] for r in rows], dtype=np.int64)
    n = len(rows)
    return {
        "request_id": np.arange(n, dtype=np.int64),
        "arrival_ns": ns(send),
        "prompt_len": np.array([r[3] for r in rows], dtype=np.int64),
        "output_len": out.copy(),
        "first_scheduled_ns": np.full(n, -1, dtype=np.int64),
        "first_token_ns": np.where(success, first_ns, -1),
        "finish_ns": np.where(success, finish_ns, -1),
        "output_tokens": np.where(success, out, 0),
        "num_preemptions": np.zeros(n, dtype=np.int64),
        "instance": np.zeros(n, dtype=np.int64),
        "success": success,
    }
