"""Exclusive batching (EB): prefill-only and decode-only steps, refilled at a threshold.

"Threshold-Based Exclusive Batching for LLM Inference" (arXiv 2606.00516), as specified in
``docs/research/ebplus.md`` §2–§3.2. The batch holds up to N requests; it decodes until the
running count has dropped enough that refilling pays for a prefill step's fixed cost, then
prefills exactly the vacated slots, with no decode token in a prefill step and no prefill token in
a decode step. The phase machine runs at the start of every step:

* **Phase 0 (initial fill)**: prefill chunks only (pending chunks first, then FCFS admission)
  until N requests have finished their prefill. Leaves early when the queue runs dry (N shrinks to
  what was filled if that is ≥ max(16, N_max/10)) or when the KV cache is "full" (KV escape: N
  shrinks to the KV-derived adaptive N, pending chunks are preempted).
* **Phase 1 (decode)**: one token for every decoding request, nothing else. Refill when
  ``fillable·(N − k) ≥ n·k`` with ``fillable = min(waiting + pending, N − n)`` — the integer form
  of ``fillable/n ≥ θ/(1−θ)`` — and, with the KV-aware gate, the KV cache is not "full". N is
  restored to its cap when the queue holds ≥ half a batch and N has not changed for 2 s.
* **Phase 2 (refill)**: prefill up to ``refill_target`` new requests; back to Phase 1 when done,
  when the queue is empty, when the KV cache is full or when the running set is at N_max.

"KV full" means ``free < τ_KV·total`` with ``τ_KV = clip(N·0.5·μ̂_O/block/total, 0.05, 0.6)``. A
decode step that needs a KV block which is not free preempts the newest running request (by
recompute) and counts an OOM event.

With ``n_bound: forecast`` (the default) N is the steady-state memory-safe N of continuous
batching instead of N̂*, fills and refills take only the queue-head requests the KV forecast
admits (:mod:`tidal.batching.kv_forecast`), and "KV full" means fewer free blocks than decoding
requests (the forecast reserves the growth the τ_KV heuristics guessed at). With ``n_bound:
clt`` (the paper):
the threshold ``k̂ = ⌊θ̂·N⌋`` and the memory-safe ``N̂*`` come from the online controller
(Algorithm 1): every 100 completions the output-length hazard is re-fitted on a 500-sample window
(:mod:`tidal.batching.output_stats`), ``θ* = θ0 + Δθ`` (CFR base + IFR correction, §2.3–§2.4) is
clipped to [max(0.01, θ_floor), θ_max] and smoothed (EMA 0.3), and N̂* (CLT form, §2.5) caps N.

Deviations from the reference scheduler (each keeps memory safety when N̂* is on): by default
(``n_recovery: n_hat``) N recovery and the reset to Phase 0 restore N to ``min(N_max, N̂*)``
instead of N_max, and a memory-safe update restarts the recovery cooldown — so N ≤ N̂* holds
after the first estimate, as the paper states ("effective batch size min(N̂*, N)").
``n_recovery: n_max`` restores the reference's behaviour, under which a saturated queue brings
N back to N_max every 2 s and only the KV-aware gate bounds the batch. A prefill phase that can
schedule nothing (KV exhausted by pending chunks) decodes if anything can decode, else preempts
the newest pending chunk — the reference would stall there.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

from tidal.batching.eb_bound import CLTBound, ForecastBound, ForecastGate
from tidal.batching.eb_control import EBController
from tidal.batching.eb_options import EBOptions
from tidal.batching.kv_forecast import KVForecast
from tidal.core.errors import ConfigError
from tidal.core.request import Request
from tidal.engine.plan import StepPlan
from tidal.engine.policy import BATCHING, BatchingPolicy
from tidal.engine.state import EngineState
from tidal.engine.stats import PolicyStats

INITIAL_FILL, DECODE, REFILL = 0, 1, 2
PHASE_NAMES = ("initial_fill", "decode", "refill")


@BATCHING.register("eb")
class ExclusiveBatching(BatchingPolicy):
    """Exclusive batching: prefill-only and decode-only steps, refilled at a threshold."""

    name = "eb"
    needs_step_costs = True
    Options = EBOptions
    options_key = "eb"

    def __init__(self, state: EngineState, opts: EBOptions, need_forecast: bool = False) -> None:
        super().__init__(state, opts)
        costs = state.config.costs
        if costs is None:
            raise ConfigError(
                "scheduler.batching",
                f"{self.name!r} needs the deployment's step costs (α_p, β_p, α_d, β_d)",
                "build it with SchedulerConfig(costs=tidal.hardware.interference.step_costs(...))",
            )
        self.gate: ForecastGate | None = None
        if opts.bound.n_bound == "forecast" or need_forecast:
            self.gate = ForecastGate(state, opts.bound.eps, opts.bound.cold_reserve)
        self.bound: CLTBound = CLTBound()
        if opts.bound.n_bound == "forecast":
            assert self.gate is not None
            self.bound = ForecastBound(self.gate)
        self.ctl = EBController(state, opts, costs, self.bound, self.gate)
        # phase machine
        self.phase = INITIAL_FILL
        self.prefilled = 0
        self.refill_target = 0
        # accounting
        self.num_refills = 0
        self.num_phase_steps = [0, 0, 0]
        self.eb_ns = 0
        """Time of the steps this policy planned."""
        self.plan_phase: int | None = INITIAL_FILL
        """The phase the last plan was made in (None: an EB⁺ step in MB mode)."""

    @property
    def opts(self) -> EBOptions:
        return self.ctl.opts

    @opts.setter
    def opts(self, value: EBOptions) -> None:
        self.ctl.opts = value

    @property
    def forecast(self) -> KVForecast | None:
        """The KV forecast (None: neither the bound nor a composing policy uses one)."""
        return self.gate.fc if self.gate is not None else None

    # ------------------------------------------------------------------ state events
    def on_preempted(self, req: Request, lost_tokens: int) -> None:
        if self.gate is not None:
            self.gate.stale = True

    def on_finished(self, req: Request, now_ns: int) -> None:
        if self.gate is not None:
            self.gate.stale = True
        self.ctl.observe(req.prompt_len, req.num_output_tokens, now_ns)

    def on_aborted(self, req: Request, now_ns: int) -> None:
        """The running set may have lost a member: re-project the KV bound. No observation:
        an aborted output says nothing about output lengths."""
        if self.gate is not None:
            self.gate.stale = True

    # ------------------------------------------------------------------ KV heuristics
    def kv_full(self) -> bool:
        """ "KV full" by the admission bound (τ_KV, or fewer free blocks than decoders)."""
        return self.bound.kv_full(self.ctl, len(self.state.pool))

    def _min_n(self) -> int:
        return max(16, self.ctl.max_seqs // 10)

    def _adaptive_n(self) -> int:
        """KV-derived N for the KV escape: ⌊capacity / (mean prompt + margin·μ̂_O)⌋, the mean
        prompt over the first 50 running and 50 waiting requests, clipped to [min N, N_max]."""
        st = self.state
        sample = [r.prompt_len for r in islice(st.running.values(), 50)]
        sample += [r.prompt_len for r in islice(iter(st.waiting), 50)]
        prompt = sum(sample) / len(sample) if sample else 512.0
        per_req = prompt + self.ctl.stats.mu_o * self.ctl.opts.phase.output_margin
        n = int(self.ctl.capacity_tokens / per_req)
        return max(self._min_n(), min(self.ctl.max_seqs, n))

    # ------------------------------------------------------------------ phase machine
    def reset_to_initial(self, now_ns: int) -> None:
        ctl = self.ctl
        ctl.set_n(ctl.recovery_target(), now_ns)
        ctl.last_n_change_ns = now_ns
        self.phase = INITIAL_FILL
        self.prefilled = 0
        self.refill_target = 0

    def _preempt_pending(self, plan: StepPlan) -> None:
        """Preempt every partially prefilled request, newest first (so the oldest ends at the
        queue's front)."""
        for req in reversed(list(self.state.prefilling)):
            self.state.preempt(req)
            plan.preempted.append(req)

    def _transition(self, now_ns: int, plan: StepPlan) -> None:
        """Phase transitions before a step (docs/research/ebplus.md §3.2)."""
        st, ctl = self.state, self.ctl
        n_dec = len(st.pool)
        pending = len(st.prefilling)
        waiting = len(st.waiting) + pending
        kv_full = self.kv_full()
        if self.phase == INITIAL_FILL:
            can_go = pending == 0 or kv_full
            if self.prefilled >= ctl.n:
                if can_go:
                    self.phase = DECODE
            elif kv_full and n_dec:
                new_n = min(self._adaptive_n(), self.prefilled)
                if new_n >= self._min_n():
                    ctl.set_n(new_n, now_ns)
                self._preempt_pending(plan)
                self.phase = DECODE
            elif not waiting and n_dec and can_go:
                if self.prefilled >= self._min_n():
                    ctl.set_n(self.prefilled, now_ns)
                self.phase = DECODE
        elif self.phase == DECODE:
            target = ctl.recovery_target()
            cooldown_ns = int(self.ctl.opts.phase.n_update_cooldown_s * 1e9)
            if (
                ctl.n < target
                and waiting >= target // 2
                and now_ns - ctl.last_n_change_ns >= cooldown_ns
            ):
                ctl.set_n(target, now_ns)
            if n_dec and not (self.ctl.opts.phase.kv_gate and kv_full):
                fillable = self.fillable(n_dec, waiting)
                if fillable is not None:
                    self.refill_target = fillable
                    self.prefilled = 0
                    self.phase = REFILL
                    self.num_refills += 1
            elif not n_dec and waiting:
                self.reset_to_initial(now_ns)
        else:  # REFILL
            batch_full = len(st.running) >= ctl.max_seqs
            ready = (
                self.prefilled >= self.refill_target
                or (not waiting and n_dec > 0)
                or kv_full
                or (batch_full and n_dec > 0)
            )
            if ready and (pending == 0 or kv_full):
                if kv_full and pending:
                    self._preempt_pending(plan)
                self.phase = DECODE

    def force_refill(self) -> bool:
        """Start a refill of every waiting request the N cap and the admission bound allow,
        whatever the threshold test says (EB⁺'s ``drain_refill``); False (nothing changed)
        outside Phase 1, with nothing decoding or waiting, or under the KV gate."""
        st, ctl = self.state, self.ctl
        n_dec = len(st.pool)
        waiting = len(st.waiting) + len(st.prefilling)
        if self.phase != DECODE or not n_dec or not waiting:
            return False
        if self.ctl.opts.phase.kv_gate and self.kv_full():
            return False
        fillable = self.bound.limit_refill(min(waiting, max(0, ctl.n - n_dec)))
        if fillable <= 0:
            return False
        self.refill_target = fillable
        self.prefilled = 0
        self.phase = REFILL
        self.num_refills += 1
        return True

    def fillable(self, n_dec: int, waiting: int) -> int | None:
        """The refill size if the threshold test ``fillable·(N − k) ≥ n·k`` passes, else None
        (``fillable = min(waiting + pending, N − n)``: the integer form of
        ``fillable/n ≥ θ/(1−θ)``), limited by the admission bound (tested only once the
        unlimited test passes: the limit is monotone)."""
        ctl = self.ctl
        fillable = min(waiting, max(0, ctl.n - n_dec))
        denom = ctl.n - ctl.k
        if denom <= 0 or fillable * denom < n_dec * ctl.k:
            return None
        fillable = self.bound.limit_refill(fillable)
        if fillable * denom < n_dec * ctl.k:
            return None
        return fillable

    # ------------------------------------------------------------------ steps
    def schedule(self, now_ns: int) -> StepPlan:
        st = self.state
        budget = st.step_budget
        st.waiting.refresh(now_ns)
        self.sched_ns = now_ns
        plan = StepPlan()
        self._transition(now_ns, plan)
        reset = False
        while True:
            if self.phase == DECODE:
                self.ctl.num_oom += self._schedule_decodes(plan)
                if plan.num_decodes or not (len(st.waiting) or st.prefilling):
                    break
                self.reset_to_initial(now_ns)  # everything that decoded was preempted
                reset = True
                continue
            self._schedule_prefills(plan, now_ns, budget)
            if plan.prefills:
                break
            # Nothing to prefill (budget, KV or target exhausted): decode if anything can;
            # else give way to the oldest pending chunk; else restart the fill once.
            if len(st.pool):
                self.phase = DECODE
                continue
            if st.prefilling:
                victim = st.prefilling[-1]
                st.preempt(victim)
                plan.preempted.append(victim)
                continue
            if len(st.waiting) and not reset:
                self.reset_to_initial(now_ns)
                reset = True
                continue
            break
        self.plan_phase = self.phase
        return plan

    def _schedule_decodes(self, plan: StepPlan) -> int:
        """Decode-only step; each preemption it needs is an OOM event (§3.2)."""
        before = len(plan.preempted)
        self.state.schedule_running(plan, 0, prefills=False)
        return len(plan.preempted) - before

    def _schedule_prefills(self, plan: StepPlan, now_ns: int, budget: int) -> None:
        """Prefill-only step: continue pending chunks (all of them, budget and KV permitting),
        then admit from the queue while fewer than the phase's target have been prefilled."""
        st = self.state
        target = self.ctl.n if self.phase == INITIAL_FILL else self.refill_target
        budget, done = st.continue_prefills(plan, budget)
        self.prefilled += done
        remaining = target - self.prefilled
        test = self.bound.admission_test()
        _, done = st.admit(plan, budget, now_ns, test=test, limit=max(remaining, 0))
        self.prefilled += done

    def repeatable_steps(self, plan: StepPlan) -> tuple[int, bool]:
        """A decode-phase plan repeats until the first departure or KV shortage when the next
        step's refill test fails: its inputs (decoding count, queue, N, k) are fixed meanwhile
        and "KV full" can only become truer as free blocks shrink. Not repeatable while an N
        recovery could fire (it depends on time). Arrivals matter unless the refill is already
        capped by N − n."""
        if plan.prefills or plan.preempted or not plan.num_decodes or self.phase != DECODE:
            return 1, True
        st, ctl = self.state, self.ctl
        waiting = len(st.waiting) + len(st.prefilling)
        target = ctl.recovery_target()
        if ctl.n < target and waiting >= target // 2:
            return 1, True
        # Phase 1 may have been entered by this very schedule, before its refill test ran.
        if self.fillable(plan.num_decodes, waiting) is not None and not (
            self.ctl.opts.phase.kv_gate and self.kv_full()
        ):
            return 1, True
        m = st.pool.steps_until_departure_or_full(st.kv.num_free_blocks)
        saturated = waiting >= max(0, ctl.n - plan.num_decodes) and ctl.n >= target
        return m, not saturated

    def before_apply(self, plan: StepPlan, end_ns: int, num_steps: int) -> None:
        if self.plan_phase is not None:
            self.num_phase_steps[self.plan_phase] += num_steps
            self.eb_ns += end_ns - self.sched_ns

    # ------------------------------------------------------------------ results
    def stats(self) -> PolicyStats:
        counters = {
            "mode_switches": 0,
            "eb_refills": self.num_refills,
            "eb_oom_preemptions": self.ctl.num_oom,
        }
        return PolicyStats(counters, eb_ns=self.eb_ns)

    def extra_metrics(self) -> dict[str, Any]:
        return {**self.stats().metrics(), **self.gauges()}

    def gauges(self) -> dict[str, Any]:
        """The controller's current values (not summable)."""
        ctl = self.ctl
        steps = sum(self.num_phase_steps) or 1
        return {
            "eb_prefill_step_share": (self.num_phase_steps[0] + self.num_phase_steps[2]) / steps,
            "eb_theta": ctl.theta,
            "eb_k": ctl.k,
            "eb_n": ctl.n,
            "eb_n_hat": ctl.n_hat,
            "eb_p0": ctl.stats.p0,
            "eb_eta": ctl.stats.eta,
        }

    def extra_tables(self) -> dict[str, dict[str, Any]]:
        return {"eb": self.ctl.history_columns()}
