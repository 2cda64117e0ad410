"""A cluster run's ServeGen workload as a stream (issue 19: memory independent of the span).

:func:`streamed_workload` gives the run a request set whose columns are generated as the clock
advances (:mod:`tidal.workload.mixstream`, :mod:`tidal.workload.stream`): the same requests as
:func:`tidal.sim.cluster_run.cluster_workload`, so the same results. The controller needs the
whole workload's statistics before the first event (:func:`tidal.sim.cluster_run.workload_stats`);
:func:`stream_stats` computes them in a first pass over an identical stream, with the same
floating-point operations in the same order, so they are bit-identical:

- counts, and the prompt and output sums (integers: exact in any order; means = sum / n);
- the mean in-flight load over ``[0, span]``: :func:`tidal.workload.concurrency.window_concurrency`
  sorts the model's arrival (+1) and departure (−1) events by (time, sign) and accumulates
  ``F_{j+1} = F_j + v_j·(t_{j+1} − t_j)`` with ``np.cumsum`` (sequential); :class:`_Load` does
  the same accumulation a piece at a time, releasing the events before the piece's last arrival
  (every later event is at or after it) and carrying the rest. Events at equal (time, sign) add
  ``v·0`` whatever their order, so sorting each piece alone gives the same sums.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tidal.cluster.config import ClusterConfig
from tidal.cluster.models import served_models, service_ms
from tidal.cluster.topology import parse_cluster
from tidal.core.units import NS_PER_S, s_to_ns
from tidal.sim.cluster_spec import service_times, spec_capacities
from tidal.sim.config import SimulationConfig
from tidal.sim.single import rng_streams
from tidal.workload.base import RequestSet
from tidal.workload.mixstream import MixStream
from tidal.workload.multimodel import read_aggregate_rates
from tidal.workload.paths import resolve_trace
from tidal.workload.stream import LazyColumn, streamed_request_set


def streams(cfg: SimulationConfig) -> bool:
    """Whether a cluster run's workload is streamed: the plain ServeGen mix."""
    c = cfg.cluster
    return c is not None and c.mix.kind == "servegen" and c.mix.augmented is None


def mix_stream(cfg: SimulationConfig, rows: int = 8192) -> MixStream:
    """The run's ServeGen mix as a stream (the workload generator of the seed, fresh)."""
    c = cfg.cluster
    assert c is not None
    topo = parse_cluster(c.spec)
    num_models = len(
        served_models(
            c.models, topo.gpu, topo.gpus_per_node, c.page_mib * 2**20, c.block_size, c.unit_pools
        )
    )
    path = resolve_trace(cfg.workload.trace) if cfg.workload.trace else None
    rng = rng_streams(cfg.seed)["workload"]
    rates = read_aggregate_rates(path)
    return MixStream(c.mix, num_models, rng, rates, shift_ns=s_to_ns(c.warmup_s), rows=rows)


class _Load:
    """One model's ∫ in-flight dt, accumulated as ``window_concurrency`` does (module docstring)."""

    def __init__(self) -> None:
        self.pend_t = np.zeros(0)
        self.pend_d = np.zeros(0, np.int64)
        self.last: tuple[float, int, float] | None = None
        """(time, in-flight after it, F at it) of the last released event."""

    def add(self, a: np.ndarray, s: np.ndarray, cut: float) -> None:
        t = np.concatenate([self.pend_t, a, a + s])
        d = np.concatenate([self.pend_d, np.ones(len(a), np.int64), -np.ones(len(a), np.int64)])
        early = t < cut
        self.pend_t, self.pend_d = t[~early], d[~early]
        self._run(t[early], d[early])

    def _run(self, t: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sorted event times, in-flight after each and F at each (the carried event first)."""
        order = np.lexsort((d, t))
        ts, v = t[order], np.cumsum(d[order])
        if self.last is None:
            f = np.concatenate([[0.0], np.cumsum(v[:-1] * np.diff(ts))]) if len(ts) else ts
        else:
            t0, v0, f0 = self.last
            ts, v = np.concatenate([[t0], ts]), np.concatenate([[v0], v0 + v])
            f = np.cumsum(np.concatenate([[f0], v[:-1] * np.diff(ts)]))
        if len(ts):
            self.last = (float(ts[-1]), int(v[-1]), float(f[-1]))
        return ts, v, f

    def average(self, span: float) -> float:
        """Mean in-flight over ``[0, span]`` (every arrival is at most ``span``)."""
        ts, v, f = self._run(self.pend_t, self.pend_d)
        i = int(np.searchsorted(ts, span, side="right")) - 1
        if i < 0:
            return 0.0
        fe = f[i] + v[i] * (span - ts[i])
        return float((fe - 0.0) / span)  # F at 0 is 0: nothing is in flight before t = 0


def stream_stats(
    c: ClusterConfig, stream: MixStream, service: list[tuple[float, float]] | None = None
) -> list[dict[str, float]]:
    """``workload_stats(c, requests, service)`` of the stream's requests, without holding
    them."""
    topo = parse_cluster(c.spec)
    models = served_models(
            c.models, topo.gpu, topo.gpus_per_node, c.page_mib * 2**20, c.block_size, c.unit_pools
        )
    k = len(models)
    count, prompt, output = [0] * k, [0] * k, [0] * k
    loads = [_Load() for _ in range(k)]
    service = service or [service_ms(m.spec) for m in models]
    t_min: float | None = None
    t_max = 0.0
    for t_ns, p, o, model, _ in stream.releases():
        t = t_ns / NS_PER_S
        if t_min is None:
            t_min = float(t[0])
        t_max = float(t[-1])
        rel = t - t_min
        cut = float(rel[-1])
        for m in models:
            sel = model == m.index
            pre, dec = service[m.index]
            loads[m.index].add(rel[sel], (pre + o[sel] * dec) / 1000.0, cut)
            count[m.index] += int(np.count_nonzero(sel))
            prompt[m.index] += int(p[sel].sum())
            output[m.index] += int(o[sel].sum())
    span = max(t_max - t_min, 1.0) if t_min is not None else 1.0
    out = []
    for i in range(k):
        n = count[i]
        out.append(
            {
                "rate": n / span,
                "mean_prompt": prompt[i] / n if n else 0.0,
                "mean_output": output[i] / n if n else 0.0,
                "concurrency": loads[i].average(span) if n else 0.0,
            }
        )
    return out


def streamed_workload(
    cfg: SimulationConfig,
) -> tuple[RequestSet, LazyColumn, list[int], list[dict[str, float]], dict[str, Any]]:
    """The run's requests (streamed), the ``next`` column (each request's same-model successor),
    every model's first arrival, the workload statistics, and shares and description."""
    c = cfg.cluster
    assert c is not None
    stats = stream_stats(c, mix_stream(cfg))
    caps = spec_capacities(cfg, stats)
    if any(caps):  # speculating models: their load at speculation's decode rate (2nd pass)
        stats = stream_stats(c, mix_stream(cfg), service_times(cfg, caps))
    stream = mix_stream(cfg)
    first = stream.next_arrivals()
    source = f"{stream.source}; +{c.warmup_s:g} s warm-up"
    rs, nxt = streamed_request_set(stream.n, iter(stream.releases()), source)
    meta = {"shares": stream.shares, "description": stream.description}
    return rs, nxt, first, stats, meta
