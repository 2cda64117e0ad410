"""``Engine``: one instance's step loop, schedule → execute → commit (docs/DESIGN.md §1).

Both backends run this loop; only the executor differs (the simulator's cost model with exact
fast-forward, :class:`~tidal.engine.executor.ModelledExecutor`, or the runtime's PyTorch model
runner). One step:

1. ``plan = scheduler.schedule(now)`` — decide; an empty plan means the engine is idle;
2. ``output = executor.execute(plan, now, idle)`` — the step (or, fast-forwarded,
   ``plan.num_steps`` identical steps) ends at ``now + output.duration_ns``. Before a
   pure-decode step of an executor that can fast-forward, the engine asks the scheduler how many
   times the plan repeats (``repeatable_steps``) and until when no external event can change it
   (:attr:`Engine.next_event_ns`), and passes both to the executor;
3. ``scheduler.update(plan, output, end)`` — commit: counters advance, the sampled tokens are
   checked against every stop rule, requests finish, and the engine state emits its events.

The simulator drives the loop from its event queue (:meth:`start` when work arrives at an idle
engine, :meth:`on_step_end` at each step-end event); the runtime calls :meth:`step`, which runs
the three phases back to back on its clock and keeps their CPU time (``schedule_ns``,
``execute_ns``, ``update_ns``, summed over steps; ``time.perf_counter_ns``) so that the
scheduler's overhead can be reported as a share of step time.

**Scheduling one step ahead** (:attr:`Engine.schedules_ahead`; vLLM's async scheduling, on by
default from 0.14, and SGLang's overlap scheduler): the engine core plans step N + 1 as soon as
step N is launched, before N ends, and reads its input queue only between steps
(``EngineCore.step_with_batch_queue`` and ``run_busy_loop`` in vLLM's
``vllm/v1/engine/core.py``; ``Scheduler.event_loop_overlap`` in SGLang). A request that
arrives while step N runs therefore reaches the scheduler after N + 1 was planned, and is
first scheduled into N + 2. :meth:`submit` holds such requests in :attr:`Engine.inbox` and
:meth:`on_step_end` hands them to the scheduler right after it planned the next step (or
before, when that plan is empty: the engine core then blocks on its input queue and
schedules at once). An idle engine sees an arrival at once, as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tidal.core.clock import Clock, VirtualClock
from tidal.core.request import Request
from tidal.core.units import INF_NS
from tidal.engine.executor import Executor
from tidal.engine.plan import StepOutput, StepPlan
from tidal.engine.scheduler import Scheduler


def _never() -> int:
    return INF_NS


class Engine:
    def __init__(
        self,
        scheduler: Scheduler,
        executor: Executor,
        clock: Clock | None = None,
        on_idle: Callable[[int], None] | None = None,
        on_sample: Callable[[int, StepPlan], None] | None = None,
        sample_at: int = INF_NS,
    ) -> None:
        self.scheduler = scheduler
        self.executor = executor
        self.clock: Clock = clock if clock is not None else VirtualClock()
        self.fast_forward = executor.fast_forward
        self.next_event_ns: Callable[[], int] = _never
        """Time of the next external event that could change the schedule (arrival, tool-call
        return, control tick); set by the simulation. Fast-forwarded runs stop before it."""
        self.plan: StepPlan | None = None
        """The step in flight (None while idle)."""
        self.output = StepOutput()
        """What the step in flight (or the last one) produced: its duration, and the runtime's
        sampled tokens."""
        self.busy = False
        self.start_ns = 0
        self.end_ns = 0
        """Start and end of the step in flight."""
        self.idle_since = 0
        """When the engine last ran out of work."""
        self.busy_ns = 0
        """Time spent in committed steps."""
        self.on_idle = on_idle
        """Called when a schedule at the given time found nothing to run."""
        self.on_sample = on_sample
        """Called with a step's start time and plan when the step starts at or after
        :attr:`sample_at` (the callee moves ``sample_at`` on; periodic timelines)."""
        self.sample_at = sample_at
        self.schedule_ns = 0
        self.execute_ns = 0
        self.update_ns = 0
        self.schedules_ahead = False
        """The next step is planned while this one runs (module docstring): arrivals during a
        step wait in :attr:`inbox` until the next step was planned."""
        self.inbox: list[Request] = []
        """Requests that arrived during the step in flight (only with :attr:`schedules_ahead`)."""

    def submit(self, req: Request) -> None:
        """A request arrives: queued at the scheduler, or, while a step runs on an engine that
        schedules ahead, held until the next step was planned."""
        if self.schedules_ahead and self.busy:
            self.inbox.append(req)
        else:
            self.scheduler.add_request(req)

    def _flush_inbox(self) -> bool:
        """Hand the held arrivals to the scheduler, in arrival order; whether there were any."""
        if not self.inbox:
            return False
        add = self.scheduler.add_request
        for req in self.inbox:
            add(req)
        self.inbox.clear()
        return True

    # ------------------------------------------------------------------ event-driven loop
    def start(self, now_ns: int) -> int | None:
        """Schedule and execute a step starting at ``now_ns``; returns its end time, or None
        when there is nothing to run (the engine is then idle)."""
        plan = self.scheduler.schedule(now_ns)
        if not plan.num_decodes and not plan.prefills and not plan.stall_ns:  # plan.is_empty
            self._idle(now_ns)
            return None
        return self._execute(plan, now_ns)

    def on_step_end(self, now_ns: int) -> int | None:
        """The step in flight ended at ``now_ns``: commit it, then start the next one (returns
        its end time, or None when idle)."""
        plan = self.plan
        output = self.output
        assert plan is not None
        sched = self.scheduler
        sched.update(plan, output, now_ns)
        self.busy_ns += now_ns - self.start_ns
        # the next step: :meth:`start` and :meth:`_execute`, inlined (the simulator's hot path)
        plan = sched.schedule(now_ns)
        fresh = self.inbox and self._flush_inbox()  # planned before the held arrivals are seen
        if not plan.num_decodes and not plan.prefills and not plan.stall_ns:  # plan.is_empty
            if fresh:  # nothing else to run: the engine core takes them in at once
                return self._replan(now_ns)
            self._idle(now_ns)
            return None
        self.plan = plan
        self.start_ns = now_ns
        if now_ns >= self.sample_at and self.on_sample is not None:
            self.on_sample(now_ns, plan)
        k = 1
        if self.fast_forward and plan.num_decodes and not plan.prefills and not fresh:
            k, sensitive = sched.repeatable_steps(plan)  # :meth:`_fast_forward`, inlined
            sensitive = sensitive or self.schedules_ahead  # an arrival enters the queue later
        if k > 1:
            horizon = self.next_event_ns() if sensitive else None
            output = self.executor.execute(plan, now_ns, -1, k, horizon)
        else:
            output = self.executor.execute(plan, now_ns)
        self.output = output
        end = self.end_ns = now_ns + output.duration_ns
        return end

    def _replan(self, now_ns: int) -> int | None:
        """The planned step was empty but held arrivals just entered the queue: plan again at
        the same instant (the step that would have run is the idle engine's first)."""
        plan = self.scheduler.schedule(now_ns)
        if not plan.num_decodes and not plan.prefills and not plan.stall_ns:
            self._idle(now_ns)
            return None
        return self._execute(plan, now_ns)

    def _execute(self, plan: StepPlan, now_ns: int) -> int:
        idle = -1 if self.busy else now_ns - self.idle_since
        self.busy = True
        self.plan = plan
        self.start_ns = now_ns
        if now_ns >= self.sample_at and self.on_sample is not None:
            self.on_sample(now_ns, plan)
        if self.fast_forward and plan.num_decodes and not plan.prefills:
            output = self._fast_forward(plan, now_ns, idle)
        else:
            output = self.executor.execute(plan, now_ns, idle)
        self.output = output
        end = self.end_ns = now_ns + output.duration_ns
        return end

    def _fast_forward(self, plan: StepPlan, now_ns: int, idle_ns: int) -> StepOutput:
        """Execute a pure-decode ``plan`` as a run of as many identical steps as the scheduler
        allows, up to the next external event that could change it."""
        k, sensitive = self.scheduler.repeatable_steps(plan)
        sensitive = sensitive or self.schedules_ahead
        if k <= 1:
            return self.executor.execute(plan, now_ns, idle_ns)
        horizon = self.next_event_ns() if sensitive else None
        return self.executor.execute(plan, now_ns, idle_ns, k, horizon)

    def _idle(self, now_ns: int) -> None:
        if self.busy:
            self.idle_since = now_ns
        self.busy = False
        self.plan = None
        if self.on_idle is not None:
            self.on_idle(now_ns)

    # ------------------------------------------------------------------ synchronous loop
    def step(self) -> StepPlan | None:
        """Run one step on the engine's clock (a virtual clock jumps to the step's end);
        returns its plan, or None when there was nothing to run."""
        t0 = time.perf_counter_ns()
        start = self.clock.now_ns()
        plan = self.scheduler.schedule(start)
        t1 = time.perf_counter_ns()
        self.schedule_ns += t1 - t0
        if plan.is_empty:
            self._idle(start)
            return None
        end = self._execute(plan, start)
        if isinstance(self.clock, VirtualClock):
            self.clock.advance_to(end)
        end = self.clock.now_ns()
        t2 = time.perf_counter_ns()
        self.execute_ns += t2 - t1
        self.scheduler.update(plan, self.output, end)
        self.busy_ns += end - start
        self.update_ns += time.perf_counter_ns() - t2
        return plan
