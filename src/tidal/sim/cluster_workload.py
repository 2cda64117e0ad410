"""Statistics of a cluster run's whole workload that the controller needs before the first
event: each request's same-model successor (fast-forward horizons) and per-model rates, lengths
and mean load (static placements; :mod:`tidal.sim.cluster_run`)."""

from __future__ import annotations

import numpy as np

from tidal.cluster.config import ClusterConfig
from tidal.cluster.models import served_models, service_ms
from tidal.cluster.topology import parse_cluster
from tidal.core.units import INF_NS, NS_PER_S
from tidal.workload.base import RequestSet
from tidal.workload.concurrency import window_concurrency


def next_arrivals(rs: RequestSet, num_models: int) -> tuple[np.ndarray, list[int]]:
    """Each request's same-model successor's arrival (INF_NS: none) and each model's first."""
    model = rs.extra["model"]
    nxt = np.full(len(rs), INF_NS, np.int64)
    first = []
    for m in range(num_models):
        idx = np.flatnonzero(model == m)
        nxt[idx[:-1]] = rs.arrival_ns[idx[1:]]
        first.append(int(rs.arrival_ns[idx[0]]) if len(idx) else INF_NS)
    return nxt, first


def workload_stats(
    cfg: ClusterConfig, rs: RequestSet, service: list[tuple[float, float]] | None = None
) -> list[dict[str, float]]:
    """Per model: request rate over the replay, mean prompt and output lengths, and mean
    in-flight load with the artifact's service times (§2.1) — what static placements size by;
    ``service``: (prefill ms, decode ms/token) per model instead (speculation's,
    :func:`tidal.sim.cluster_spec.service_times`)."""
    topo = parse_cluster(cfg.spec)
    models = served_models(
        cfg.models, topo.gpu, topo.gpus_per_node, cfg.page_mib * 2**20, cfg.block_size,
        cfg.unit_pools,
    )
    t = rs.arrival_ns / NS_PER_S
    span = max(float(t.max() - t.min()), 1.0) if len(t) else 1.0
    out = []
    model = rs.extra["model"]
    for m in models:
        sel = model == m.index
        pre, dec = service_ms(m.spec) if service is None else service[m.index]
        svc = (pre + rs.output_len[sel] * dec) / 1000.0
        if "call_ns" in rs.extra:  # augmented: a request stays in flight during its calls
            svc = svc + rs.extra["call_ns"][sel] / NS_PER_S
        avg, _ = window_concurrency(t[sel] - t.min() if len(t) else t[sel], svc, span, 1)
        n = int(sel.sum())
        out.append(
            {
                "rate": n / span,
                "mean_prompt": float(rs.prompt_len[sel].mean()) if n else 0.0,
                "mean_output": float(rs.output_len[sel].mean()) if n else 0.0,
                "concurrency": float(avg[0]),
            }
        )
    return out
