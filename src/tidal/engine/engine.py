"""``Engine``: one instance's step loop, schedule → execute → update (DESIGN.md §1).

The real engine calls :meth:`step` in a loop and stamps wall time; the simulator drives the
same scheduler from its event loop (``tidal.sim``), adding exact fast-forward.

The engine also keeps the CPU time of its own phases (``schedule_ns``, ``execute_ns``,
``update_ns``, summed over steps; ``time.perf_counter_ns``), so the scheduler's overhead can be
reported as a share of step time.
"""

from __future__ import annotations

import time

from tidal.core.clock import Clock, VirtualClock
from tidal.engine.executor import Executor, StepResult
from tidal.engine.plan import StepPlan
from tidal.engine.scheduler import Scheduler


class Engine:
    def __init__(self, scheduler: Scheduler, executor: Executor, clock: Clock) -> None:
        self.scheduler = scheduler
        self.executor = executor
        self.clock = clock
        self.last_result: StepResult | None = None
        self.schedule_ns = 0
        self.execute_ns = 0
        self.update_ns = 0

    def step(self) -> StepPlan | None:
        """Run one step; returns its plan, or None when there was nothing to run."""
        t0 = time.perf_counter_ns()
        start = self.clock.now_ns()
        plan = self.scheduler.schedule(start)
        t1 = time.perf_counter_ns()
        self.schedule_ns += t1 - t0
        if plan.is_empty:
            return None
        result = self.executor.execute(plan, self.scheduler)
        self.last_result = result
        if isinstance(self.clock, VirtualClock):
            self.clock.advance_to(start + result.duration_ns)
        t2 = time.perf_counter_ns()
        self.execute_ns += t2 - t1
        self.scheduler.update(plan, self.clock.now_ns())
        self.update_ns += time.perf_counter_ns() - t2
        return plan
