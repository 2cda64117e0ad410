"""One simulated serving instance: the engine scheduler plus a latency model, with exact
fast-forward of pure-decode runs (DESIGN.md §2).

Fast-forward: when the scheduler says a pure-decode plan would repeat k times (until the first
departure or the first missing KV block) the instance computes the k step durations in one
vectorised call and schedules a single step-end event for the whole run. If an arrival could
change the plan, the run stops at the first step that starts after the next arrival (a step
starting exactly at an arrival does not see it: step ends are processed before arrivals at the
same time). Step-by-step simulation (``fast_forward=False``) gives identical timestamps; a
property test asserts it. The first step after the instance sat idle may carry the performance
model's idle penalty (:meth:`~tidal.hardware.perf.PerfModel.idle_penalty_ns`); it is always
taken as a single step.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tidal.core.buffers import Int64Buffer
from tidal.core.histogram import LogHistogram
from tidal.core.request import Request
from tidal.core.units import INF_NS
from tidal.engine.plan import StepPlan
from tidal.engine.scheduler import Scheduler
from tidal.hardware.perf import PerfModel

_SCALAR_STEPS = 64
_FIRST_CHUNK = 64


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
        self.scheduler = scheduler
        self.perf = perf
        self.fast_forward = fast_forward
        self.busy = False
        self.next_event_ns: Callable[[], int] = lambda: INF_NS
        """Time of the next external event that could change this instance's schedule
        (arrival, tool-call return, control tick); set by the simulation."""
        self.timeline_interval_ns = timeline_interval_ns
        self._next_sample = 0
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
        self._plan: StepPlan | None = None
        self._idle_since = 0
        """When the instance last ran out of work (for the model's idle penalty)."""
        self._num_steps = 1
        self._sensitive = False
        self._start_ns = 0
        self._end_ns = 0
        self._last_step_ns = 0
        """Duration of the last step of the current run."""
        self.busy_ns = 0
        self.num_events = 0
        self.itl = LogHistogram()
        """Inter-token latencies: each step's duration, weighted by its decode tokens."""

    # ------------------------------------------------------------------ events
    def on_arrival(self, req: Request, now_ns: int) -> int | None:
        """Queue ``req``; if idle, start a step. Returns the new step-end time, if any."""
        self.scheduler.add_request(req)
        if self.busy:
            return None
        return self._start(now_ns)

    def kick(self, now_ns: int) -> int | None:
        """Start a step if idle (work arrived by another path than an arrival)."""
        if self.busy:
            return None
        return self._start(now_ns)

    def on_step_end(self, now_ns: int) -> int | None:
        """Apply the finished step(s), then start the next. Returns its end time or None."""
        plan = self._plan
        assert plan is not None
        self.scheduler.update(plan, now_ns, self._num_steps)
        self.busy_ns += now_ns - self._start_ns
        return self._start(now_ns)

    # ------------------------------------------------------------------ steps
    def _start(self, now_ns: int) -> int | None:
        sched = self.scheduler
        plan = sched.schedule(now_ns)
        self.num_events += 1
        if plan.is_empty:
            if self.busy:
                self._idle_since = now_ns
            self.busy = False
            self._plan = None
            if len(sched.waiting) and not sched.running:
                raise RuntimeError(
                    "the head request cannot be admitted into an empty instance: the KV cache "
                    f"({sched.kv.num_blocks} blocks) is too small for its first chunk; raise "
                    "gpu_memory_utilization or lower the token budget"
                )
            return None
        penalty = 0 if self.busy else self.perf.idle_penalty_ns(now_ns - self._idle_since)
        self.busy = True
        self._plan = plan
        self._start_ns = now_ns
        n_dec = plan.num_decodes
        if now_ns >= self._next_sample:
            self._sample(now_ns, plan)
        if self.fast_forward and not plan.prefills and n_dec and not penalty:
            k, sensitive = sched.repeatable_steps(plan)
            if k > 1:
                horizon = self.next_event_ns() if sensitive else INF_NS
                self._sensitive = sensitive
                return self._start_run(plan, now_ns, k, horizon)
        d = (
            self.perf.step_ns(
                n_dec,
                plan.decode_ctx,
                plan.prefill_tokens,
                plan.prefill_attn,
                plan.prefill_ctx,
                len(plan.prefills),
            )
            + penalty
        )
        if plan.stall_ns:
            d = (d if n_dec or plan.prefills else 0) + plan.stall_ns
        self._num_steps = 1
        if n_dec:
            self.itl.add(d, n_dec)
        self._end_ns = now_ns + d
        return self._end_ns

    def interrupt(self, now_ns: int) -> int | None:
        """Work arrived by a path the run's horizon did not foresee (a cluster control event):
        cut a fast-forwarded run so that it ends at its first step boundary after ``now_ns``,
        where step-by-step simulation would first see the new work. Returns the new end time,
        or None when the run already ends there (or cannot be affected: a run that no arrival
        could change). The run's durations are recomputed with the same expression
        (:meth:`PerfModel.decode_run_ns`, bit-identical to every path of :meth:`_start_run`);
        the cut steps leave the ITL histogram with negative weights (exact integer counts)."""
        n_steps = self._num_steps
        plan = self._plan
        if not self.busy or n_steps <= 1 or not self._sensitive or plan is None:
            return None
        if now_ns >= self._end_ns - self._last_step_ns:
            return None  # the last step has started: the run already ends at the cut
        n = plan.num_decodes
        d = self.perf.decode_run_ns(n, plan.decode_ctx, n_steps)
        ends = self._start_ns + np.cumsum(d)
        j = int(np.searchsorted(ends, now_ns, side="right"))
        if j >= n_steps - 1:
            return None
        keep = j + 1
        self.itl.add_many(d[keep:], -n)
        self._num_steps = keep
        plan.num_steps = keep
        self._end_ns = int(ends[j])
        self._last_step_ns = int(d[j])
        return self._end_ns

    def _sample(self, now_ns: int, plan: StepPlan) -> None:
        sched = self.scheduler
        tl = self.timeline
        tl["time_ns"].append(now_ns)
        tl["running"].append(len(sched.running))
        tl["waiting"].append(len(sched.waiting))
        tl["kv_used_blocks"].append(sched.kv.num_blocks - sched.kv.num_free_blocks)
        tl["decodes"].append(plan.num_decodes)
        tl["prefill_tokens"].append(plan.prefill_tokens)
        if "kv_cached_free_blocks" in tl:
            tl["kv_cached_free_blocks"].append(sched.kv.num_cached_free_blocks())
        self._next_sample = now_ns + self.timeline_interval_ns

    def timeline_columns(self) -> dict[str, np.ndarray]:
        cols = {k: v.view().copy() for k, v in self.timeline.items()}
        cols["instance"] = np.full(len(cols["time_ns"]), self.index, dtype=np.int64)
        return cols

    def _start_run(self, plan: StepPlan, now_ns: int, k: int, horizon_ns: int) -> int:
        """Plan a run of up to ``k`` identical pure-decode steps, each starting no later than
        ``horizon_ns`` (the first one starts now). When the perf model is affine in the context
        (``decode_affine``; piecewise affine: ``decode_segment``) the steps are timed inline;
        otherwise (or for long runs) in vectorised chunks. Every path evaluates the same float
        expression per step, so durations are bit-identical to :meth:`PerfModel.step_ns`."""
        n = plan.num_decodes
        ctx0 = plan.decode_ctx
        perf = self.perf
        itl = self.itl
        t = now_ns
        done = 0
        last = 0
        affine = perf.decode_affine(n)
        segment = None if affine is not None else getattr(perf, "decode_segment", None)
        end = math.inf
        if segment is not None:
            c, a, end = segment(n, ctx0)
            affine = (c, a)
        if affine is not None:
            c, a = affine
            step = n
            ctx = ctx0
            limit = min(k, _SCALAR_STEPS)
            durations: list[int] = []
            while done < limit and (done == 0 or t <= horizon_ns):
                if ctx >= end:  # next segment of a piecewise-affine model
                    c, a, end = segment(n, ctx)  # type: ignore[misc]
                d = math.floor((c + a * ctx) * 1e9 + 0.5)
                if d < 1:
                    d = 1
                durations.append(d)
                last = d
                t += d
                ctx += step
                done += 1
            itl.extend(durations, n)
        chunk = _FIRST_CHUNK
        while done < k and (done == 0 or t <= horizon_ns):
            size = min(chunk, k - done)
            run = perf.decode_run_ns(n, ctx0 + n * done, size)
            ends = t + np.cumsum(run)
            # Step j ≥ 1 of the chunk starts at ends[j - 1]; its first starts at t ≤ horizon.
            take = size
            if ends[-1] > horizon_ns:
                take = 1 + int(np.searchsorted(ends[:-1], horizon_ns, side="right"))
            itl.add_many(run[:take], n)
            last = int(run[take - 1])
            t = int(ends[take - 1])
            done += take
            chunk *= 4
        self._num_steps = done
        plan.num_steps = done
        self._end_ns = t
        self._last_step_ns = last
        return t
