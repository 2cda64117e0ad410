"""Where the cells of an experiment run: in this process, on a local process pool, or on Ray.

Every executor maps a picklable top-level function over a list of inputs and yields
``(index, result)`` as results arrive (completion order); callers order the results themselves,
so what is written never depends on the executor. Simulations are deterministic functions of
their config, hence a cell gives the same result wherever it runs.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from tidal.core.errors import ConfigError
from tidal.core.orphan import die_with_parent

BACKENDS = ("process", "serial", "ray")


def default_workers() -> int:
    """One worker per CPU this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def run_serial(fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
    for i, item in enumerate(items):
        yield i, fn(item)


def run_process_pool(
    fn: Callable[[Any], Any], items: Sequence[Any], workers: int
) -> Iterator[tuple[int, Any]]:
    """A ``ProcessPoolExecutor`` with the ``spawn`` start method: forking a parent whose polars
    and BLAS thread pools are running can deadlock the child. At most ``2 × workers`` tasks are
    in flight, so an interrupted sweep leaves little queued work to cancel."""
    if not items:
        return
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(
        max_workers=min(workers, len(items)),
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(os.getpid(),),
    )
    pending: dict[Future[Any], int] = {}
    nxt = 0
    finished = False
    try:
        while nxt < len(items) or pending:
            while nxt < len(items) and len(pending) < 2 * workers:
                pending[pool.submit(fn, items[nxt])] = nxt
                nxt += 1
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield pending.pop(fut), fut.result()
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:
            _kill_pool(pool)


def _init_worker(parent: int) -> None:
    """A worker dies with its parent (:mod:`tidal.core.orphan`) and ignores Ctrl-C."""
    die_with_parent(parent)
    _ignore_sigint()


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the parent, which stops them (a terminal sends it to all)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _kill_pool(pool: ProcessPoolExecutor) -> None:
    """Stop an interrupted pool now: queued tasks are cancelled and running workers terminated
    (a cell's result is written only after it returns, so nothing half-done is kept)."""
    procs = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(timeout=5)
        if proc.is_alive():  # pragma: no cover - a worker ignoring SIGTERM
            proc.kill()
            proc.join()
    _release_manager(pool)


def _release_manager(pool: ProcessPoolExecutor) -> None:
    """With its workers terminated, the pool's manager thread can stay blocked on a result
    pipe nobody writes to, and CPython's exit hook joins every such thread: the process would
    never exit (seen: a test run that passed, then hung). Give it 5 s, then drop it from the
    hook's list; the thread dies with the process."""
    import concurrent.futures.process as cfp  # lazy: a private module, read on this path only

    thread = getattr(pool, "_executor_manager_thread", None)
    if thread is None:
        return
    thread.join(timeout=5)
    if thread.is_alive():
        cfp._threads_wakeups.pop(thread, None)  # type: ignore[attr-defined]


def run_ray(
    fn: Callable[[Any], Any], items: Sequence[Any], workers: int | None
) -> Iterator[tuple[int, Any]]:
    """Ray tasks, one per item. ``ray.init()`` joins the cluster named by ``RAY_ADDRESS`` when
    it is set (workers need tidal installed, and traces at the same path); otherwise it starts a
    local Ray with ``workers`` CPUs."""
    try:
        import ray  # lazy: optional dependency (ray)
    except ImportError:
        raise ConfigError(
            "backend",
            "ray is not installed",
            "pip install 'tidal[ray]', or use --backend process",
        ) from None
    if not items:
        return
    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init(log_to_driver=False)
        else:
            ray.init(num_cpus=workers, log_to_driver=False, include_dashboard=False)
    remote = ray.remote(num_cpus=1)(fn)
    pending = {remote.remote(item): i for i, item in enumerate(items)}
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), ray.get(ref)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


def run_cells(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    backend: str = "process",
    workers: int | None = None,
) -> Iterator[tuple[int, Any]]:
    """Dispatch to a backend; ``process`` with one worker (or one item) runs in this process."""
    if backend not in BACKENDS:
        raise ConfigError("backend", f"unknown value {backend!r}", f"valid: {', '.join(BACKENDS)}")
    if workers is not None and workers < 1:
        raise ConfigError("workers", f"must be >= 1, got {workers}")
    n = workers or default_workers()
    if backend == "ray":
        return run_ray(fn, items, workers)
    if backend == "serial" or n == 1 or len(items) <= 1:
        return run_serial(fn, items)
    return run_process_pool(fn, items, n)
