"""Shared test factories (in the manner of vLLM's tests/v1/core/utils.py)."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from hypothesis import settings

import tidal.cluster.registries  # noqa: F401  (tests build any registered policy by name)
from tidal.core.kv import KVBlockManager
from tidal.core.request import Request
from tidal.engine.build import build_scheduler
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.hardware.perf import LinearPerfModel
from tidal.sim.instance import SimInstance
from tidal.sim.recorder import RequestRecorder
from tidal.sim.simulator import Simulation
from tidal.workload.base import RequestSet

settings.register_profile("ci", deadline=None, derandomize=True, max_examples=60)
settings.register_profile("dev", deadline=None, max_examples=30)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def make_scheduler(
    num_blocks: int = 1000,
    block_size: int = 16,
    token_budget: int = 512,
    max_seqs: int = 64,
    watermark: float = 0.0,
    batching: str = "mb",
) -> Scheduler:
    kv = KVBlockManager(num_blocks, block_size, watermark)
    return build_scheduler(SchedulerConfig(token_budget, max_seqs), kv, batching)


def make_request(rid: int, prompt: int, output: int, arrival_ns: int = 0) -> Request:
    return Request(rid, arrival_ns, prompt, output)


def unit_perf() -> LinearPerfModel:
    """1 ms per step plus 1 µs per prefill token and per decode request; no context term."""
    return LinearPerfModel(1e-3, 1e-6, 1e-3, 1e-6, kappa=0.0)


def simulate(
    requests: RequestSet,
    scheduler: Scheduler,
    perf=None,
    fast_forward: bool = True,
    concurrency: int | None = None,
) -> tuple[RequestRecorder, Simulation, SimInstance]:
    inst = SimInstance(0, scheduler, perf or unit_perf(), fast_forward)
    rec = RequestRecorder(requests)
    sim = Simulation([inst], requests, rec, concurrency)
    sim.run()
    return rec, sim, inst


def request_set(arrival_s, prompt, output) -> RequestSet:
    return RequestSet(
        (np.asarray(arrival_s, dtype=np.float64) * 1e9).round().astype(np.int64),
        np.asarray(prompt, dtype=np.int64),
        np.asarray(output, dtype=np.int64),
    )


def traces_available() -> bool:
    """Whether ``shared/traces`` (or ``$TIDAL_TRACES_DIR``) is reachable from here."""
    from tidal.core.errors import ConfigError
    from tidal.workload.paths import traces_dir

    try:
        traces_dir()
    except ConfigError:
        return False
    return True


needs_traces = pytest.mark.skipif(
    not traces_available(), reason="shared/traces not found (set TIDAL_TRACES_DIR)"
)


def _live_children() -> list[str]:
    """This process's live child processes, as ``pid cmdline`` (Linux /proc; else empty)."""
    me, out = str(os.getpid()), []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[1] == me and fields[0] != "Z":
                pid = stat.split("/")[2]
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                out.append(f"{pid} {cmd[:120]}")
        except (OSError, IndexError):
            continue
    return out


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Name what could keep the run alive after its last test (a child process holding the
    output, or a non-daemon thread the interpreter joins at exit), so a CI run that does not
    end says why."""
    import threading

    threads = [
        t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon
    ]
    children = _live_children()
    if threads or children:
        print(f"\nstill alive after the tests: threads {threads}, child processes {children}")
