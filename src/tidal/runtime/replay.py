"""Open-loop replay on the real engine, in the caller's thread (``tidal fidelity``/``calibrate``).

Each request joins the scheduler once the clock (restarted at the call) reaches its
``arrival_ns``, as the simulator does; the call returns when all have finished. A step's period is
what the simulator calls its duration: from its start to the next step's start while steps run
back to back, else to the end of its loop iteration.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from tidal.core.clock import ThreadCPUClock, WallClock, make_clock
from tidal.core.request import Request
from tidal.hardware.perf import StepShape
from tidal.runtime.sampling import GREEDY, SamplingParams

if TYPE_CHECKING:
    from tidal.runtime.driver import EngineDriver

_SPIN_NS = 300_000
"""Sleep until this close to an arrival, then spin: ``time.sleep`` overshoots by ~0.1 ms."""


class StepRecord(NamedTuple):
    """One replayed step: start, period (ns, the simulator's step duration), batch shape, and
    the idle time before it (ns)."""

    start_ns: int
    period_ns: int
    shape: StepShape
    idle_ns: int = 0


def replay(
    driver: EngineDriver,
    requests: Sequence[Request],
    on_finish: Callable[[Request], None] | None = None,
    sampling: SamplingParams = GREEDY,
    steps: list[StepRecord] | None = None,
    clock: str = "wall",
) -> None:
    """Run ``requests`` open-loop: each joins the scheduler once the wall clock (restarted
    by the call) reaches its ``arrival_ns``; returns when all have finished. ``token_ids`` must be
    set (prompts); outputs run to ``max_output_len`` (EOS ignored, as the simulator does).

    ``steps`` receives a :class:`StepRecord` per step. Its period is what the simulator
    calls the step's duration: from this step's start to the next one's when they run back
    to back, else to the end of this step's loop iteration; ``idle_ns`` is how long the
    engine had been idle when the step started (0 when back to back).

    ``clock``: ``wall``, or ``cpu`` to time the replay by this thread's CPU time with idle
    gaps skipped (:class:`~tidal.core.clock.ThreadCPUClock`: a dedicated core's wall time,
    for measurements on a shared machine)."""
    sched, engine = driver.scheduler, driver.engine
    clk = make_clock(clock)
    engine.clock = driver.clock = clk
    prev = sched.on_finish
    sched.on_finish = on_finish
    order = sorted(requests, key=lambda r: r.arrival_ns)
    for r in order:
        if not sampling.greedy:
            driver.runner.set_sampling(r, sampling)
    i, n = 0, len(order)
    last: tuple[int, StepShape, int] | None = None  # the previous step, while back to back
    idle_since = -1  # when the engine ran out of work (-1: it has work)
    try:
        while i < n or sched.has_work():
            now = clk.now_ns()
            while i < n and order[i].arrival_ns <= now:
                sched.add_request(order[i])
                i += 1
            if not sched.has_work():
                if last is not None and steps is not None:
                    steps.append(StepRecord(last[0], now - last[0], last[1], last[2]))
                last = None
                if idle_since < 0:
                    idle_since = now
                if isinstance(clk, ThreadCPUClock):
                    clk.advance_to(order[i].arrival_ns)
                else:
                    _sleep_until(clk, order[i].arrival_ns)
                continue
            start = clk.now_ns()
            idle = start - idle_since if idle_since >= 0 else 0
            plan = engine.step()
            driver.num_steps += 1
            if plan is None:
                if not sched.running:
                    head = sched.waiting.peek()
                    raise RuntimeError(
                        f"request {head.request_id} ({head.num_tokens} tokens) cannot be "
                        f"admitted into an empty engine of {sched.kv.num_blocks} KV blocks"
                    )
                continue
            idle_since = -1
            if steps is not None:
                if last is not None:
                    steps.append(StepRecord(last[0], start - last[0], last[1], last[2]))
                last = (start, plan.shape(), idle)
        if last is not None and steps is not None:
            steps.append(StepRecord(last[0], clk.now_ns() - last[0], last[1], last[2]))
    finally:
        sched.on_finish = prev
        for r in order:
            driver.runner.release(r)


def _sleep_until(clock: WallClock, t_ns: int) -> None:
    while True:
        left = t_ns - clock.now_ns()
        if left <= 0:
            return
        if left > _SPIN_NS:
            time.sleep((left - _SPIN_NS) / 1e9)
