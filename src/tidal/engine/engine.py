"""``Engine``: one instance's step loop, schedule → execute → update (DESIGN.md §1).

The real engine calls :meth:`step` in a loop and stamps wall time; the simulator drives the
same scheduler from its event loop (``tidal.sim``), adding exact fast-forward.
"""

from __future__ import annotations

from tidal.core.clock import Clock, VirtualClock
from tidal.engine.executor import Executor
from tidal.engine.plan import StepPlan
from tidal.engine.scheduler import Scheduler


class Engine:
    def __init__(self, scheduler: Scheduler, executor: Executor, clock: Clock) -> None:
        self.scheduler = scheduler
        self.executor = executor
        self.clock = clock

    def step(self) -> StepPlan | None:
        """Run one step; returns its plan, or None when there was nothing to run."""
        start = self.clock.now_ns()
        plan = self.scheduler.schedule(start)
        if plan.is_empty:
            return None
        result = self.executor.execute(plan, self.scheduler)
        if isinstance(self.clock, VirtualClock):
            self.clock.advance_to(start + result.duration_ns)
        self.scheduler.update(plan, self.clock.now_ns())
        return plan
