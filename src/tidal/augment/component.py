"""Augmented requests (tool calls): interception as a component over any batching policy.

:class:`Augmentation` is a component of a :class:`~tidal.engine.scheduler.Scheduler`: it
listens to the engine state's events (a request started, was preempted, finishes, reached a
call point; blocks are needed) and supplies each step's token budget, so it composes with any
batching policy of ``BATCHING`` (mb, eb, ebplus) — AugServe and EB⁺ in one engine. The batching
policy keeps its step structure (MB's mixed steps, EB's phase machine). Runs build it through
:func:`tidal.engine.build.build_scheduler` (selected by ``workload.augmented``,
``augment.serving_policy`` and ``scheduler.batching``).

A request whose :class:`~tidal.core.augmented.AugmentedSpec` says it calls a tool after
output token ``N_k`` joins the decode pool with ``N_k`` as its departure target; when it
departs (or when a prefill chunk samples token ``N_k``) it **pauses**: it leaves the running set
with its KV on the GPU, the intercept policy decides what happens to that KV, and the driver
is told when the call returns (``on_pause(req, now + T_k)``; the simulator turns it into a
timer). :meth:`resume` appends the ``a_k`` returned tokens and makes the request ready again:

* KV on the GPU (Preserve) → the ready queue, deficit ``1 + a_k`` tokens;
* KV freed (Discard) → the ready queue, deficit = the whole context (recompute) + ``a_k``;
* KV (partly) on the host (Swap) → swapped back in, chunk by chunk, then the ready queue.

Every step: the intercept policy's per-iteration decisions, the ordering's refresh, the token
budget (static or AugServe's dynamic one), then the batching policy, then the KV transfers
(:mod:`tidal.augment.moves`). Before a running request is preempted, idle contexts are
reclaimed; admission reclaims only for the head of an empty instance (no deadlock on memory
held by idle requests).

GPU-memory waste is integrated exactly over time; the accounting, the invariant check and the
metrics are in :mod:`tidal.augment.accounting`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidal.augment.accounting import account_step, check_component, component_metrics, integrate
from tidal.augment.budget import StaticBudget, TokenBudget
from tidal.augment.env import AugmentEnv
from tidal.augment.intercept import InterceptPolicy, PreservePolicy
from tidal.augment.moves import cache_outlook, reclaim, transfer
from tidal.augment.ordering import InterceptFCFSQueue, ValueQueue
from tidal.augment.predictor import OraclePredictor, Predictor
from tidal.augment.state import AugRun, KVMode
from tidal.augment.value import CostEnv, remaining_value
from tidal.core.augmented import AugmentedSpec
from tidal.core.request import Request, RequestState
from tidal.engine.plan import StepPlan
from tidal.engine.state import EngineState, StateListener

__all__ = ["AugmentEnv", "Augmentation"]


class Augmentation(StateListener):
    """Interception of tool-calling requests over an engine state: pause, KV handling during
    calls, resume, reclaim, the ready-queue order's keys and the step's token budget."""

    def __init__(
        self,
        state: EngineState,
        env: AugmentEnv,
        intercept: InterceptPolicy | None = None,
        budget: TokenBudget | None = None,
        predictor: Predictor | None = None,
        value_form: str = "memory",
        stage2: bool = True,
    ) -> None:
        self.state = state
        config, kv = state.config, state.kv
        self.on_pause: Callable[[Request, int], None] | None = None
        """Set by the driver: a request paused on an external call that returns at the given
        time (ns); the driver must then call :meth:`resume`."""
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
        self._now = 0
        self.last_pressure_ns = -1
        """When the KV cache last ran out (a preemption, or a reclaim of idle contexts)."""
        self.fallback_steps = 0
        """Steps in the dynamic budget's pressure fallback (not a metric: metrics stay)."""
        self.last_budget = self.token_budget.budget(self)
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

    def attach(self, state: EngineState) -> None:
        """Listen to ``state``'s events and decide where its requests stop for calls."""
        state.add_listener(self)
        state.stops = self

    # ------------------------------------------------------------------ keys and values
    def _stage_key(self, req: Request) -> tuple[float, ...]:
        return (0.0 if req.num_blocks else 1.0, float(req.arrival_ns))

    def _value_key(self, req: Request) -> tuple[float, float, int]:
        run = self.runs[req.request_id]
        return (0.0 if req.num_blocks else 1.0), run.value, run.ready_ns

    def cost_env(self, cached: bool = False) -> CostEnv:
        """The value's cost snapshot (``cached``: the request's blocks can re-hit the
        prefix cache)."""
        return CostEnv(
            self.env.profile,
            max(self.last_budget, 1),
            self.env.swap_ns_per_token / 1e9,
            self.running_gpu_tokens(),
            self.host_room_blocks() > 0,
            cache_outlook(self) if cached else None,
            self.kv.block_size,
        )

    def _value(self, req: Request, run: AugRun) -> float:
        return remaining_value(
            run.pred,
            prompt=req.prompt_len,
            context=req.num_tokens,
            pending=req.num_tokens - req.num_computed_tokens,
            generated=req.num_output_tokens,
            calls_done=run.k,
            env=self.cost_env(req.content is not None),
            form=self.value_form,
        )

    # ------------------------------------------------------------------ queries
    def note_pressure(self) -> None:
        """The KV cache ran out now (the dynamic budget's fallback, :mod:`.budget`)."""
        self.last_pressure_ns = self._now

    def has_work(self) -> bool:
        """Requests in a call or swapping in (beyond the state's queue and running set)."""
        return bool(self.paused) or bool(self.swap_in_q)

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

    # ------------------------------------------------------------------ pause and resume
    def target(self, req: Request) -> int:
        """Leave the decode pool at the next call point (or the end)."""
        return self.runs[req.request_id].next_target(req.max_output_len)

    def stopped(self, req: Request, now_ns: int) -> bool:
        run = self.runs[req.request_id]
        if run.at_call_point(req.num_output_tokens):
            self._pause(req, run, now_ns)
            return True
        return False

    def _pause(self, req: Request, run: AugRun, now_ns: int) -> None:
        assert run.spec is not None
        self.state.pause(req)
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
        integrate(self, now_ns)
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
            self.state.ready(req)
            self._idle_blocks -= req.num_blocks
            self._swapin_blocks += req.num_blocks
            self.swap_in_q[req.request_id] = req
        else:
            run.mode = KVMode.GPU
            self.enqueue(req, run, now_ns)

    def enqueue(self, req: Request, run: AugRun, now_ns: int) -> None:
        self.state.ready(req)
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

    def adopt_idle(self, req: Request, now_ns: int) -> None:
        """``req`` was queued holding blocks this component did not see it take (a
        disaggregated decode leg whose prompt KV was just loaded): idle KV until it starts."""
        integrate(self, now_ns)
        self._idle_blocks += req.num_blocks

    def start_swap_out(self, req: Request) -> None:
        run = self.runs[req.request_id]
        run.mode = KVMode.SWAPPING_OUT
        run.swapped_this_call = True
        self.swap_out_q[req.request_id] = req
        self._changed = True

    def _transfer(self, plan: StepPlan) -> None:
        transfer(self, plan)

    # ------------------------------------------------------------------ state events
    def on_started(self, req: Request) -> None:
        self._idle_blocks -= req.num_blocks

    def on_prefix_hit(self, req: Request, hit_tokens: int) -> None:
        """A re-admitted context re-hit its own cached blocks: they are not recomputed."""
        run = self.runs[req.request_id]
        spared = min(hit_tokens, run.recompute_left)
        run.recompute_left -= spared
        self.recompute_hit_tokens += spared

    def on_preempted(self, req: Request, lost_tokens: int) -> None:
        """The lost context is recompute work; the request re-enters the queue with its
        value."""
        run = self.runs[req.request_id]
        run.recompute_left += lost_tokens
        run.ready_ns = self._now
        self.note_pressure()
        if self.use_value and self.stage2:
            run.value = self._value(req, run)

    def before_finish(self, req: Request) -> None:
        self.predictor.observe_finish(req)
        del self.runs[req.request_id]

    def reclaim(self, num_blocks: int, keep: Request | None = None) -> bool:
        return reclaim(self, num_blocks, keep)

    def abort(self, req: Request, now_ns: int) -> None:
        """Drop a request wherever it is (also in a call or swapping in); its GPU and host
        blocks are freed; a pending call return is then ignored."""
        integrate(self, now_ns)
        rid = req.request_id
        if rid in self.paused or rid in self.swap_in_q:
            self.discard(req)
            self.paused.pop(rid, None)
            self.state.aborted(req, now_ns)
        elif req.state == RequestState.WAITING:
            self.waiting.remove(req)
            self.discard(req)
            self.state.aborted(req, now_ns)
        else:
            self.state.abort(req, now_ns)
        self.runs.pop(rid, None)

    # ------------------------------------------------------------------ step
    def before_schedule(self, now_ns: int) -> int:
        """Per-iteration work before the batching policy decides: the intercept policy's
        decisions, the ordering's refresh, the step's token budget (returned)."""
        integrate(self, now_ns)
        self._now = now_ns
        self._changed = False
        self.intercept.per_iteration(self, now_ns)
        self.waiting.refresh(now_ns)
        budget = max(self.token_budget.budget(self), 1)
        self.last_budget = self.state.step_budget = budget
        return budget

    def after_schedule(self, plan: StepPlan, now_ns: int) -> None:
        """The step's KV transfers, and the memory it starts with (waste accounting).

        ``token_budget_mean`` averages the budget over the steps it could shape: a prefill
        scheduled, or requests left waiting. Fast-forward never covers such a step (it needs
        a decode-only plan, and with a dynamic budget an empty queue:
        :meth:`blocks_fast_forward`), so the mean is the same with ``--no-fast-forward``; a
        mean over every decision was not (fast-forward makes one for k decode-only steps)."""
        if plan.prefills or len(self.waiting):
            self.budget_sum += self.last_budget
            self.budget_n += 1
        self._transfer(plan)
        plan.events_see_step = self.use_value  # arrivals and returns are valued from the state
        self._step_start = now_ns
        self._step_used = self.kv.num_blocks - self.kv.num_free_blocks

    def before_apply(self, plan: StepPlan, end_ns: int) -> None:
        """Waste accounting of the finished step (before the state applies it)."""
        account_step(self, plan, end_ns)

    def blocks_fast_forward(self, plan: StepPlan) -> bool:
        """Fast-forward only when nothing but decoding can happen: no KV transfer queued or
        done, no intercept decision or reclaim this step, and — with a dynamic budget or the
        value order, whose admission decisions change with time — an empty ready queue."""
        if self._changed or self.swap_out_q or self.swap_in_q or plan.stall_ns:
            return True
        if self.intercept.unsettled:  # a kept context's choice may change within the run
            return True
        return bool(len(self.waiting) and (self.token_budget.dynamic or self.use_value))

    def waits_for_returns(self) -> bool:
        """Whether a run must end at the next external event: a call returning mid-run
        changes the next schedule (transfers, queue order); with the value order, an arrival
        or a return reads the state of the step in flight (the value's KV and budget terms),
        which only a run that ends at the event has (``StepPlan.events_see_step``)."""
        return bool(self.paused) or self.use_value

    # ------------------------------------------------------------------ checks and metrics
    def check(self) -> None:
        check_component(self)

    def extra_metrics(self) -> dict[str, Any]:
        return component_metrics(self)
