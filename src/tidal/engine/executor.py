"""Executors: the one part of the step loop (:mod:`tidal.engine.engine`) that differs between
the backends. An executor runs a step plan and returns a :class:`~tidal.engine.plan.StepOutput`:
the duration in integer ns and, from a real model (``tidal.runtime.executor``), the sampled
tokens. It never sees the scheduler: the plan is its whole input.

:class:`ModelledExecutor` is the simulator's: a step lasts what the performance model says,
plus the plan's stall (a stall-only plan lasts its stall), plus the model's idle penalty on
the first step after the engine sat idle (:meth:`~tidal.hardware.perf.PerfModel.idle_penalty_ns`;
that step is always taken alone).

Exact fast-forward (docs/DESIGN.md §2): when the engine passes ``max_steps = k > 1`` (the
scheduler said the pure-decode plan would repeat k times, until the first departure or the first
missing KV block), the executor times up to k steps at once and sets ``plan.num_steps``; the
engine then commits them in one update. With a ``horizon_ns`` (an external event could change
the plan) the run takes every step that starts by then (a step starting exactly at an arrival
does not see it: step ends are processed before arrivals at the same time). When the event
reads the scheduler's state (``plan.events_see_step``: AugServe values an arriving or returning
request from the running batch's KV and the step's budget) the run ends instead at its last
step boundary at or before the event (its first step always runs): the step in flight at the
event is then the first step of the next run, scheduled from the state stepping has there (a
run's steps are committed at its end, so inside it the state is that of its first step).
Stepping one by one gives identical timestamps; property tests assert it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from tidal.core.histogram import LogHistogram
from tidal.core.units import INF_NS
from tidal.engine.plan import StepOutput, StepPlan
from tidal.hardware.perf import PerfModel

_SCALAR_STEPS = 64
_FIRST_CHUNK = 64
_UNKNOWN = (math.nan, math.nan)


class Executor(Protocol):
    fast_forward: bool
    """Whether :meth:`execute` can time a run of repeated pure-decode steps at once."""

    def execute(
        self,
        plan: StepPlan,
        now_ns: int,
        idle_ns: int = -1,
        max_steps: int = 1,
        horizon_ns: int | None = None,
    ) -> StepOutput:
        """Run ``plan`` starting at ``now_ns``; the output's duration covers all
        ``plan.num_steps`` steps. ``idle_ns``: how long the engine sat idle before this step
        (−1: it ran back to back). ``max_steps`` > 1 (fast-forward only): the pure-decode plan
        repeats that many times; the executor runs up to that many and sets
        ``plan.num_steps``, none but the first starting after ``horizon_ns`` (ending after it:
        ``plan.events_see_step``; None: no external event can change the run)."""
        ...


class ModelledExecutor:
    """Executes a plan by asking a performance model how long it takes (the simulator's).

    It returns one :class:`StepOutput`, updated in place at each step (the engine commits a
    step before it executes the next; no allocation on the simulator's hot path)."""

    def __init__(self, perf: PerfModel, fast_forward: bool = False) -> None:
        self.perf = perf
        self.fast_forward = fast_forward
        self.output = StepOutput()
        self.itl = LogHistogram()
        """Inter-token latencies: each step's duration, weighted by its decode tokens."""
        self._sensitive = False
        self._last_step_ns = 0
        """Duration of the last step of the current run."""

    @property
    def perf(self) -> PerfModel:
        return self._perf

    @perf.setter
    def perf(self, perf: PerfModel) -> None:
        self._perf = perf
        self._affine: dict[int, tuple[float, float] | None] = {}
        """``perf.decode_affine(n)`` by batch size n (a performance model is immutable)."""
        self._segment: Callable[[int, int], tuple[float, float, float]] | None = getattr(
            perf, "decode_segment", None
        )
        self._spec_affine: dict[int, Any] = {}
        """``perf.spec_affine(n)`` by batch size n (speculative step models), widened to
        :meth:`~tidal.hardware.spec_perf.SpecPerfModel.spec_segment`'s form (unbounded ends);
        None: piecewise, a segment per run."""
        self._spec_seg: Callable[[int, int], Any] | None = getattr(perf, "spec_segment", None)
        self._spec_piece: dict[int, list[tuple[int, Any]]] = {}
        """By batch size: its last ``spec_segment`` pieces, newest first, at most 4, each with
        the Σ context it was taken at (it holds from there to its ends: contexts only grow
        within a run, but runs of one batch size start in different pieces)."""

    def execute(
        self,
        plan: StepPlan,
        now_ns: int,
        idle_ns: int = -1,
        max_steps: int = 1,
        horizon_ns: int | None = None,
    ) -> StepOutput:
        out = self.output
        penalty = self._perf.idle_penalty_ns(idle_ns) if idle_ns >= 0 else 0
        if max_steps > 1 and not penalty:
            self._sensitive = horizon_ns is not None
            end = self._run(plan, now_ns, max_steps, INF_NS if horizon_ns is None else horizon_ns)
            out.duration_ns = end - now_ns
            return out
        n_dec = plan.num_decodes
        prefills = plan.prefills
        if n_dec or prefills:
            d = (
                self._perf.step_ns(
                    n_dec,
                    plan.decode_ctx,
                    sum(n for _, n in prefills),
                    plan.prefill_attn,
                    plan.prefill_ctx,
                    len(prefills),
                )
                + penalty
                + plan.stall_ns
            )
            if n_dec:
                self.itl.add(d, n_dec)
            out.duration_ns = d
        else:
            out.duration_ns = plan.stall_ns
        return out

    def interrupt(self, plan: StepPlan, start_ns: int, end_ns: int, now_ns: int) -> int | None:
        """Work arrived by a path the run's horizon did not foresee (a cluster control event):
        cut the fast-forwarded run ``plan`` (``start_ns`` → ``end_ns``) so that it ends at its
        first step boundary after ``now_ns``, where stepping would first see the new work.
        Returns the new end time, or None when the run already ends there (or cannot be
        affected: a run that no arrival could change). The durations are recomputed with the
        same expression (:meth:`PerfModel.decode_run_ns`, bit-identical to every path of
        :meth:`_run`); the cut steps leave the ITL histogram with negative weights (exact
        integer counts)."""
        n_steps = plan.num_steps
        if n_steps <= 1 or not self._sensitive:
            return None
        if now_ns >= end_ns - self._last_step_ns:
            return None  # the last step has started: the run already ends at the cut
        n = plan.num_decodes
        d = self._durations(plan, 0, n_steps)
        ends = start_ns + np.cumsum(d)
        j = int(np.searchsorted(ends, now_ns, side="right"))
        if j >= n_steps - 1:
            return None
        keep = j + 1
        self.itl.add_many(d[keep:], -n)
        plan.num_steps = keep
        self._last_step_ns = int(d[j])
        self.output.duration_ns = int(ends[j]) - start_ns
        return int(ends[j])

    def _run(self, plan: StepPlan, now_ns: int, k: int, horizon_ns: int) -> int:
        """Time a run of up to ``k`` identical pure-decode steps, each but the first (which
        starts now) starting (``plan.events_see_step``: ending) no later than ``horizon_ns``;
        returns its end. When the perf model is
        affine in the context (``decode_affine``; piecewise affine: ``decode_segment``) the
        steps are timed inline; otherwise (or for long runs) in vectorised chunks. Every path
        evaluates the same float expression per step, so durations are bit-identical to
        :meth:`PerfModel.step_ns`."""
        n = plan.num_decodes
        ctx0 = plan.decode_ctx
        perf = self._perf
        itl = self.itl
        t = now_ns
        done = 0
        last = 0
        pool = plan.decodes
        see = int(plan.events_see_step)  # a step ending after the horizon is the next run's
        spec = pool is not None and pool.speculative  # contexts grow by the drawn tokens
        affine = None if spec else self._affine.get(n, _UNKNOWN)
        if affine is _UNKNOWN:
            affine = self._affine[n] = perf.decode_affine(n)
        segment = None if affine is not None or spec else self._segment
        if spec and k > 1:
            done, t, last = self._spec_inline(plan, now_ns, k, horizon_ns, see)
            if 0 < done < min(k, _SCALAR_STEPS):  # it stopped at the horizon
                k = done
        end = math.inf
        if segment is not None:
            c, a, end = segment(n, ctx0)
            affine = (c, a)
        if affine is not None:
            c, a = affine
            ctx = ctx0
            limit = min(k, _SCALAR_STEPS)
            durations: list[int] = []
            floor, append = math.floor, durations.append
            if segment is None:  # one affine piece (the common case: a leaner loop)
                while done < limit:
                    d = floor((c + a * ctx) * 1e9 + 0.5)
                    if d < 1:
                        d = 1
                    if done and t + see * d > horizon_ns:  # starts (ends) after the horizon
                        k = done
                        break
                    append(d)
                    t += d
                    ctx += n
                    done += 1
            else:
                while done < limit:
                    if ctx >= end:  # next segment of a piecewise-affine model
                        c, a, end = segment(n, ctx)
                    d = floor((c + a * ctx) * 1e9 + 0.5)
                    if d < 1:
                        d = 1
                    if done and t + see * d > horizon_ns:
                        k = done
                        break
                    append(d)
                    t += d
                    ctx += n
                    done += 1
            last = durations[-1]
            itl.extend(durations, n)
        chunk = _FIRST_CHUNK
        while done < k and (done == 0 or t <= horizon_ns):
            size = min(chunk, k - done)
            run = self._durations(plan, done, size)
            ends = t + np.cumsum(run)
            take = size
            if ends[-1] > horizon_ns and see:  # the steps ending by it (the run's first: always)
                take = max(int(np.searchsorted(ends, horizon_ns, side="right")), int(not done))
                if not take:
                    break
            elif ends[-1] > horizon_ns:  # step j ≥ 1 starts at ends[j − 1], the first at t
                take = 1 + int(np.searchsorted(ends[:-1], horizon_ns, side="right"))
            itl.add_many(run[:take], n)
            last = int(run[take - 1])
            t = int(ends[take - 1])
            done += take
            if take < size:
                break
            chunk *= 4
        plan.num_steps = done
        self._last_step_ns = last
        return t

    def _spec_inline(
        self, plan: StepPlan, now_ns: int, k: int, horizon_ns: int, see: int
    ) -> tuple[int, int, int]:
        """The first ≤ 64 steps of a speculative run timed one by one on the pool's drawn
        contexts, when the step model is piecewise affine in them
        (:meth:`SpecPerfModel.spec_segment`; a fully affine form is kept per batch size): the
        float expression of ``step_ns``. Returns (steps done, end, last duration); no steps
        when the model is not (the vectorised chunks then time the run)."""
        n = plan.num_decodes
        x = plan.decode_ctx
        form = self._spec_form(n, x)
        if form is None:
            return 0, now_ns, 0
        c, a, y_end, mul, shift, scale, c_d, a_d, x_end = form
        pool: Any = plan.decodes
        limit = min(k, _SCALAR_STEPS)
        durations: list[int] = []
        floor, append = math.floor, durations.append
        t = now_ns
        y = mul * x + shift  # the verification's Σ context (integers: exact)
        done = 0
        while done < limit:  # levels fetched 16 steps first (most runs end at the horizon)
            v = pool.level_run(done, min(limit - done, 16 if done == 0 else limit))
            prev = v[0]
            for j in range(1, len(v)):
                if x >= x_end or y >= y_end:  # the next piece of a piecewise-affine model
                    form = self._spec_form(n, x)
                    c, a, y_end, mul, shift, scale, c_d, a_d, x_end = form
                d = floor(((c + a * y) + scale * (c_d + a_d * x)) * 1e9 + 0.5)
                if d < 1:
                    d = 1
                if durations and t + see * d > horizon_ns:  # starts (ends) after the horizon
                    limit = 0
                    break
                append(d)
                t += d
                cur = v[j]
                inc = (cur - prev) >> 32  # the step's token gain
                prev = cur
                x += inc
                y += mul * inc
            done += len(v) - 1
        self.itl.extend(durations, n)
        return len(durations), t, durations[-1]

    def _spec_form(self, n: int, x: int) -> Any:
        """The speculative step's piece holding Σ context ``x`` at batch size ``n``
        (:meth:`~tidal.hardware.spec_perf.SpecPerfModel.spec_segment`'s tuple), or None:
        the affine form kept per batch size, else one of the last pieces of that batch size
        that holds ``x`` (each valid from the context it was taken at on), else a new piece."""
        form = self._spec_affine.get(n, _UNKNOWN)
        if form is _UNKNOWN:
            fn = getattr(self._perf, "spec_affine", None)
            form = fn(n) if fn is not None else None
            if form is not None:
                form = (*form[:2], math.inf, *form[2:], math.inf)
            self._spec_affine[n] = form
        if form is not None:
            return form
        kept = self._spec_piece.get(n)
        if kept is not None:
            for lo, form in kept:
                if lo <= x < form[8] and form[3] * x + form[4] < form[2]:
                    return form
        seg = self._spec_seg
        form = seg(n, x) if seg is not None else None
        if form is not None:  # newest first; a piece taken again replaces its older entry
            others = [h for h in kept if h[1] != form][:3] if kept else []
            self._spec_piece[n] = [(x, form), *others]
        return form

    def _durations(self, plan: StepPlan, start: int, count: int) -> np.ndarray:
        """Durations of steps ``start … start + count − 1`` of a pure-decode run of ``plan``:
        contexts in arithmetic progression (plain pool), or the speculative pool's drawn
        contexts (:meth:`~tidal.engine.spec_pool.SpecDecodePool.ctx_run`)."""
        n, pool = plan.num_decodes, plan.decodes
        if pool is not None and pool.speculative:
            ctx = pool.ctx_run(start, count)  # type: ignore[attr-defined]
            return self._perf.decode_run_ctx_ns(n, ctx)  # type: ignore[attr-defined,no-any-return]
        return self._perf.decode_run_ns(n, plan.decode_ctx + n * start, count)
