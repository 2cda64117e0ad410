"""Speculative parallel simulations for the planner (``tidal plan --workers N``).

The planner's search stays sequential — which option comes next, its capacity bound and each
bisection step depend on what was found before. A pool of worker processes runs ahead on the
simulations the search will probably ask for (every option's first capacity guess; in the
exhaustive mode, every simulation), and the search takes a prefetched result only when it asks
for exactly that (option, capacity, early stop). Simulations are deterministic functions of
their config, so the plan, every evaluation and their order are those of ``--workers 1``;
prefetches the search never asks for are wasted work, never part of the result.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from tidal.core.errors import ConfigError
from tidal.core.orphan import die_with_parent
from tidal.experiments.grid import set_dotted
from tidal.experiments.plan_options import certain_failure_stop
from tidal.experiments.replicas import SimulationStopped, run_replicated
from tidal.experiments.space import PlanSpec
from tidal.sim.config import SimulationConfig, load_config
from tidal.sim.run import SimResult, run_simulation
from tidal.workload.base import RequestSet

_WORKER: dict[str, Any] = {}


def simulate_at(
    cfg: SimulationConfig, capacity: int, spec: PlanSpec, requests: RequestSet, stop: Any
) -> SimResult:
    """One deployment of ``capacity`` units (replicas, or the spec's capacity key)."""
    if spec.capacity_key == "replicas":
        return run_replicated(cfg, capacity, spec.router, requests, stop)
    data = cfg.model_dump(mode="json")
    tmpl = spec.capacity_template
    value = tmpl.format(n=capacity, gpu=cfg.gpu, tp=cfg.tp) if tmpl else capacity
    set_dotted(data, spec.capacity_key, value)
    return run_simulation(load_config(data), requests)


def _init(spec: PlanSpec, targets: dict[str, float], requests: RequestSet, parent: int) -> None:
    """A worker's state; it dies with its parent (:mod:`tidal.core.orphan`)."""
    die_with_parent(parent)
    _WORKER.update(spec=spec, requests=requests, stop=certain_failure_stop(targets, requests))


def _task(args: tuple[SimulationConfig, int, bool]) -> tuple[str, Any]:
    """``("ok", result)``, ``("stopped", None)`` or ``("config", message)`` — outcomes, not
    exceptions, so that nothing depends on how an exception pickles."""
    cfg, capacity, early_stop = args
    w = _WORKER
    try:
        stop = w["stop"] if early_stop else None
        return "ok", simulate_at(cfg, capacity, w["spec"], w["requests"], stop)
    except SimulationStopped:
        return "stopped", None
    except ConfigError as err:
        return "config", str(err)


class PrefetchedConfigError(ConfigError):
    """A worker's ConfigError, with the worker's message verbatim."""

    def __init__(self, text: str) -> None:
        Exception.__init__(self, text)
        self.field, self.fix = "", ""


class Prefetcher:
    def __init__(
        self, workers: int, spec: PlanSpec, targets: dict[str, float], requests: RequestSet
    ) -> None:
        ctx = multiprocessing.get_context("spawn")  # forking polars/BLAS threads can deadlock
        self.pool = ProcessPoolExecutor(
            workers,
            mp_context=ctx,
            initializer=_init,
            initargs=(spec, targets, requests, os.getpid()),
        )
        self.futures: dict[tuple[int, int, bool], Future[tuple[str, Any]]] = {}

    def submit(self, index: int, cfg: SimulationConfig, capacity: int, early_stop: bool) -> None:
        key = (index, capacity, early_stop)
        if key not in self.futures:
            self.futures[key] = self.pool.submit(_task, (cfg, capacity, early_stop))

    def speculate(self, planner: Any, order: list[Any], exhaustive: bool) -> None:
        """Queue what the planner's search will probably ask for: each option's first capacity
        guess, or (exhaustive) every capacity."""
        top = planner.spec.max_replicas
        for opt in order:
            caps = range(1, top + 1) if exhaustive else [min(planner.first_guess(opt), top)]
            for c in caps:
                self.submit(opt.index, opt.config, c, not exhaustive)

    def take(self, index: int, capacity: int, early_stop: bool) -> SimResult | None:
        """The prefetched result (raising as the simulation did), or None if none was made."""
        fut = self.futures.pop((index, capacity, early_stop), None)
        if fut is None:
            return None
        status, payload = fut.result()
        if status == "stopped":
            raise SimulationStopped("prefetched")
        if status == "config":
            raise PrefetchedConfigError(payload)
        result: SimResult = payload
        return result

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
