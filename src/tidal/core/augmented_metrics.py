"""Metrics of augmented (tool-calling) workloads, from per-request columns.

* **Normalized latency** (INFERCEPT's definition, ``benchmarks/final_tput_bench_real.py``;
  docs/research/augserve.md §2.6): ``(finish − arrival − Σ call time) / output tokens``, where, as
  in INFERCEPT's driver, the output sequence holds the generated tokens *and* the tokens the calls
  returned (they are appended to it).
* **Effective throughput** (AugServe: requests handled within the latency constraints per unit time;
  docs/research/augserve.md §4.1 [DEF]): completed requests with TTFT ≤ ``slo_ttft_s`` and, when
  ``slo_norm_latency_s`` is given, normalized latency ≤ it, divided by the makespan (first arrival
  to last completion, as ``goodput``). TTFT is the first token of the initial prompt.
* **TPOT with the pauses** (``tpot_incl_pauses_*``): vLLM's formula over the whole request,
  (finish − first token)/(output tokens − 1), the tool calls' time included. The run's
  ``tpot_*`` leaves the calls out (:mod:`tidal.core.metrics`): a request waiting on a tool is
  not decoding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tidal.core.metrics import _pcts, tpot_completed

PCTS = (50, 90, 99)


def normalized_latency_s(cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per-request normalized latency in seconds (NaN for unfinished requests)."""
    finish = cols["finish_ns"]
    done = finish >= 0
    busy = (finish - cols["arrival_ns"] - cols["call_ns"]) / 1e9
    out = cols["output_tokens"] + cols["return_tokens"]
    return np.where(done, busy / np.maximum(out, 1), np.nan)


def augmented_metrics(
    cols: Mapping[str, np.ndarray], slo_ttft_s: float, slo_norm_latency_s: float | None = None
) -> dict[str, Any]:
    finish = cols["finish_ns"]
    done = finish >= 0
    n = len(done)
    norm = normalized_latency_s(cols)
    m: dict[str, Any] = {}
    vals = norm[done]
    for p, v in zip(PCTS, np.percentile(vals, PCTS) if len(vals) else [None] * 3, strict=True):
        m[f"normalized_latency_p{p}_s"] = None if v is None else float(v)
    m["normalized_latency_mean_s"] = float(vals.mean()) if len(vals) else None
    ttft = np.where(done, (cols["first_token_ns"] - cols["arrival_ns"]) / 1e9, np.inf)
    met = done & (ttft <= slo_ttft_s)
    if slo_norm_latency_s is not None:
        met &= np.nan_to_num(norm, nan=np.inf) <= slo_norm_latency_s
    n_met = int(met.sum())
    if done.any():
        makespan = max(int(finish[done].max()) - int(cols["arrival_ns"].min()), 1) / 1e9
    else:
        makespan = 0.0
    m["effective_throughput"] = n_met / makespan if makespan else 0.0
    m["effective_slo_attainment"] = n_met / n if n else 0.0
    tpot = tpot_completed(cols["first_token_ns"], finish, cols["output_tokens"])
    _pcts("tpot_incl_pauses", tpot, m)
    m["calls_completed"] = int(cols["num_calls"][done].sum())
    m["call_time_mean_s"] = float(cols["call_ns"][done].mean() / 1e9) if done.any() else None
    return m
