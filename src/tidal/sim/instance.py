"""One simulated serving instance: the engine's step loop (:class:`~tidal.engine.engine.Engine`)
over the cost-model executor (:class:`~tidal.engine.executor.ModelledExecutor`, exact
fast-forward of pure-decode runs, docs/DESIGN.md §2), driven by the simulation's events.

The instance only adapts events to the loop: an arrival or a wake-up starts a step on an idle
engine, a step-end event commits the step(s) and starts the next, and a control event that
brings work by a path the run's horizon did not foresee cuts a fast-forwarded run
(:meth:`SimInstance.interrupt`). It also samples a timeline of the engine state.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tidal.core.buffers import Int64Buffer
from tidal.core.histogram import LogHistogram
from tidal.core.request import Request
from tidal.engine.engine import Engine
from tidal.engine.executor import ModelledExecutor
from tidal.engine.plan import StepPlan
from tidal.engine.scheduler import Scheduler
from tidal.hardware.perf import PerfModel, schedules_ahead


class SimInstance:
    def __init__(
        self,
        index: int,
        scheduler: Scheduler,
        perf: PerfModel,
        fast_forward: bool = True,
        timeline_interval_ns: int = 1_000_000_000,
        buffer_capacity: int = 1024,
    ) -> None:
        self.index = index
        self.executor = ModelledExecutor(perf, fast_forward)
        self.engine = engine = Engine(
            scheduler, self.executor, on_idle=self._on_idle, on_sample=self._sample, sample_at=0
        )
        engine.schedules_ahead = schedules_ahead(perf)
        self.on_step_end: Callable[[int], int | None] = engine.on_step_end
        """Commit the finished step(s), then start the next; returns its end time or None."""
        self.timeline_interval_ns = timeline_interval_ns
        self.timeline: dict[str, Int64Buffer] = {
            k: Int64Buffer(buffer_capacity)
            for k in (
                "time_ns",
                "running",
                "waiting",
                "kv_used_blocks",
                "decodes",
                "prefill_tokens",
            )
        }
        if scheduler.kv.prefix_caching:  # KV timeline: free blocks still holding a prefix
            self.timeline["kv_cached_free_blocks"] = Int64Buffer(buffer_capacity)

    # ------------------------------------------------------------------ the engine's parts
    @property
    def scheduler(self) -> Scheduler:
        return self.engine.scheduler

    @scheduler.setter
    def scheduler(self, scheduler: Scheduler) -> None:
        self.engine.scheduler = scheduler

    @property
    def perf(self) -> PerfModel:
        return self.executor.perf

    @perf.setter
    def perf(self, perf: PerfModel) -> None:
        self.executor.perf = perf
        self.engine.schedules_ahead = schedules_ahead(perf)

    @property
    def itl(self) -> LogHistogram:
        """Inter-token latencies: each step's duration, weighted by its decode tokens."""
        return self.executor.itl

    @itl.setter
    def itl(self, h: LogHistogram) -> None:
        self.executor.itl = h

    @property
    def busy(self) -> bool:
        return self.engine.busy

    @property
    def busy_ns(self) -> int:
        return self.engine.busy_ns

    @busy_ns.setter
    def busy_ns(self, ns: int) -> None:
        self.engine.busy_ns = ns

    # ------------------------------------------------------------------ events
    def on_arrival(self, req: Request, now_ns: int) -> int | None:
        """Queue ``req``; if idle, start a step. Returns the new step-end time, if any."""
        engine = self.engine
        engine.submit(req)
        if engine.busy:
            return None
        return engine.start(now_ns)

    def kick(self, now_ns: int) -> int | None:
        """Start a step if idle (work arrived by another path than an arrival)."""
        if self.engine.busy:
            return None
        return self.engine.start(now_ns)

    def interrupt(self, now_ns: int) -> int | None:
        """Work arrived by a path the run's horizon did not foresee (a cluster control event):
        cut a fast-forwarded run at its first step boundary after ``now_ns``
        (:meth:`ModelledExecutor.interrupt`). Returns the new end time, or None when the run
        is not affected."""
        engine = self.engine
        if not engine.busy or engine.plan is None:
            return None
        end = self.executor.interrupt(engine.plan, engine.start_ns, engine.end_ns, now_ns)
        if end is not None:
            engine.end_ns = end
        return end

    def _on_idle(self, now_ns: int) -> None:
        sched = self.engine.scheduler
        if len(sched.waiting) and not sched.running:
            raise RuntimeError(
                "the head request cannot be admitted into an empty instance: the KV cache "
                f"({sched.kv.num_blocks} blocks) is too small for its first chunk; raise "
                "gpu_memory_utilization or lower the token budget"
            )

    # ------------------------------------------------------------------ timeline
    def _sample(self, now_ns: int, plan: StepPlan) -> None:
        sched = self.engine.scheduler
        tl = self.timeline
        tl["time_ns"].append(now_ns)
        tl["running"].append(len(sched.running))
        tl["waiting"].append(len(sched.waiting))
        tl["kv_used_blocks"].append(sched.kv.num_blocks - sched.kv.num_free_blocks)
        tl["decodes"].append(plan.num_decodes)
        tl["prefill_tokens"].append(plan.prefill_tokens)
        if "kv_cached_free_blocks" in tl:
            tl["kv_cached_free_blocks"].append(sched.kv.num_cached_free_blocks())
        self.engine.sample_at = now_ns + self.timeline_interval_ns

    def timeline_columns(self) -> dict[str, np.ndarray]:
        cols = {k: v.view().copy() for k, v in self.timeline.items()}
        cols["instance"] = np.full(len(cols["time_ns"]), self.index, dtype=np.int64)
        return cols
