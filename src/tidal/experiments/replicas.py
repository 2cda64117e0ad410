"""A deployment of R identical replicas behind a router, simulated exactly in one event loop.

Each replica is a full serving instance (scheduler, KV cache, latency model) built from the same
:class:`~tidal.sim.config.SimulationConfig`, i.e. TP GPUs each. The simulator's event loop
already merges the step ends of several instances (docs/DESIGN.md §3); a request is routed when it
arrives, and fast-forward stops at every arrival, so the result is exact — the same per-request
timestamps as stepping every replica one step at a time.

Routers (deterministic, ties to the lowest index; ``sim/routers.py``): ``round-robin``,
``least-loaded``, ``prefix-aware``.

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
from tidal.engine.spec_pool import spec_metrics
from tidal.engine.stats import PolicyStats
from tidal.hardware.calibration import (
    client_side_metrics,
    perf_model_source,
    perf_model_tables,
)
from tidal.hardware.gpus import get_gpu
from tidal.hardware.roofline import roofline_token_throughput
from tidal.sim.cluster_metrics import CacheCounts
from tidal.sim.config import SimulationConfig
from tidal.sim.instance import SimInstance
from tidal.sim.recorder import RequestRecorder
from tidal.sim.routers import (  # noqa: F401  (re-exported: the old import path)
    BALANCE_ABS,
    BALANCE_REL,
    CACHE_THRESHOLD,
    ROUTERS,
    _prefix_aware,
    make_router,
)
from tidal.sim.run import SimResult, build_instance, load_requests
from tidal.sim.simulator import Simulation
from tidal.sim.speculation import base_perf
from tidal.workload.base import RequestSet


class SimulationStopped(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a ``stop`` check to end a simulation early (its outcome is already known)."""


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
    if cfg.deployment is not None and cfg.deployment.disaggregated:
        raise ConfigError(
            "deployment",
            "replicated runs (the planner) do not search disaggregated deployments yet",
            "drop the deployment section, or simulate it with tidal simulate",
        )
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
        cfg.tp * cfg.pipeline_parallel_size,
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
    target = base_perf(built[0][1])
    metrics["perf_model_source"] = perf_model_source(target)
    metrics.update(perf_model_tables(target))
    metrics.update(client_side_metrics(target, cols))  # engine tables: client-side TTFT
    metrics["replicas"] = replicas
    metrics["num_gpus"] = replicas * cfg.tp * cfg.pipeline_parallel_size
    metrics.update(_merge_extras([s.extra_metrics() for s, _, _ in built]))
    if reqs.content is not None:  # vLLM's prefix-cache counters, summed over the replicas

        counts = CacheCounts()
        for s, _, _ in built:
            counts.add(s.kv)
        metrics.update(counts.metrics(cfg.memory.prefix_caching))
    total = PolicyStats.total(s.stats() for s, _, _ in built)
    share = total.eb_time_share
    if share is not None:  # busy-time share over the replicas (not a mean of their shares)
        metrics["eb_time_share"] = share
    if cfg.speculative is not None:  # the counters summed, the ratios of the sums
        metrics.update(spec_metrics(total.counters, cfg.speculative.num_speculative_tokens))
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
    gpus = replicas * cfg.tp * cfg.pipeline_parallel_size
    deployment = {"replicas": replicas, "router": router, "num_gpus": gpus}
    return SimResult(
        cfg, metrics, cols, run_info, {"tables": tables, "json": {"deployment": deployment}}
    )
