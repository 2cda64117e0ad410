"""Simulator fidelity: per-request latency errors of a simulation against a real run.

For request i with latency x in the real run and x̂ in the simulation (TTFT, TPOT or E2E, as
defined in :mod:`tidal.core.metrics`), the relative error is ``e_i = (x̂_i − x_i) / x_i``. A run
is summarised by the median and p90 of ``|e_i|`` (``ttft_median_rel_error``,
``ttft_p90_rel_error``, …), the median signed error (bias: > 0 means the simulator is slow), and
the shift of the distribution's percentiles, ``(P̂ − P)/P`` for P50 and P90 (``ttft_p50_shift``).
Requests missing from either run, or whose latency is undefined in either (TPOT of a one-token
output), are left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tidal.core.metrics import request_latencies

METRICS = ("ttft", "tpot", "e2e")


def relative_errors(
    real_cols: Mapping[str, np.ndarray], sim_cols: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Per-request relative errors for each metric (requests aligned by position)."""
    real, sim = request_latencies(real_cols), request_latencies(sim_cols)
    out = {}
    for m in METRICS:
        x, y = real[f"{m}_s"], sim[f"{m}_s"]
        ok = np.isfinite(x) & np.isfinite(y) & (x > 0)
        out[m] = (y[ok] - x[ok]) / x[ok]
    return out


def fidelity_summary(
    real_cols: Mapping[str, np.ndarray], sim_cols: Mapping[str, np.ndarray]
) -> dict[str, Any]:
    errs = relative_errors(real_cols, sim_cols)
    real, sim = request_latencies(real_cols), request_latencies(sim_cols)
    out: dict[str, Any] = {}
    for m, e in errs.items():
        a = np.abs(e)
        out[f"{m}_median_rel_error"] = float(np.median(a)) if len(a) else None
        out[f"{m}_p90_rel_error"] = float(np.percentile(a, 90)) if len(a) else None
        out[f"{m}_median_signed_error"] = float(np.median(e)) if len(e) else None
        out[f"{m}_num_requests"] = len(e)
        x, y = real[f"{m}_s"], sim[f"{m}_s"]
        x, y = x[np.isfinite(x)], y[np.isfinite(y)]
        for p in (50, 90):
            if len(x) and len(y):
                px, py = float(np.percentile(x, p)), float(np.percentile(y, p))
                out[f"{m}_p{p}_real_s"] = px
                out[f"{m}_p{p}_sim_s"] = py
                out[f"{m}_p{p}_shift"] = (py - px) / px if px > 0 else None
    return out


def mean_columns(runs: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-request timestamps averaged over runs of one workload (requests finished in every
    run; the others are marked unfinished)."""
    cols = dict(runs[0])
    done = np.logical_and.reduce([r["finish_ns"] >= 0 for r in runs])
    for key in ("first_scheduled_ns", "first_token_ns", "finish_ns"):
        mean = np.mean([r[key] for r in runs], axis=0)
        cols[key] = np.where(done, np.rint(mean), -1).astype(np.int64)
    return cols
