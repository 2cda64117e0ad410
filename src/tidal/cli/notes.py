"""Warnings and notes printed under a run's table: what a number does not say by itself.

* **Overload**: an open-loop workload offered faster than the deployment serves it. The
  queue then grows for the whole run, and every latency measures the backlog (how long the
  run was), not the service. Flagged when the requests served per second over the run fall
  short of the offered rate by more than :data:`OVERLOAD_SHORTFALL` *and* the wait before
  the first step grew from the first fifth of arrivals to the last (median ×
  :data:`QUEUE_GROWTH`, and by at least a second) — both, so that the drain at the end of a
  short light run or one burst do not count.
* **Mixed hardware**: step times from a measured profile (``--perf-model profile:PATH``,
  ``tidal calibrate``) describe the machine that profile was measured on, while the
  ``roofline tok/s`` row is the roofline of ``--gpu``.
* **Below the table's precision**: a latency under a millisecond prints as 0.000 s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

OVERLOAD_SHORTFALL = 0.05
"""Served below (1 − this) × offered requests per second."""
QUEUE_GROWTH = 4.0
"""Median wait of the last fifth of arrivals ≥ this × that of the first fifth."""


def offered_rate(columns: Any) -> float | None:
    """Requests per second over the arrival span (None with fewer than two arrivals)."""
    arr = np.asarray(columns.get("arrival_ns", []), dtype=np.int64)
    if len(arr) < 2:
        return None
    span = (int(arr.max()) - int(arr.min())) / 1e9
    return len(arr) / span if span > 0 else None


def queue_growth(columns: Any) -> tuple[float, float] | None:
    """(median wait of the first fifth of arrivals, of the last fifth), seconds."""
    arr = np.asarray(columns.get("arrival_ns", []), dtype=np.int64)
    first = np.asarray(columns.get("first_scheduled_ns", []), dtype=np.int64)
    if len(arr) < 10 or len(first) != len(arr):
        return None
    order = np.argsort(arr, kind="stable")
    wait = (first[order] - arr[order]) / 1e9
    wait = np.where(first[order] >= 0, wait, np.inf)  # never scheduled: waited past the end
    k = len(arr) // 5
    return float(np.median(wait[:k])), float(np.median(wait[-k:]))


def overload_warning(cfg: Any, metrics: dict[str, Any], columns: Any) -> str | None:
    if cfg.workload.concurrency is not None:
        return None  # closed loop: saturation is the point
    offered = offered_rate(columns)
    served = metrics.get("request_throughput")
    growth = queue_growth(columns)
    if offered is None or served is None or growth is None:
        return None
    early, late = growth
    if served >= (1 - OVERLOAD_SHORTFALL) * offered or late < max(QUEUE_GROWTH * early, 1.0):
        return None
    return (
        f"overloaded: the workload offers {offered:.2f} req/s and this "
        f"deployment served {served:.2f} req/s; the queue grew all run (median wait "
        f"{early:.2f} s for the first fifth of arrivals, {late:.1f} s for the last), so the "
        "latencies measure the backlog, not the service. Lower the rate, or size the "
        "deployment with `tidal plan`."
    )


def profile_note(cfg: Any) -> str | None:
    kind = str(cfg.perf_model)
    if not kind.startswith("profile:"):
        return None
    path = Path(kind.removeprefix("profile:"))
    try:
        info = json.loads(path.read_text()).get("info") or {}
    except (OSError, ValueError):
        info = {}
    device = info.get("device") or "the machine that profiled it"
    if device == "cpu" and info.get("cpu"):
        device = f"cpu ({info['cpu']})"
    return (
        f"note: step times come from the profile {path.name}, measured on {device}; "
        f"'roofline tok/s' is the roofline of --gpu {cfg.gpu}, another machine."
    )


def precision_note(cfg: Any, metrics: dict[str, Any]) -> str | None:
    ttft = metrics.get("ttft_p50_s")
    if ttft is None or not 0 <= ttft < 5e-4:
        return None
    why = (
        " (tiny-llama is the real engine's 4-layer CPU test model: on a GPU's roofline its "
        "steps take microseconds)"
        if cfg.model == "tiny-llama"
        else ""
    )
    return (
        f"note: TTFT p50 is {ttft * 1e6:.0f} µs, below the table's 1 ms precision"
        f"{why}; summary.json has the exact values."
    )


def run_notes(cfg: Any, result: Any) -> list[str]:
    """The warnings and notes of one single-instance run, in the order to print them."""
    notes = [
        overload_warning(cfg, result.metrics, result.columns),
        profile_note(cfg),
        precision_note(cfg, result.metrics),
    ]
    return [n for n in notes if n]
