"""The augmented-request scheduler: interception composed over any batching policy.

:class:`AugmentedMixin` adds pauses, KV handling during calls, the ready-queue order and the
token budget to a batching policy of ``BATCHING`` by cooperative inheritance:
:func:`augmented_class` builds ``AugmentedMixin + mb`` (:class:`AugmentedScheduler`, the
papers' setting), ``+ eb`` or ``+ ebplus``, so AugServe and EB⁺ compose in one engine. The
batching policy keeps its step structure (MB's mixed steps, EB's phase machine); the mixin
runs its per-iteration work around it and supplies the step's token budget
(:meth:`Scheduler.step_budget`). Not in ``BATCHING`` itself: it needs its cost environment
and policies, so runs build it through
:func:`tidal.engine.augment.bundles.build_augmented_scheduler` (selected by the workload,
``workload.augmented``, ``augment.serving_policy`` and ``scheduler.batching``).

A request whose :class:`~tidal.core.augmented.AugmentedSpec` says it calls a tool after
output token ``N_k`` joins the decode pool with ``N_k`` as its departure target; when it
departs (or when a prefill chunk samples token ``N_k``) it **pauses**: it leaves the running set
with its KV on the GPU, the intercept policy decides what happens to that KV, and the driver
is told when the call returns (``on_pause(req, now + T_k)``; the simulator turns it into a
timer). :meth:`resume` appends the ``a_k`` returned tokens and makes the request ready again:

* KV on the GPU (Preserve) → the ready queue, deficit ``1 + a_k`` tokens;
* KV freed (Discard) → the ready queue, deficit = the whole context (recompute) + ``a_k``;
* KV (partly) on the host (Swap) → swapped back in, chunk by chunk, then the ready queue.

Every step: the intercept policy's per-iteration decisions (INFERCEPT re-decides each paused
request), the ordering's refresh (AugServe's starvation tier), the token budget (static or
AugServe's dynamic one), then the vLLM-v1 mechanisms (decodes and running prefills first,
admission from the ready queue) and finally the KV transfers. Transfers are budgeted and
pipelined (INFERCEPT §2.2): each direction moves at most what the PCIe link carries while the
step computes (``compute time / t_token``), so a swap never lengthens a step that computes; a
step with nothing to compute but transfers pending is a pure transfer ("stall") of one
saturated iteration's worth.

Memory shortage: before a running request is preempted, idle contexts are discarded — paused
requests' first, the longest remaining (predicted) call first (INFERCEPT's preemption
fallback), then queued and swapping-in ones. Admission never discards anything (a head that
does not fit waits, as in vLLM and INFERCEPT's waiting stage), except when nothing runs: then
idle contexts are reclaimed for it, so the instance never deadlocks on memory held by idle
requests.

GPU-memory waste is integrated exactly over time (block·ns, integers): idle KV of paused and
queued requests ("preserve"), memory held by requests waiting for their swap-in plus every
resident block during a transfer stall ("swap"), and every resident block during the share of
a step spent recomputing discarded or preempted context ("recompute"). ``recompute_time_share``
is the recomputing share of the computing steps' time (each step split by token share), the
quantity INFERCEPT measures for vLLM (37–40% of model forward time, augserve.md §1.2).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidal.core.augmented import AugmentedSpec
from tidal.core.kv import KVBlockManager
from tidal.core.request import Request, RequestState
from tidal.engine.augment.budget import StaticBudget, TokenBudget
from tidal.engine.augment.intercept import InterceptPolicy, PreservePolicy
from tidal.engine.augment.ordering import InterceptFCFSQueue, ValueQueue
from tidal.engine.augment.predictor import OraclePredictor, Predictor
from tidal.engine.augment.state import AugRun, KVMode
from tidal.engine.augment.value import CostEnv, remaining_value
from tidal.engine.augment.waste import IterationProfile
from tidal.engine.mb import MixedBatchingScheduler
from tidal.engine.ordering import WaitingQueue
from tidal.engine.plan import StepPlan
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.hardware.perf import PerfModel


@dataclass(frozen=True)
class AugmentEnv:
    """What the scheduler knows of the hardware (cost estimates; never the clock)."""

    perf: PerfModel
    profile: IterationProfile
    swap_ns_per_token: float
    """KV transfer time per token over the host link (one direction)."""
    kv_bytes_per_token: int
    """Per GPU; converts block·ns of waste to GB·s."""

    @classmethod
    def build(
        cls,
        perf: PerfModel,
        kv_bytes_per_token: int,
        host_link_bytes_per_s: float,
        saturation_tokens: int = 384,
        profile: IterationProfile | None = None,
    ) -> AugmentEnv:
        """``profile``: a measured iteration profile (INFERCEPT's own constants); default: one
        fitted to ``perf`` (:meth:`IterationProfile.from_perf`)."""
        return cls(
            perf,
            profile or IterationProfile.from_perf(perf, saturation_tokens),
            kv_bytes_per_token / host_link_bytes_per_s * 1e9,
            kv_bytes_per_token,
        )


class AugmentedMixin(Scheduler):
    """Interception over the batching policy next in the MRO (see :func:`augmented_class`)."""

    name = "augmented"

    def __init__(
        self,
        config: SchedulerConfig,
        kv: KVBlockManager,
        waiting: WaitingQueue | None = None,
        *,
        env: AugmentEnv,
        intercept: InterceptPolicy | None = None,
        budget: TokenBudget | None = None,
        predictor: Predictor | None = None,
        value_form: str = "memory",
        stage2: bool = True,
    ) -> None:
        super().__init__(config, kv, waiting)
        self.env = env
        self.intercept = intercept or PreservePolicy()
        self.token_budget = budget or StaticBudget(config.max_num_batched_tokens)
        self.predictor = predictor or OraclePredictor()
        self.value_form = value_form
        self.stage2 = stage2
        self.runs: dict[int, AugRun] = {}
        self.paused: dict[int, Request] = {}
        self.swap_out_q: dict[int, Request] = {}
        self.swap_in_q: dict[int, Request] = {}
        self.swap_iter_tokens = max(
            kv.block_size, int(env.profile.saturated_s * 1e9 / env.swap_ns_per_token)
        )
        """Tokens one saturated iteration can hide per direction (INFERCEPT's swap budget)."""
        self.use_value = isinstance(self.waiting, ValueQueue)
        if isinstance(self.waiting, ValueQueue):
            self.waiting.bind(self._value_key)
        elif isinstance(self.waiting, InterceptFCFSQueue):
            self.waiting.bind(self._stage_key)
        self.last_budget = self.token_budget.budget(self)
        self._now = 0
        self._changed = False
        self._step_start = 0
        self._step_used = 0
        # exact memory accounting (blocks and block·ns)
        self._idle_blocks = 0
        self._swapin_blocks = 0
        self._t_acct = 0
        self.idle_block_ns = 0
        self.swapin_block_ns = 0
        self.stall_block_ns = 0
        self.recompute_block_ns = 0.0
        self.forward_ns = 0
        """Time of steps that compute (a fast-forwarded run counts every step)."""
        self.recompute_ns = 0.0
        """Share of those steps spent recomputing, by token share of each step."""
        # counters
        self.num_intercepts = 0
        self.resolved = [0, 0, 0]
        self.recompute_tokens = 0
        self.recompute_hit_tokens = 0
        """Tokens a discarded or preempted context did not recompute: prefix-cache hits."""
        self.swap_out_blocks = 0
        self.swap_in_blocks = 0
        self.num_reclaims = 0
        self.budget_sum = 0
        self.budget_n = 0

    # ------------------------------------------------------------------ keys and values
    def _stage_key(self, req: Request) -> tuple[float, ...]:
        return (0.0 if req.num_blocks else 1.0, float(req.arrival_ns))

    def _value_key(self, req: Request) -> tuple[float, float, int]:
        run = self.runs[req.request_id]
        return (0.0 if req.num_blocks else 1.0), run.value, run.ready_ns

    def cost_env(self) -> CostEnv:
        return CostEnv(
            self.env.profile,
            max(self.last_budget, 1),
            self.env.swap_ns_per_token / 1e9,
            self.running_gpu_tokens(),
            self.host_room_blocks() > 0,
        )

    def _value(self, req: Request, run: AugRun) -> float:
        return remaining_value(
            run.pred,
            prompt=req.prompt_len,
            context=req.num_tokens,
            pending=req.num_tokens - req.num_computed_tokens,
            generated=req.num_output_tokens,
            calls_done=run.k,
            env=self.cost_env(),
            form=self.value_form,
        )

    # ------------------------------------------------------------------ queries
    def has_work(self) -> bool:
        return super().has_work() or bool(self.paused) or bool(self.swap_in_q)

    def paused_gpu_blocks(self) -> int:
        """GPU blocks held by requests in a call (reclaimable)."""
        return sum(r.num_blocks for r in self.paused.values())

    def running_batch_tokens(self) -> int:
        """In-flight tokens of the running set: 1 per decode plus the prefill deficits."""
        return len(self.pool) + sum(r.num_tokens - r.num_computed_tokens for r in self.prefilling)

    def running_gpu_tokens(self) -> int:
        """KV tokens (block granularity) held by the running set."""
        kv = self.kv
        held = kv.num_blocks - kv.num_free_blocks - self._idle_blocks - self._swapin_blocks
        return held * kv.block_size

    def host_room_blocks(self) -> int:
        pending = sum(r.num_blocks for r in self.swap_out_q.values())
        return self.kv.num_free_host_blocks - pending

    def swap_out_pending_tokens(self) -> int:
        return sum(r.num_blocks for r in self.swap_out_q.values()) * self.kv.block_size

    # ------------------------------------------------------------------ arrivals
    def add_request(self, req: Request) -> None:
        spec = req.payload if isinstance(req.payload, AugmentedSpec) else None
        points = spec.call_points() if spec is not None else []
        run = AugRun(spec, points, self.predictor.predict(req))
        run.ready_ns = req.arrival_ns
        self.runs[req.request_id] = run
        if self.use_value:
            run.value = self._value(req, run)
        super().add_request(req)

    # ------------------------------------------------------------------ pause and resume
    def _on_caught_up(self, req: Request, now_ns: int) -> None:
        run = self.runs[req.request_id]
        if run.at_call_point(req.num_output_tokens):
            self._pause(req, run, now_ns)
        elif req.num_output_tokens >= req.max_output_len:
            self._finish(req, now_ns)
        else:
            self.pool.join(req, run.next_target(req.max_output_len))

    def _on_departure(self, req: Request, now_ns: int) -> None:
        run = self.runs[req.request_id]
        if run.at_call_point(req.num_output_tokens):
            self._pause(req, run, now_ns)
        else:
            self._finish(req, now_ns)

    def _pause(self, req: Request, run: AugRun, now_ns: int) -> None:
        assert run.spec is not None
        del self.running[req.request_id]
        req.state = RequestState.PAUSED
        run.pause_ns = now_ns
        run.mode = KVMode.GPU
        self.paused[req.request_id] = req
        self._idle_blocks += req.num_blocks
        self.num_intercepts += 1
        self.intercept.on_pause(self, req, run, now_ns)
        if self.on_pause is None:
            raise RuntimeError("a request paused on a call but no driver handles resumes")
        self.on_pause(req, now_ns + run.spec.calls[run.k].duration_ns)

    def resume(self, req: Request, now_ns: int) -> None:
        """The call returned: append its tokens and make the request ready (or swap it in)."""
        if req.state == RequestState.ABORTED:
            return
        self._integrate(now_ns)
        run = self.runs[req.request_id]
        assert run.spec is not None
        assert req.state == RequestState.PAUSED
        del self.paused[req.request_id]
        call = run.spec.calls[run.k]
        run.k += 1
        req.num_extra_tokens += call.return_tokens
        self.predictor.observe_call(req, call.duration_ns / 1e9, call.return_tokens)
        outcome = 1 if run.discarded_this_call else 2 if run.swapped_this_call else 0
        self.resolved[outcome] += 1
        run.counts[outcome] += 1
        run.discarded_this_call = run.swapped_this_call = False
        self.swap_out_q.pop(req.request_id, None)
        if self.kv.host_blocks_of(req):
            run.mode = KVMode.SWAPPING_IN
            req.state = RequestState.WAITING
            self._idle_blocks -= req.num_blocks
            self._swapin_blocks += req.num_blocks
            self.swap_in_q[req.request_id] = req
        else:
            run.mode = KVMode.GPU
            self._enqueue(req, run, now_ns)

    def _enqueue(self, req: Request, run: AugRun, now_ns: int) -> None:
        req.state = RequestState.WAITING
        run.ready_ns = now_ns
        if self.use_value and self.stage2:
            run.value = self._value(req, run)
        self.waiting.push(req)

    # ------------------------------------------------------------------ KV mechanisms
    def discard(self, req: Request) -> None:
        """Free a non-running request's context (GPU and host); it will be recomputed."""
        run = self.runs[req.request_id]
        self.swap_out_q.pop(req.request_id, None)
        if self.swap_in_q.pop(req.request_id, None) is not None:
            self._swapin_blocks -= req.num_blocks
        else:
            self._idle_blocks -= req.num_blocks
        self.kv.free(req)
        self.kv.drop_swapped(req)
        run.recompute_left += req.num_computed_tokens
        req.num_computed_tokens = 0
        if req.state == RequestState.PAUSED:
            run.mode = KVMode.DISCARDED
            run.discarded_this_call = True
        else:
            run.mode = KVMode.GPU
        self._changed = True

    def start_swap_out(self, req: Request) -> None:
        run = self.runs[req.request_id]
        run.mode = KVMode.SWAPPING_OUT
        run.swapped_this_call = True
        self.swap_out_q[req.request_id] = req
        self._changed = True

    def _transfer(self, plan: StepPlan) -> None:
        """Move KV blocks within this step's per-direction budget (pipelined under compute);
        a step with no compute transfers one saturated iteration's worth as a stall."""
        if not self.swap_out_q and not self.swap_in_q:
            return
        self._changed = True
        kv = self.kv
        bs = kv.block_size
        t_tok = self.env.swap_ns_per_token
        computes = plan.num_tokens > 0
        if computes:
            tokens = int(self.env.perf.step_ns(*plan.shape()) / t_tok)
        else:
            tokens = self.swap_iter_tokens
        budget = max(tokens // bs, 1 if not computes else 0)
        out_left = budget
        while self.swap_out_q and out_left > 0:
            rid, req = next(iter(self.swap_out_q.items()))
            moved = kv.swap_out_blocks(req, out_left)
            self._idle_blocks -= moved
            self.swap_out_blocks += moved
            out_left -= moved
            if req.num_blocks == 0:
                del self.swap_out_q[rid]
                self.runs[rid].mode = KVMode.SWAPPED
            elif moved == 0:  # host full: fall back to a discard (INFERCEPT)
                self.discard(req)
        in_left = budget
        while self.swap_in_q and in_left > 0:
            rid, req = next(iter(self.swap_in_q.items()))
            moved = kv.swap_in_blocks(req, in_left, keep_free=kv.watermark_blocks)
            stuck = moved == 0 and not self.running and not plan.num_tokens
            if stuck and self._reclaim(min(in_left, kv.host_blocks_of(req)), keep=req):
                continue
            self._swapin_blocks += moved
            self.swap_in_blocks += moved
            in_left -= moved
            if kv.host_blocks_of(req) == 0:
                del self.swap_in_q[rid]
                self._swapin_blocks -= req.num_blocks
                self._idle_blocks += req.num_blocks
                run = self.runs[rid]
                run.mode = KVMode.GPU
                self._enqueue(req, run, self._now)
            elif moved == 0:
                break
        if not computes:
            moved = max(budget - out_left, budget - in_left)
            if moved:
                plan.stall_ns = math.ceil(moved * bs * t_tok)

    def _reclaim(
        self, num_blocks: int, aggressive: bool = True, keep: Request | None = None
    ) -> bool:
        """Discard idle contexts until ``num_blocks`` are freed: paused requests (longest
        remaining predicted call first); with ``aggressive`` also queued ones (lowest priority
        first) and swapping-in ones, never ``keep``. Idle contexts go before a running request
        is preempted (INFERCEPT preempts its targets and "delayed" requests first)."""
        freed = 0
        now = self._now
        pred = self.predictor

        def remaining(r: Request) -> float:
            run = self.runs[r.request_id]
            return pred.call_s(r, run.pred, run.k) - (now - run.pause_ns) / 1e9

        victims = sorted(
            (r for r in self.paused.values() if r.num_blocks),
            key=lambda r: (-remaining(r), r.request_id),
        )
        if aggressive:
            victims += [r for r in reversed(list(self.waiting)) if r.num_blocks and r is not keep]
            victims += [
                r for r in reversed(self.swap_in_q.values()) if r.num_blocks and r is not keep
            ]
        for r in victims:
            freed += r.num_blocks
            swapping_in = r.request_id in self.swap_in_q
            queued = not swapping_in and r.state == RequestState.WAITING
            if queued:
                self.waiting.remove(r)
            self.discard(r)
            if queued or swapping_in:
                self._enqueue(r, self.runs[r.request_id], now)
            self.num_reclaims += 1
            if freed >= num_blocks:
                break
        return freed > 0

    # ------------------------------------------------------------------ running set
    def _on_prefix_hit(self, req: Request, hit_tokens: int) -> None:
        """A re-admitted context re-hit its own cached blocks: they are not recomputed."""
        run = self.runs[req.request_id]
        spared = min(hit_tokens, run.recompute_left)
        run.recompute_left -= spared
        self.recompute_hit_tokens += spared

    def _start_running(self, req: Request, now_ns: int) -> None:
        self._idle_blocks -= req.num_blocks
        super()._start_running(req, now_ns)

    def _preempt(self, req: Request) -> None:
        """Preemption by recompute (vLLM); the request re-enters the queue with its value."""
        if req.in_pool:
            self.pool.remove(req)
        else:
            self.prefilling.remove(req)
        run = self.runs[req.request_id]
        run.recompute_left += req.num_computed_tokens
        self.kv.free(req)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        del self.running[req.request_id]
        req.state = RequestState.WAITING
        run.ready_ns = self._now
        if self.use_value and self.stage2:
            run.value = self._value(req, run)
        self.waiting.push_front(req)

    def _admit_waiting(
        self,
        plan: StepPlan,
        budget: int,
        now_ns: int,
        max_seqs: int | None = None,
        kv_ok: Callable[[Request], bool] | None = None,
    ) -> int:
        """Admission (vLLM v1: stop at the first request that does not fit, as INFERCEPT's
        waiting stage does). Only when nothing runs are idle contexts reclaimed for the head
        (else memory held by idle requests could block the instance forever)."""
        cap = self.config.long_prefill_token_threshold
        while True:
            budget = super()._admit_waiting(plan, budget, now_ns, max_seqs, kv_ok)
            if not self.admission_blocked_by_kv or budget <= 0 or self.running:
                return budget
            head = self.waiting.peek()
            n = min(head.num_tokens - head.num_computed_tokens, budget)
            if cap:
                n = min(n, cap)
            kv = self.kv
            need = kv.blocks_for(head.num_computed_tokens + n) - head.num_blocks
            short = need + kv.watermark_blocks - kv.num_free_blocks
            if short <= 0 or not self._reclaim(short, keep=head):
                return budget
            self._changed = True

    def abort(self, req: Request, now_ns: int) -> None:
        """Drop a request wherever it is (also in a call or swapping in); its GPU and host
        blocks are freed; a pending call return is then ignored."""
        self._integrate(now_ns)
        rid = req.request_id
        if rid in self.paused or rid in self.swap_in_q:
            self.discard(req)
            self.paused.pop(rid, None)
        elif req.state == RequestState.WAITING:
            self.waiting.remove(req)
            self.discard(req)
        else:
            super().abort(req, now_ns)
        req.state = RequestState.ABORTED
        req.finish_ns = now_ns
        self.runs.pop(rid, None)

    def _finish(self, req: Request, now_ns: int) -> None:
        self.predictor.observe_finish(req)
        del self.runs[req.request_id]
        super()._finish(req, now_ns)

    # ------------------------------------------------------------------ step
    def _integrate(self, now_ns: int) -> None:
        dt = now_ns - self._t_acct
        if dt > 0:
            self.idle_block_ns += self._idle_blocks * dt
            self.swapin_block_ns += self._swapin_blocks * dt
            self._t_acct = now_ns

    def schedule(self, now_ns: int) -> StepPlan:
        self._integrate(now_ns)
        self._now = now_ns
        self._changed = False
        self.intercept.per_iteration(self, now_ns)
        self.waiting.refresh(now_ns)
        budget = max(self.token_budget.budget(self), 1)
        self.last_budget = budget
        self.budget_sum += budget
        self.budget_n += 1
        plan = super().schedule(now_ns)  # type: ignore[safe-super]  # batching policy (MRO)
        if not plan.num_tokens and not plan.preempted and not self.running:
            # A policy that admits on its own path (EB's prefill phase) may find the queue
            # head blocked by idle contexts: reclaim them (as _admit_waiting does) and retry.
            head = self.waiting.peek() if len(self.waiting) else None
            if head is not None and self.admission_blocked_by_kv:
                need = self.kv.blocks_for(head.num_tokens) - head.num_blocks
                short = need + self.kv.watermark_blocks - self.kv.num_free_blocks
                if short > 0 and self._reclaim(short, keep=head):
                    self._changed = True
                    plan = super().schedule(now_ns)  # type: ignore[safe-super]
        self._transfer(plan)
        self._step_start = now_ns
        self._step_used = self.kv.num_blocks - self.kv.num_free_blocks
        return plan

    def step_budget(self) -> int:
        return self.last_budget

    def update(self, plan: StepPlan, end_ns: int, num_steps: int = 1) -> None:
        self._integrate(end_ns)
        used = self._step_used
        if plan.stall_ns:
            self.stall_block_ns += plan.stall_ns * used
        rec = 0
        for req, n in plan.prefills:
            run = self.runs[req.request_id]
            if run.recompute_left:
                r = min(n, run.recompute_left)
                run.recompute_left -= r
                rec += r
        if plan.num_tokens:
            self.forward_ns += end_ns - self._step_start
        if rec:
            self.recompute_tokens += rec
            self.recompute_block_ns += (end_ns - self._step_start) * used * rec / plan.num_tokens
            self.recompute_ns += (end_ns - self._step_start) * rec / plan.num_tokens
        super().update(plan, end_ns, num_steps)

    def repeatable_steps(self, plan: StepPlan) -> tuple[int, bool]:
        """Fast-forward only when nothing but decoding can happen: no KV transfer queued or
        done, no intercept decision or reclaim this step, and — with a dynamic budget or the
        value order, whose admission decisions change with time — an empty ready queue. While
        requests are in a call the run also stops at the next external event (a return)."""
        if self._changed or self.swap_out_q or self.swap_in_q or plan.stall_ns:
            return 1, True
        if len(self.waiting) and (self.token_budget.dynamic or self.use_value):
            return 1, True
        k, sensitive = super().repeatable_steps(plan)
        # a call returning mid-run changes the next schedule (transfers, queue order)
        return k, sensitive or bool(self.paused)

    # ------------------------------------------------------------------ checks and metrics
    def check(self) -> None:
        self.pool.materialize_all()
        kv = self.kv
        queued = [r for r in self.waiting if r.num_blocks]
        paused = list(self.paused.values())
        swapping = list(self.swap_in_q.values())
        resident = [*self.running.values(), *paused, *queued, *swapping]
        kv.check(resident)
        assert self._idle_blocks == sum(r.num_blocks for r in paused + queued)
        assert self._swapin_blocks == sum(r.num_blocks for r in swapping)
        assert len(self.running) <= self.config.max_num_seqs
        assert len(self.pool) + len(self.prefilling) == len(self.running)
        for r in self.running.values():
            assert r.num_blocks == kv.blocks_for(r.num_computed_tokens)
        for r in paused + list(self.waiting) + swapping:
            assert r.num_blocks + kv.host_blocks_of(r) == kv.blocks_for(r.num_computed_tokens)

    def extra_metrics(self) -> dict[str, Any]:
        m_gb = self.kv.block_size * self.env.kv_bytes_per_token / 1e9 / 1e9  # block·ns → GB·s
        return {
            **super().extra_metrics(),
            "num_intercepts": self.num_intercepts,
            "intercepts_preserved": self.resolved[0],
            "intercepts_discarded": self.resolved[1],
            "intercepts_swapped": self.resolved[2],
            "recompute_tokens": self.recompute_tokens,
            "recompute_hit_tokens": self.recompute_hit_tokens,
            "recompute_time_share": self.recompute_ns / max(self.forward_ns, 1),
            "swap_out_tokens": self.swap_out_blocks * self.kv.block_size,
            "swap_in_tokens": self.swap_in_blocks * self.kv.block_size,
            "kv_reclaims": self.num_reclaims,
            "waste_preserve_gb_s": self.idle_block_ns * m_gb,
            "waste_recompute_gb_s": self.recompute_block_ns * m_gb,
            "waste_swap_gb_s": (self.swapin_block_ns + self.stall_block_ns) * m_gb,
            "token_budget_mean": self.budget_sum / max(self.budget_n, 1),
            "swap_link_gbs": self.env.kv_bytes_per_token / self.env.swap_ns_per_token,
            "starvation_promotions": getattr(self.waiting, "num_promoted", 0),
        }


class AugmentedScheduler(AugmentedMixin, MixedBatchingScheduler):
    """Interception over mixed batching (vLLM v1 / Sarathi), the setting of INFERCEPT and
    AugServe."""


@functools.cache
def augmented_class(batching: type[Scheduler]) -> type[AugmentedMixin]:
    """The augmented scheduler over ``batching`` (one class per batching policy)."""
    if batching is MixedBatchingScheduler:
        return AugmentedScheduler
    return type(
        f"Augmented{batching.__name__}",
        (AugmentedMixin, batching),
        {"name": f"augmented+{batching.name}", "__doc__": f"Interception over {batching.name}."},
    )
