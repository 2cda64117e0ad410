"""Summary statistics of a trace (the definitions of ``shared/traces/README.md``).

For request traces (Azure, Mooncake, or any :class:`RequestSet`):

- ``mean_rate = (N − 1) / (t_last − t_first)``;
- ``iat_cv = sd(gaps)/mean(gaps)`` (population sd);
- ``idc_<w>s = var(c)/mean(c)`` (population variance) of the counts ``c`` in w-second bins
  ``[t_first + k·w, t_first + (k+1)·w)``, k = 0 … ⌊span/w⌋ (the last bin may be partial);
- ``peak_to_mean_<w>s = max(c)/mean(c)``;
- token statistics: mean and p50/p90/p99 (linear interpolation) and max.

For ServeGen the rate columns are summarised without sampling: ``clients``, ``windows``,
``mean_rate`` (mean over windows of the total rate), rate p5/p50/p95, peak/mean at the window
size, ``rate_weighted_cv`` (client CVs weighted by rate) and ``expected_requests``.
"""

from __future__ import annotations

import math
import os

import numpy as np

from tidal.core.errors import unknown_name
from tidal.core.units import NS_PER_S
from tidal.workload.base import RequestSet
from tidal.workload.servegen import ServeGenTable, read_servegen
from tidal.workload.traces import FORMATS, detect_format, load_azure, load_mooncake

BIN_WIDTHS_S = (1, 10, 60)
PEAK_WIDTHS_S = (1, 60)


def bin_stats(arrival_ns: np.ndarray, width_s: float) -> tuple[float, float, float]:
    """(mean, population variance, max) of the counts in ``width_s`` bins from the first
    arrival (sorted input), empty bins included: K = ⌊span/w⌋ + 1 bins, computed from the
    occupied bins only so that a long, sparse trace needs no K-sized array."""
    rel = arrival_ns - arrival_ns[0]
    _, counts = np.unique(rel // round(width_s * NS_PER_S), return_counts=True)
    k = float(rel[-1] // round(width_s * NS_PER_S)) + 1.0
    c = counts.astype(np.float64)
    mean = c.sum() / k
    return mean, max(float((c * c).sum() / k - mean * mean), 0.0), float(c.max())


def arrival_stats(arrival_ns: np.ndarray) -> dict[str, float | int]:
    n = len(arrival_ns)
    out: dict[str, float | int] = {"rows": n}
    span = float(arrival_ns[-1] - arrival_ns[0]) / NS_PER_S if n else 0.0
    out["span_s"] = span
    out["mean_rate"] = (n - 1) / span if span > 0 else math.nan
    gaps = np.diff(arrival_ns).astype(np.float64)
    out["iat_cv"] = float(gaps.std() / gaps.mean()) if n > 2 and gaps.mean() > 0 else math.nan
    stats = {
        w: bin_stats(arrival_ns, w) if n else (0.0, 0.0, 0.0)
        for w in sorted({*BIN_WIDTHS_S, *PEAK_WIDTHS_S})
    }
    for w in BIN_WIDTHS_S:
        mean, var, _ = stats[w]
        out[f"idc_{w}s"] = var / mean if mean > 0 else math.nan
    for w in PEAK_WIDTHS_S:
        mean, _, peak = stats[w]
        out[f"peak_to_mean_{w}s"] = peak / mean if mean > 0 else math.nan
    return out


def length_stats(prefix: str, x: np.ndarray) -> dict[str, float]:
    if len(x) == 0:
        return {f"{prefix}_{k}": math.nan for k in ("mean", "p50", "p90", "p99", "max")}
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return {
        f"{prefix}_mean": float(x.mean()),
        f"{prefix}_p50": float(p50),
        f"{prefix}_p90": float(p90),
        f"{prefix}_p99": float(p99),
        f"{prefix}_max": float(x.max()),
    }


def request_stats(rs: RequestSet) -> dict[str, float | int]:
    """Arrival and length statistics of any request set (flat dict)."""
    return {
        **arrival_stats(rs.arrival_ns),
        **length_stats("prompt", rs.prompt_len),
        **length_stats("output", rs.output_len),
    }


def servegen_stats(table: ServeGenTable) -> dict[str, float | int | str]:
    starts, window = np.unique(table.window_start_s, return_inverse=True)
    window = window.reshape(-1)
    rate = np.where(table.kind > 0, table.rate, 0.0)
    total = np.bincount(window, weights=rate, minlength=len(starts))
    mean = float(total.mean())
    p5, p50, p95 = np.percentile(total, [5, 50, 95])
    return {
        "model": table.model or "?",
        "clients": int(np.unique(table.client).size),
        "windows": len(starts),
        "window_s": table.window_s,
        "span_s": len(starts) * table.window_s,
        "mean_rate": mean,
        "rate_p5": float(p5),
        "rate_p50": float(p50),
        "rate_p95": float(p95),
        f"peak_to_mean_{table.window_s:g}s": float(total.max() / mean) if mean > 0 else math.nan,
        "rate_weighted_cv": float((rate * table.cv).sum() / rate.sum()) if rate.sum() else math.nan,
        "expected_requests": float(total.sum() * table.window_s),
    }


def trace_info(path: str | os.PathLike[str], fmt: str = "auto") -> dict[str, float | int | str]:
    """Statistics of a trace file as a flat ``{name: value}`` dict (module docstring)."""
    kind = detect_format(path) if fmt == "auto" else fmt
    if kind not in FORMATS:
        raise unknown_name("trace_format", kind, ("auto", *FORMATS))
    if kind == "servegen":
        return {"format": kind, **servegen_stats(read_servegen(path))}
    rs = load_azure(path) if kind == "azure" else load_mooncake(path)
    return {"format": kind, **request_stats(rs)}
