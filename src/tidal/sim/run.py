"""Build a simulation from a :class:`SimulationConfig`, run it, and summarise it: one instance
(:mod:`tidal.sim.single`), a cluster (:mod:`tidal.sim.cluster_run`) or a run after warm-up
requests (:mod:`tidal.sim.phased`)."""

from __future__ import annotations

from collections.abc import Callable

from tidal.sim.cluster_run import cluster_workload, run_cluster
from tidal.sim.config import SimulationConfig
from tidal.sim.disagg import run_disaggregated
from tidal.sim.phased import run_with_warmup
from tidal.sim.single import (
    SEED_STREAMS,
    SimResult,
    build_instance,
    check_host_tier,
    host_cache_blocks,
    load_instance_requests,
    memory_plan,
    rng_streams,
    run_single,
)
from tidal.workload.base import RequestSet

__all__ = [
    "SEED_STREAMS",
    "SimResult",
    "build_instance",
    "check_host_tier",
    "host_cache_blocks",
    "load_requests",
    "memory_plan",
    "rng_streams",
    "run_simulation",
]
"""The one-instance helpers are importable from here as before the split."""


def load_requests(cfg: SimulationConfig) -> RequestSet:
    """The run's requests: the cluster's mix, or one instance's workload."""
    if cfg.cluster is not None:
        return cluster_workload(cfg).requests
    return load_instance_requests(cfg)


def run_simulation(
    cfg: SimulationConfig,
    requests: RequestSet | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Run ``cfg`` on ``requests`` (default: its workload): a cluster, a run after warm-up
    requests, or one instance."""
    if cfg.cluster is not None:
        return run_cluster(cfg, requests, progress)
    if cfg.deployment is not None and cfg.deployment.disaggregated:
        return run_disaggregated(cfg, requests, progress)
    if cfg.workload.warmup_requests:
        return run_with_warmup(cfg, cfg.workload.warmup_requests, requests)
    return run_single(cfg, requests, progress)
