"""Latency and throughput metrics from per-request columns (both backends use these).

Definitions (vLLM ``bench serve`` conventions): TTFT = first token − arrival; E2E = finish −
arrival; TPOT = (finish − first token)/(output tokens − 1), for requests with > 1 output token;
queueing delay = first scheduled − arrival; inter-token latency (ITL) samples are step durations
weighted by the decode tokens they produced (kept in a log histogram with 0.4% bins).
Throughputs divide by the makespan (first arrival to last completion). A request meets the SLO
when TTFT ≤ ``slo_ttft_s`` and TPOT ≤ ``slo_tpot_s`` (TPOT counts as met for one-token
outputs); goodput = such completed requests per second; SLO attainment = their share of *all*
requests (unfinished ones count as misses).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tidal.core.histogram import LogHistogram

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
    tpot = np.where(done & (out_tok > 1), (finish - first) / 1e9 / denom, nan)
    return {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "queue_s": queue}


def summarize(
    cols: Mapping[str, np.ndarray],
    slo_ttft_s: float,
    slo_tpot_s: float,
    itl: LogHistogram | None = None,
) -> dict[str, Any]:
    """The run's metrics (module docstring). Each latency is computed over the completed
    requests only and dropped after its percentiles (the same values as
    :func:`request_latencies` gives, in a few arrays of one column's size at a time, so
    columns read from disk stay cheap)."""
    done = cols["finish_ns"] >= 0
    n = len(done)
    n_done = int(done.sum())
    m: dict[str, Any] = {"num_requests": n, "num_completed": n_done}
    start = int(cols["arrival_ns"].min()) if n_done else 0
    # Columns are re-read where needed (from disk, cheaply) so that few arrays of the completed
    # requests' size are alive at once; every value is computed as the definitions say.
    first = cols["first_token_ns"][done]
    ttft = (first - cols["arrival_ns"][done]) / 1e9
    met = ttft <= slo_ttft_s
    _pcts("ttft", ttft, m)
    del ttft
    out_tok = cols["output_tokens"][done]
    out_sum = int(out_tok.sum()) if n_done else 0
    tpot = cols["finish_ns"][done] - first
    del first
    tpot = tpot / 1e9
    tpot /= np.maximum(out_tok - 1, 1)
    tpot[out_tok <= 1] = np.nan
    del out_tok
    met &= np.nan_to_num(tpot, nan=0.0) <= slo_tpot_s
    _pcts("tpot", tpot[~np.isnan(tpot)], m)
    del tpot
    finish = cols["finish_ns"][done]
    last = int(finish.max()) if n_done else 0
    e2e = finish - cols["arrival_ns"][done]
    del finish
    _pcts("e2e", e2e / 1e9, m)
    del e2e
    sched = cols["first_scheduled_ns"][done]
    queue = (sched - cols["arrival_ns"][done]) / 1e9
    queue[sched < 0] = np.nan
    del sched
    _pcts("queue", queue, m)
    del queue
    itl_pcts = itl.percentiles(PCTS) if itl is not None else [None] * len(PCTS)
    for p, v in zip(PCTS, itl_pcts, strict=True):
        m[f"itl_p{p}_s"] = v / 1e9 if v is not None else None
    if n_done:
        makespan = max(last - start, 1) / 1e9
        in_tok = int(cols["prompt_len"][done].sum())
        n_met = int(met.sum())
    else:
        makespan, in_tok, out_sum, n_met = 0.0, 0, 0, 0
    m["duration_s"] = makespan
    m["request_throughput"] = n_done / makespan if makespan else 0.0
    m["token_throughput"] = (in_tok + out_sum) / makespan if makespan else 0.0
    m["output_token_throughput"] = out_sum / makespan if makespan else 0.0
    m["goodput"] = n_met / makespan if makespan else 0.0
    m["slo_attainment"] = n_met / n if n else 0.0
    m["num_preemptions"] = int(cols["num_preemptions"].sum())
    return m
