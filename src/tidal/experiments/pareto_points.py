"""The points of ``tidal plan --pareto`` (:mod:`tidal.experiments.pareto`): one simulation per
(option, load), run in order or on a process pool, each written under
``DIR/pareto_simulations/<key>.json`` as it finishes (key: a SHA-256 prefix of the task — full
config, replicas, router) and reused by a rerun whose task is the same: an interrupted plan
resumes. Simulations are deterministic functions of their config, so the points are the same for
any number of workers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidal.core.errors import ConfigError
from tidal.core.io import atomic_write
from tidal.core.orphan import die_with_parent
from tidal.experiments.replicas import run_replicated
from tidal.sim.config import load_config
from tidal.sim.disagg import run_disaggregated
from tidal.sim.run import load_requests

SIMS_DIR = "pareto_simulations"
Task = tuple[dict[str, Any], int, str]
"""(config, replicas, router)."""

_REQUESTS: dict[str, Any] = {}


def simulate_point(task: Task) -> dict[str, Any]:
    """Metrics of one point (scalars only): ``task`` = (config, replicas, router). A config
    the simulator refuses gives ``{"error": message}``."""

    data, replicas, router = task
    try:
        cfg = load_config(data)
        wkey = json.dumps(cfg.workload.model_dump(mode="json"), sort_keys=True)
        if wkey not in _REQUESTS:
            _REQUESTS.clear()
            _REQUESTS[wkey] = load_requests(cfg)
        reqs = _REQUESTS[wkey]
        if cfg.deployment is not None and cfg.deployment.disaggregated:
            res = run_disaggregated(cfg, reqs)
        else:
            res = run_replicated(cfg, replicas, router, reqs)
    except ConfigError as err:
        return {"error": str(err)}
    return {k: v for k, v in res.metrics.items() if v is None or isinstance(v, bool | int | float)}


def _init_worker(parent: int) -> None:

    die_with_parent(parent)


def _key(task: Task) -> str:
    text = json.dumps(task, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def run_points(
    tasks: list[Task],
    workers: int,
    out_dir: Path | None,
    on_point: Callable[[int, dict[str, Any]], None] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Each task's metrics (in task order) and how many were reused from ``out_dir``."""

    results: dict[int, dict[str, Any]] = {}
    todo = []
    for i, t in enumerate(tasks):
        path = out_dir / SIMS_DIR / f"{_key(t)}.json" if out_dir else None
        rec = _read(path) if path else None
        if rec is not None and rec.get("task") == json.loads(json.dumps(t, default=str)):
            results[i] = rec["metrics"]
        else:
            todo.append(i)
    reused = len(results)

    def done(i: int, m: dict[str, Any]) -> None:
        results[i] = m
        if out_dir is not None:
            body = json.dumps({"task": tasks[i], "metrics": m}, sort_keys=True, default=str)
            path = out_dir / SIMS_DIR / f"{_key(tasks[i])}.json"
            atomic_write(path, lambda p: p.write_text(body))
        if on_point is not None:
            on_point(i, m)

    if workers <= 1 or len(todo) <= 1:
        for i in todo:
            done(i, simulate_point(tasks[i]))
    else:
        _pool_run(tasks, todo, workers, done)
    return [results[i] for i in range(len(tasks))], reused


def _pool_run(
    tasks: list[Any], todo: list[int], workers: int, done: Callable[[int, dict[str, Any]], None]
) -> None:
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = multiprocessing.get_context("spawn")  # forking polars/BLAS threads can deadlock
    with ProcessPoolExecutor(
        workers, mp_context=ctx, initializer=_init_worker, initargs=(os.getpid(),)
    ) as pool:
        futs = {pool.submit(simulate_point, tasks[i]): i for i in todo}
        for fut in as_completed(futs):
            done(futs[fut], fut.result())


def _read(path: Path) -> dict[str, Any] | None:
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None
