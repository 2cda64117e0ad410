"""Latency and throughput metrics from per-request columns (both backends use these).

Definitions (vLLM ``bench serve`` conventions): TTFT = first token − arrival; E2E = finish −
arrival; TPOT = (finish − first token − pauses)/(output tokens − 1), for requests with > 1
output token, where ``pauses`` is an augmented (tool-calling) request's time out of the engine
waiting on its calls (column ``call_ns``, 0 without it): a call is not decode time (vLLM serves
each turn of an agent as its own request, whose TPOT has no tool time in it either), while the
engine's own work after a call returns (re-admission, the prefill of the returned tokens)
stays in. The TPOT with the pauses, vLLM's formula over the whole request, is
``tpot_incl_pauses_*`` (:mod:`tidal.core.augmented_metrics`);
queueing delay = first scheduled − arrival; inter-token latency (ITL) samples are step durations
weighted by the decode tokens they produced (kept in a log histogram with 0.4% bins).
Throughputs divide by the makespan (first arrival to last completion). A request meets the SLO
when TTFT ≤ ``slo_ttft_s`` and TPOT ≤ ``slo_tpot_s`` (TPOT counts as met for one-token
outputs); goodput = such completed requests per second; SLO attainment = their share of *all*
requests (unfinished ones count as misses).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from tidal.core.histogram import LogHistogram
from tidal.core.spool import STREAM_ROWS

PCTS = (50, 90, 99)


def _pcts(name: str, x: np.ndarray, out: dict[str, Any], pcts: tuple[int, ...] = PCTS) -> None:
    """Percentiles and mean of ``x`` into ``out``; ``x`` is reordered (a temporary)."""
    if len(x) == 0:
        for p in pcts:
            out[f"{name}_p{p}_s"] = None
        out[f"{name}_mean_s"] = None
        return
    mean = float(np.mean(x))  # before the partition below reorders x
    vals = np.percentile(x, pcts, overwrite_input=True)  # x is the caller's scratch
    for p, v in zip(pcts, vals, strict=True):
        out[f"{name}_p{p}_s"] = float(v)
    out[f"{name}_mean_s"] = mean


def weighted_percentiles(
    values: np.ndarray, weights: np.ndarray, pcts: tuple[int, ...]
) -> list[float]:
    """Percentiles of a weighted sample (inverted CDF: smallest value whose cumulative weight
    reaches p% of the total)."""
    order = np.argsort(values, kind="stable")
    v = values[order]
    cw = np.cumsum(weights[order])
    total = cw[-1]
    out = []
    for p in pcts:
        i = int(np.searchsorted(cw, total * p / 100.0, side="left"))
        out.append(float(v[min(i, len(v) - 1)]))
    return out


def request_latencies(cols: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-request latency columns in seconds (NaN where undefined)."""
    arrival = cols["arrival_ns"]
    first = cols["first_token_ns"]
    finish = cols["finish_ns"]
    sched = cols["first_scheduled_ns"]
    out_tok = cols["output_tokens"]
    done = finish >= 0
    nan = np.float64("nan")
    ttft = np.where(done, (first - arrival) / 1e9, nan)
    e2e = np.where(done, (finish - arrival) / 1e9, nan)
    queue = np.where(sched >= 0, (sched - arrival) / 1e9, nan)
    denom = np.maximum(out_tok - 1, 1)
    pause = cols.get("call_ns", 0)
    tpot = np.where(done & (out_tok > 1), (finish - first - pause) / 1e9 / denom, nan)
    return {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "queue_s": queue}


def column_chunks(
    cols: Mapping[str, np.ndarray], names: tuple[str, ...], rows: int = STREAM_ROWS
) -> Iterator[list[np.ndarray]]:
    """The columns ``names`` of ``cols`` a row range at a time, in row order (a mapping with
    ``row_chunks``, a spooled :class:`~tidal.core.spool.ColumnSet` or a row selection, reads
    only that range; a plain mapping is sliced)."""
    own = getattr(cols, "row_chunks", None)
    if own is not None:
        yield from own(names, rows)
        return
    arrays = [np.asarray(cols[k]) for k in names]
    for s in range(0, len(arrays[0]), max(int(rows), 1)):
        yield [a[s : s + rows] for a in arrays]


def gathered(
    cols: Mapping[str, np.ndarray],
    names: tuple[str, ...],
    count: int,
    values: Callable[..., np.ndarray],
    rows: int = STREAM_ROWS,
) -> np.ndarray:
    """``values(*chunk)`` of every row chunk of ``names``, concatenated in row order into one
    array of ``count`` elements (allocated once: no full-length temporaries). Elementwise
    formulas give the same values as over the whole columns."""
    out: np.ndarray | None = None
    pos = 0
    for chunk in column_chunks(cols, names, rows):
        v = values(*chunk)
        if out is None:
            out = np.empty(count, dtype=v.dtype)
        out[pos : pos + len(v)] = v
        pos += len(v)
    if pos != count:
        raise ValueError(f"gathered {pos} values, expected {count}")
    return out if out is not None else np.empty(0)


def ttft_completed(first: np.ndarray, arrival: np.ndarray, finish: np.ndarray) -> np.ndarray:
    """TTFT in seconds of the completed rows (``finish >= 0``), in row order."""
    done = finish >= 0
    return (first[done] - arrival[done]) / 1e9


def _tpot_all(
    first: np.ndarray, finish: np.ndarray, out_tok: np.ndarray, pause: np.ndarray | None = None
) -> np.ndarray:
    """TPOT of the completed rows, NaN where ≤ 1 output token; ``pause``: time out of the
    engine on tool calls, not counted (module docstring)."""
    done = finish >= 0
    out_tok = out_tok[done]
    busy = finish[done] - first[done]
    if pause is not None:
        busy = busy - pause[done]
    tpot = busy / 1e9
    tpot /= np.maximum(out_tok - 1, 1)
    tpot[out_tok <= 1] = np.nan
    return tpot


def tpot_completed(
    first: np.ndarray, finish: np.ndarray, out_tok: np.ndarray, pause: np.ndarray | None = None
) -> np.ndarray:
    """TPOT in seconds of the completed rows with > 1 output token, in row order (``pause``:
    as :func:`_tpot_all`)."""
    tpot = _tpot_all(first, finish, out_tok, pause)
    return tpot[~np.isnan(tpot)]


def tpot_columns(cols: Mapping[str, np.ndarray]) -> tuple[str, ...]:
    """The columns :func:`tpot_completed` reads from ``cols``: with the tool-call pauses of an
    augmented run where ``cols`` has them."""
    base = ("first_token_ns", "finish_ns", "output_tokens")
    return (*base, "call_ns") if "call_ns" in cols else base


def _e2e(finish: np.ndarray, arrival: np.ndarray) -> np.ndarray:
    done = finish >= 0
    return (finish[done] - arrival[done]) / 1e9


def _queue(sched: np.ndarray, arrival: np.ndarray, finish: np.ndarray) -> np.ndarray:
    done = finish >= 0
    sched = sched[done]
    queue = (sched - arrival[done]) / 1e9
    queue[sched < 0] = np.nan
    return queue


class _Counts:
    """The scalars of :func:`summarize`, accumulated over row chunks (integer sums, min, max
    and counts: exact in any chunking)."""

    def __init__(self) -> None:
        self.n = self.n_done = self.n_tpot = self.n_met = 0
        self.out_sum = self.in_tok = self.preempt = 0
        self.start: int | None = None
        self.last: int | None = None

    def add(self, c: list[np.ndarray], slo_ttft_s: float, slo_tpot_s: float) -> None:
        arrival, first, finish, out_tok, prompt, preempt, *pause = c
        done = finish >= 0
        self.n += len(done)
        k = int(done.sum())
        self.n_done += k
        self.preempt += int(preempt.sum())
        if len(arrival):
            a = int(arrival.min())
            self.start = a if self.start is None else min(self.start, a)
        if k == 0:
            return
        f = int(finish[done].max())
        self.last = f if self.last is None else max(self.last, f)
        self.out_sum += int(out_tok[done].sum())
        self.in_tok += int(prompt[done].sum())
        self.n_tpot += int((out_tok[done] > 1).sum())
        met = ttft_completed(first, arrival, finish) <= slo_ttft_s
        tpot = _tpot_all(first, finish, out_tok, pause[0] if pause else None)
        met &= np.nan_to_num(tpot, nan=0.0) <= slo_tpot_s
        self.n_met += int(met.sum())


COUNTED = ("arrival_ns", "first_token_ns", "finish_ns", "output_tokens", "prompt_len")


def summarize(
    cols: Mapping[str, np.ndarray],
    slo_ttft_s: float,
    slo_tpot_s: float,
    itl: LogHistogram | None = None,
    rows: int = STREAM_ROWS,
) -> dict[str, Any]:
    """The run's metrics (module docstring), streamed over row chunks of ``rows``: counts and
    sums in one pass, then each latency gathered into one array of the completed requests
    (elementwise the values :func:`request_latencies` gives), its mean (``np.mean``, in row
    order) and percentiles taken, and the array dropped before the next. The result does not
    depend on ``rows``; at most one full-length array is alive at a time."""
    c = _Counts()
    pauses = ("call_ns",) if "call_ns" in cols else ()
    for chunk in column_chunks(cols, (*COUNTED, "num_preemptions", *pauses), rows):
        c.add(chunk, slo_ttft_s, slo_tpot_s)
    n, n_done = c.n, c.n_done
    m: dict[str, Any] = {"num_requests": n, "num_completed": n_done}
    steps: list[tuple[str, tuple[str, ...], int, Callable[..., np.ndarray]]] = [
        ("ttft", ("first_token_ns", "arrival_ns", "finish_ns"), n_done, ttft_completed),
        ("tpot", tpot_columns(cols), c.n_tpot, tpot_completed),
        ("e2e", ("finish_ns", "arrival_ns"), n_done, _e2e),
        ("queue", ("first_scheduled_ns", "arrival_ns", "finish_ns"), n_done, _queue),
    ]
    for name, names, count, fn in steps:
        x = gathered(cols, names, count, fn, rows) if n_done else np.empty(0)
        _pcts(name, x, m)
        del x
    itl_pcts = itl.percentiles(PCTS) if itl is not None else [None] * len(PCTS)
    for p, v in zip(PCTS, itl_pcts, strict=True):
        m[f"itl_p{p}_s"] = v / 1e9 if v is not None else None
    if n_done:
        makespan = max(int(c.last or 0) - int(c.start or 0), 1) / 1e9
        in_tok, out_sum, n_met = c.in_tok, c.out_sum, c.n_met
    else:
        makespan, in_tok, out_sum, n_met = 0.0, 0, 0, 0
    m["duration_s"] = makespan
    m["request_throughput"] = n_done / makespan if makespan else 0.0
    m["token_throughput"] = (in_tok + out_sum) / makespan if makespan else 0.0
    m["output_token_throughput"] = out_sum / makespan if makespan else 0.0
    m["goodput"] = n_met / makespan if makespan else 0.0
    m["slo_attainment"] = n_met / n if n else 0.0
    m["num_preemptions"] = c.preempt
    return m
