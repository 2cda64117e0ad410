"""In-flight load (concurrency) of a request stream per time window (docs/research/warmserve.md
§2.1).

A request is in flight from its arrival ``a`` to ``a + s`` (``s`` its service time). For each
window ``[kW, (k+1)W)``:

* ``avg_k = (1/W) ∫ inflight(t) dt`` over the window;
* ``peak_k = max`` in-flight count right after an arrival inside the window (0 without one),
  which is what the runtime can observe (the artifact records the maximum at arrivals).

At equal times departures are applied before arrivals (the artifact sorts ``(time, ±1)``).
"""

from __future__ import annotations

import numpy as np


def window_concurrency(
    arrival_s: np.ndarray, service_s: np.ndarray, window_s: float, num_windows: int
) -> tuple[np.ndarray, np.ndarray]:
    """(avg, peak) arrays of length ``num_windows`` for windows starting at 0."""
    a = np.asarray(arrival_s, dtype=np.float64)
    s = np.asarray(service_s, dtype=np.float64)
    avg = np.zeros(num_windows)
    peak = np.zeros(num_windows)
    if len(a) == 0 or num_windows == 0:
        return avg, peak
    t = np.concatenate([a, a + s])
    d = np.concatenate([np.ones(len(a), np.int64), -np.ones(len(a), np.int64)])
    order = np.lexsort((d, t))
    ts, ds = t[order], d[order]
    v = np.cumsum(ds)
    # F(ts[j]) = ∫_{ts[0]}^{ts[j]} inflight; inflight is 0 before ts[0].
    seg = v[:-1] * np.diff(ts)
    f = np.concatenate([[0.0], np.cumsum(seg)])
    edges = np.arange(num_windows + 1) * window_s
    idx = np.searchsorted(ts, edges, side="right") - 1
    safe = np.maximum(idx, 0)
    fe = np.where(idx >= 0, f[safe] + v[safe] * (edges - ts[safe]), 0.0)
    avg = np.diff(fe) / window_s
    arr = ds > 0
    win = np.floor(ts[arr] / window_s).astype(np.int64)
    ok = (win >= 0) & (win < num_windows)
    np.maximum.at(peak, win[ok], v[arr][ok].astype(np.float64))
    return avg, peak
