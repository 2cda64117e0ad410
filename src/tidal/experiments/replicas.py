"""A deployment of R identical replicas behind a router, simulated exactly in one event loop.

Each replica is a full serving instance (scheduler, KV cache, latency model) built from the same
:class:`~tidal.sim.config.SimulationConfig`, i.e. TP GPUs each. The simulator's event loop
already merges the step ends of several instances (docs/DESIGN.md §3); a request is routed when it
arrives, and fast-forward stops at every arrival, so the result is exact — the same per-request
timestamps as stepping every replica one step at a time.

Routers (deterministic, ties to the lowest index):

* ``round-robin`` — request i goes to replica i mod R, so each replica serves a fixed
  subsequence of the trace exactly as if it ran alone (a test checks this identity);
* ``least-loaded`` — the replica with the fewest unfinished requests (running + waiting) when
  the request arrives (join-the-shortest-queue, as Vidur's LOR global scheduler and vLLM's
  production router do); ties go to the first replica after the previous choice, cyclically
  (with lowest-index ties, replica 0 takes every request of a quiet period);
* ``prefix-aware`` — SGLang's / vLLM router's ``cache_aware`` policy on the replicas' actual
  prefix caches: while the load is balanced, the replica whose cache holds the longest prefix
  of the request, if that covers more than ``CACHE_THRESHOLD`` of the prompt, else the replica
  whose cache holds the least content; once the busiest replica has more than
  ``BALANCE_ABS`` requests over the idlest and more than ``BALANCE_REL`` times as many, the
  least-loaded one (defaults of both routers: 0.3, 64, 1.5). Without content (no prefix
  cache) it is ``least-loaded``.

Metrics are computed over the union of all requests (percentiles over every request, throughput
over the cluster's makespan). The roofline bound is R times one replica's. Integer scheduler
extras (counts) are summed over replicas, float extras averaged; extra tables are concatenated
with an ``instance`` column.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tidal.core.errors import ConfigError
from tidal.core.histogram import LogHistogram
from tidal.core.metrics import summarize
from tidal.core.request import Request
from tidal.engine.stats import PolicyStats
from tidal.hardware.calibration import (
    client_side_metrics,
    perf_model_source,
    perf_model_tables,
)
from tidal.hardware.gpus import get_gpu
from tidal.hardware.roofline import roofline_token_throughput
from tidal.sim.config import SimulationConfig
from tidal.sim.instance import SimInstance
from tidal.sim.recorder import RequestRecorder
from tidal.sim.run import SimResult, build_instance, load_requests
from tidal.sim.simulator import Simulation
from tidal.workload.base import RequestSet

ROUTERS = ("least-loaded", "round-robin", "prefix-aware")
CACHE_THRESHOLD = 0.3
BALANCE_ABS = 64
BALANCE_REL = 1.5


class SimulationStopped(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a ``stop`` check to end a simulation early (its outcome is already known)."""


def make_router(name: str, instances: list[SimInstance]) -> Callable[[Request], int]:
    if name == "round-robin":
        n = len(instances)
        return lambda req: req.request_id % n
    if name == "least-loaded":
        scheds = [inst.scheduler for inst in instances]
        n = len(scheds)
        last = [n - 1]

        def least_loaded(req: Request) -> int:
            best, best_load = 0, -1
            for j in range(1, n + 1):
                i = (last[0] + j) % n
                s = scheds[i]
                load = len(s.running) + len(s.waiting)
                if best_load < 0 or load < best_load:
                    best, best_load = i, load
            last[0] = best
            return best

        return least_loaded
    if name == "prefix-aware":
        return _prefix_aware(instances, make_router("least-loaded", instances))
    raise ConfigError("router", f"unknown value {name!r}", f"valid: {', '.join(ROUTERS)}")


def _merge_extras(per_replica: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    keys = {k for d in per_replica for k in d}
    for k in sorted(keys):
        vals = [d[k] for d in per_replica if k in d]
        if all(isinstance(v, bool) for v in vals) or not all(
            isinstance(v, int | float) for v in vals
        ):
            out[k] = vals[0]
        elif all(isinstance(v, int) for v in vals):
            out[k] = sum(vals)
        else:
            out[k] = float(np.mean(vals))
    return out


def _concat_tables(per_replica: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    names = [n for d in per_replica for n in d]
    for name in dict.fromkeys(names):
        parts = [(i, d[name]) for i, d in enumerate(per_replica) if name in d]
        cols: dict[str, Any] = {}
        for key in parts[0][1]:
            cols[key] = np.concatenate([np.asarray(t[key]) for _, t in parts])
        if "instance" not in cols:
            cols["instance"] = np.concatenate(
                [np.full(len(np.asarray(next(iter(t.values())))), i) for i, t in parts]
            )
        out[name] = cols
    return out


def _prefix_aware(
    instances: list[SimInstance], fallback: Callable[[Request], int]
) -> Callable[[Request], int]:
    scheds = [inst.scheduler for inst in instances]

    def route(req: Request) -> int:
        loads = [len(s.running) + len(s.waiting) for s in scheds]
        hi, lo = max(loads), min(loads)
        if req.content is None or (hi - lo > BALANCE_ABS and hi > BALANCE_REL * lo):
            return fallback(req)
        hits = [s.kv.match_prefix(req)[0] for s in scheds]  # a query: nothing is taken
        best = max(range(len(hits)), key=lambda i: (hits[i], -loads[i]))
        if hits[best] > CACHE_THRESHOLD * req.prompt_len:
            return best
        # blocks holding content: in use, or free but cached
        held = [
            s.kv.num_blocks - s.kv.num_free_blocks + s.kv.num_cached_free_blocks() for s in scheds
        ]
        return min(range(len(held)), key=lambda i: (held[i], loads[i]))

    return route


def run_replicated(
    cfg: SimulationConfig,
    replicas: int,
    router: str = "least-loaded",
    requests: RequestSet | None = None,
    stop: Callable[[RequestRecorder, int], None] | None = None,
) -> SimResult:
    """Simulate ``replicas`` copies of ``cfg``'s instance serving ``cfg``'s workload.

    ``stop(recorder, now_ns)``, if given, is called every few thousand events and may raise
    :class:`SimulationStopped` to end the run early (the planner does when an SLO is already
    certain to be missed)."""
    if replicas < 1:
        raise ConfigError("replicas", f"must be >= 1, got {replicas}")
    t0 = time.perf_counter()
    reqs = requests if requests is not None else load_requests(cfg)
    max_tokens = int((reqs.prompt_len + reqs.output_len).max())
    built = [build_instance(cfg, max_tokens, reqs.content is not None) for _ in range(replicas)]
    instances = [SimInstance(i, s, p, cfg.fast_forward) for i, (s, p, _) in enumerate(built)]
    recorder = RequestRecorder(reqs)
    route = make_router(router, instances) if replicas > 1 else None
    sim: Simulation

    def check(_: int) -> None:
        if stop is not None:
            stop(recorder, sim.now_ns)

    sim = Simulation(
        instances,
        reqs,
        recorder,
        cfg.workload.concurrency,
        route=route,
        progress=check if stop is not None else None,
    )
    sim.run()
    t_sim = time.perf_counter()
    cols = recorder.columns()
    itl = LogHistogram()
    for inst in instances:
        itl.merge(inst.itl)
    metrics = summarize(cols, cfg.slo.ttft_s, cfg.slo.tpot_s, itl)
    mem = built[0][2]
    metrics["roofline_token_throughput"] = replicas * roofline_token_throughput(
        cfg.model_spec(),
        get_gpu(cfg.gpu),
        cfg.tp,
        reqs.prompt_len,
        reqs.output_len,
        mem.kv_capacity_tokens,
        cfg.scheduler.max_seqs,
    )
    metrics.update(mem.summary())
    metrics["num_steps"] = sum(s.num_steps for s, _, _ in built)
    metrics["busy_fraction"] = float(
        np.mean([inst.busy_ns / max(sim.now_ns, 1) for inst in instances])
    )
    metrics["perf_model"] = built[0][1].name
    metrics["perf_model_source"] = perf_model_source(built[0][1])
    metrics.update(perf_model_tables(built[0][1]))
    metrics.update(client_side_metrics(built[0][1], cols))  # engine tables: client-side TTFT
    metrics["replicas"] = replicas
    metrics["num_gpus"] = replicas * cfg.tp
    metrics.update(_merge_extras([s.extra_metrics() for s, _, _ in built]))
    if reqs.content is not None:  # vLLM's prefix-cache counters, summed over the replicas
        from tidal.sim.cluster_metrics import CacheCounts

        counts = CacheCounts()
        for s, _, _ in built:
            counts.add(s.kv)
        metrics.update(counts.metrics(cfg.memory.prefix_caching))
    share = PolicyStats.total(s.stats() for s, _, _ in built).eb_time_share
    if share is not None:  # busy-time share over the replicas (not a mean of their shares)
        metrics["eb_time_share"] = share
    tables = _concat_tables(
        [
            {"timeline": inst.timeline_columns(), **s.extra_tables()}
            for inst, (s, _, _) in zip(instances, built, strict=True)
        ]
    )
    run_info = {
        "wall_s": time.perf_counter() - t0,
        "simulate_s": t_sim - t0,
        "num_events": sim.num_events,
    }
    deployment = {"replicas": replicas, "router": router, "num_gpus": replicas * cfg.tp}
    return SimResult(
        cfg, metrics, cols, run_info, {"tables": tables, "json": {"deployment": deployment}}
    )
