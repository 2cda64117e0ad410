"""Exclusive batching (EB): prefill-only and decode-only steps, refilled at a threshold.

"Threshold-Based Exclusive Batching for LLM Inference" (arXiv 2606.00516), as specified in
``shared/research/ebplus.md`` §2–§3.2. The batch holds up to N requests; it decodes until the
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
admits (:mod:`tidal.engine.kv_forecast`), and "KV full" means fewer free blocks than decoding
requests (the forecast reserves the growth the τ_KV heuristics guessed at). With ``n_bound:
clt`` (the paper):
the threshold ``k̂ = ⌊θ̂·N⌋`` and the memory-safe ``N̂*`` come from the online controller
(Algorithm 1): every 100 completions the output-length hazard is re-fitted on a 500-sample window
(:mod:`tidal.engine.output_stats`), ``θ* = θ0 + Δθ`` (CFR base + IFR correction, §2.3–§2.4) is
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

import math
from collections.abc import Callable
from itertools import islice
from typing import Any

import numpy as np

from tidal.core.errors import ConfigError
from tidal.core.kv import KVBlockManager
from tidal.engine import eb_theory as theory
from tidal.engine.kv_forecast import KVForecast
from tidal.engine.ordering import WaitingQueue
from tidal.engine.output_stats import OutputStats
from tidal.engine.plan import StepPlan
from tidal.engine.scheduler import BATCHING, Scheduler, SchedulerConfig

INITIAL_FILL, DECODE, REFILL = 0, 1, 2
PHASE_NAMES = ("initial_fill", "decode", "refill")


@BATCHING.register("eb")
class ExclusiveBatchingScheduler(Scheduler):
    name = "eb"

    def __init__(
        self, config: SchedulerConfig, kv: KVBlockManager, waiting: WaitingQueue | None = None
    ) -> None:
        super().__init__(config, kv, waiting)
        if config.costs is None:
            raise ConfigError(
                "scheduler.batching",
                f"{self.name!r} needs the deployment's step costs (α_p, β_p, α_d, β_d)",
                "build it with SchedulerConfig(costs=tidal.hardware.interference.step_costs(...))",
            )
        self.costs = config.costs
        self.opts = opts = config.eb
        self.stats = OutputStats(opts.window, opts.update_every, opts.min_samples)
        self.capacity_tokens = kv.num_blocks * kv.block_size
        max_seqs = config.max_num_seqs
        # controller state (Algorithm 1)
        self.theta = opts.theta_fixed if opts.theta_fixed is not None else opts.theta_cold
        """Smoothed switching fraction θ̂ (the reference's ``pd_k_ratio``)."""
        self.theta_initialized = False
        self.n_hat = max_seqs
        """Memory-safe cap N̂* (N_max until the first estimate, or when auto-N is off)."""
        self.n = max_seqs
        """Current batch size N."""
        self.k = 1
        self._set_k()
        # KV forecast (``n_bound: forecast``; EB⁺'s ``mb_cap: forecast``)
        self.n_stat: int | None = None
        """Steady-state memory-safe N of continuous batching (set with the forecast)."""
        self.forecast: KVForecast | None = None
        if self._uses_forecast():
            self.forecast = KVForecast(self.capacity_tokens, kv.block_size, opts.eps)
        self._room_cache: tuple[int, list[Any], int, int] | None = None
        self._fc_stale = True
        """The projection misses a change of the running set: re-project before the next
        admission decision. Only departures and preemptions set it (and EB⁺'s mode switches),
        so a decision stays a function of events that end a fast-forwarded run."""
        # phase machine
        self.phase = INITIAL_FILL
        self.prefilled = 0
        self.refill_target = 0
        self.last_n_change_ns = 0
        # accounting
        self.num_refills = 0
        self.num_oom = 0
        self.num_phase_steps = [0, 0, 0]
        self._plan_phase: int | None = INITIAL_FILL
        """The phase the last plan was made in (None: an EB⁺ step in MB mode)."""
        self._sched_ns = 0
        self._history: dict[str, list[Any]] = {
            k: []
            for k in (
                "time_ns",
                "event",
                "completed",
                "p0",
                "eta",
                "mu_l",
                "mu_o",
                "theta0",
                "delta_theta",
                "theta",
                "k_hat",
                "n",
                "n_hat",
                "oom_events",
            )
        }

    # ------------------------------------------------------------------ controller
    def _set_k(self) -> None:
        fixed = self.opts.k_fixed
        self.k = fixed if fixed is not None else max(1, int(self.theta * self.n))

    def _set_n(self, n: int, now_ns: int, stamp: bool = True) -> None:
        """Set N (and k̂ = ⌊θ̂·N⌋); ``stamp`` restarts the N-recovery cooldown."""
        if n != self.n:
            self.n = n
            self._set_k()
            if stamp:
                self.last_n_change_ns = now_ns

    def _n_target(self) -> int:
        """The memory-safe batch size min(N_max, N̂*)."""
        return min(self.config.max_num_seqs, self.n_hat)

    def _recovery_target(self) -> int:
        """What N recovery and resets restore N to (``n_recovery``): min(N_max, N̂*), or N_max
        as the reference scheduler."""
        if self.opts.n_recovery == "n_max":
            return self.config.max_num_seqs
        return self._n_target()

    def _refit(self, now_ns: int) -> None:
        """Algorithm 1's cold path: hazard → θ0 + Δθ → clip → EMA → N̂* → k̂ = ⌊θ̂·N⌋."""
        opts, c, stats = self.opts, self.costs, self.stats
        p0, eta = stats.refit_hazard()
        theta0 = theory.theta_cfr(p0, c.alpha_p, c.alpha_d, exact=opts.theta_form == "exact")
        dtheta = 0.0
        if opts.ifr and eta > 0:
            dtheta = theory.ifr_correction(theta0, p0, eta, c.beta_d * self.n / c.alpha_d)
        if opts.theta_fixed is None:
            lo = max(theory.THETA_HARD_MIN, opts.theta_floor)
            star = max(lo, min(theta0 + dtheta, opts.theta_max))
            if not self.theta_initialized:
                self.theta = star
                self.theta_initialized = True
            else:
                a = opts.theta_ema
                self.theta = a * star + (1.0 - a) * self.theta
        if self.forecast is not None:
            window = stats.window()
            self.n_stat = theory.stationary_safe_n(
                self.capacity_tokens,
                stats.mu_l,
                stats.var_l,
                *theory.output_moments(window),
                opts.eps,
                self.config.max_num_seqs,
            )
            self.forecast.set_outputs(window, opts.forecast_recent)
            self._fc_stale = True
        if opts.auto_n:
            mu_l = max(1.0, stats.mu_l)
            if opts.n_bound == "forecast" and self.n_stat is not None:
                self.n_hat = self.n_stat
            else:
                self.n_hat = theory.memory_safe_n(
                    self.capacity_tokens, self.theta, p0, mu_l, opts.eps, self.config.max_num_seqs
                )
            # the reference's memory-safe update leaves the recovery clock alone
            self._set_n(self.n_hat, now_ns, stamp=opts.n_recovery == "n_hat")
        self._set_k()
        self._record(now_ns, "estimate", theta0, dtheta)

    def _record(self, now_ns: int, event: str, theta0: float, dtheta: float) -> None:
        s = self.stats
        row = (
            now_ns,
            event,
            s.num_completed,
            s.p0,
            s.eta,
            s.mu_l,
            s.mu_o,
            theta0,
            dtheta,
            self.theta,
            self.k,
            self.n,
            self.n_hat,
            self.num_oom,
        )
        for key, v in zip(self._history, row, strict=True):
            self._history[key].append(v)

    def _observe_completion(self, req_prompt: int, req_output: int, now_ns: int) -> None:
        """Feed a completion to the estimator in the reference order: window (and the
        re-fit it may trigger), the μ̂_O/p̂ batch EMAs, then the μ̂_L EMA."""
        if req_output > 0:
            if self.stats.push_output(req_output):
                self._refit(now_ns)
            if self.stats.push_batch(req_output):
                self._on_batch(now_ns)
        self.stats.push_prompt(req_prompt)

    def _on_batch(self, now_ns: int) -> None:
        """Every ``update_every`` completions, after the μ̂_O/p̂ update (EB⁺ evaluates here)."""

    def _finish(self, req: Any, now_ns: int) -> None:
        self._fc_stale = True
        super()._finish(req, now_ns)
        self._observe_completion(req.prompt_len, req.num_output_tokens, now_ns)

    def _preempt(self, req: Any) -> None:
        self._fc_stale = True
        super()._preempt(req)

    # ------------------------------------------------------------------ KV forecast
    def _uses_forecast(self) -> bool:
        return self.opts.n_bound == "forecast"

    def _running_state(self) -> tuple[np.ndarray, np.ndarray, int]:
        """Token counts and ages of the running set (decoding, then pending prefills counted
        whole) and the tokens held outside it (a composed policy's idle contexts)."""
        kv = self.kv
        tokens, ages = self.pool.tokens_and_ages()
        held = int(((tokens - 1 + kv.block_size - 1) // kv.block_size).sum())
        pending = self.prefilling
        if pending:
            tokens = np.concatenate([tokens, [r.num_tokens for r in pending]])
            ages = np.concatenate([ages, [r.num_output_tokens for r in pending]])
            held += sum(r.num_blocks for r in pending)
        other = kv.num_blocks - kv.num_free_blocks - held
        return tokens, ages, max(0, other) * kv.block_size

    def _forecast_ready(self) -> KVForecast | None:
        """The forecast with its projection of the running set current (None: not in use or
        no estimate yet)."""
        fc = self.forecast
        if fc is None or not fc.ready:
            return None
        if self._fc_stale:
            tokens, ages, reserved = self._running_state()
            fc.project(tokens, ages, reserved_tokens=reserved)
            self._fc_stale = False
        return fc

    def _forecast_test(self) -> Callable[[Any], bool] | None:
        """Admission test that commits accepted requests to the projection (None: no test).
        Before the first estimate: the ``cold_reserve`` headroom test.

        While the projection is stale (the running set lost a member since it was made) a
        candidate that fits even if every running request and it run through the whole
        horizon — ``Σ(x_i + T + b/2) + z·sqrt(Σ(x_i + T)²/4) ≤ C`` (q ≤ 1, q(1 − q) ≤ 1/4) —
        is admitted without projecting: a sufficient condition of :meth:`KVForecast.admit`,
        so the decision is the forecast's; only the projection is made later, at the first
        candidate that needs it (from the state of that step, a function of the step's state
        as before). On a lightly loaded instance most admissions take this O(1) path."""
        fc = self.forecast
        if fc is None or not fc.ready:
            return self._cold_test()
        horizon, hb = float(fc.s[-1]), fc.half_block
        worst: list[float] = []  # [Σ(x_i + T + b/2) + reserved, Σ(x_i + T)²/4], at the first call

        def test(req: Any) -> bool:
            if self._fc_stale:
                if not worst:
                    x, _, reserved = self._running_state()
                    xt = x + horizon
                    worst.extend((float(xt.sum()) + len(x) * hb + reserved, float(xt @ xt) / 4.0))
                worst_m, worst_v = worst
                xt = req.num_tokens + horizon
                m, v = worst_m + xt + hb, worst_v + xt * xt / 4.0
                if m + math.sqrt(v * fc.ell) <= fc.capacity:
                    worst[:] = (m, v)
                    return True
                self._forecast_ready()
            if fc.admit(req.num_tokens, req.num_output_tokens):
                return True
            if not self.running:  # never refuse an empty instance (liveness)
                self._fc_stale = True
                return True
            return False

        return test

    def _cold_test(self) -> Callable[[Any], bool] | None:
        """Before any output length is known, admit while the running set's whole contexts
        and the candidate's fit in ``(1 − cold_reserve)`` of the cache. Contexts only grow
        until a departure, so a refusal holds until one (exact under fast-forward)."""
        reserve = self.opts.cold_reserve
        if self.forecast is None or reserve <= 0:
            return None
        kv = self.kv
        limit = (1.0 - reserve) * kv.num_blocks
        committed = kv.num_blocks - kv.num_free_blocks
        committed += sum(kv.blocks_for(r.num_tokens) - r.num_blocks for r in self.prefilling)

        def test(req: Any) -> bool:
            nonlocal committed
            need = kv.blocks_for(req.num_tokens) - req.num_blocks
            if committed + need <= limit or not self.running:
                committed += need
                return True
            return False

        return test

    # ------------------------------------------------------------------ KV heuristics
    def _kv_threshold(self) -> float:
        """τ_KV = clip(N·margin·μ̂_O / block_size / total_blocks, 0.05, kv_threshold_max)."""
        kv = self.kv
        blocks = self.n * self.stats.mu_o * self.opts.output_margin / kv.block_size
        return max(0.05, min(self.opts.kv_threshold_max, blocks / kv.num_blocks))

    def _kv_full(self) -> bool:
        """Free KV below τ_KV of the cache; with ``n_bound: forecast`` (once estimated) the
        forecast reserves the decode growth itself, so "full" means fewer free blocks than
        decoding requests (the next block boundary could not be crossed by all of them)."""
        if self.opts.n_bound == "forecast" and self.forecast is not None and self.forecast.ready:
            return self.kv.num_free_blocks < len(self.pool)
        return self.kv.num_free_blocks < self.kv.num_blocks * self._kv_threshold()

    def _min_n(self) -> int:
        return max(16, self.config.max_num_seqs // 10)

    def _adaptive_n(self) -> int:
        """KV-derived N for the KV escape: ⌊capacity / (mean prompt + margin·μ̂_O)⌋, the mean
        prompt over the first 50 running and 50 waiting requests, clipped to [min N, N_max]."""
        sample = [r.prompt_len for r in islice(self.running.values(), 50)]
        sample += [r.prompt_len for r in islice(iter(self.waiting), 50)]
        prompt = sum(sample) / len(sample) if sample else 512.0
        per_req = prompt + self.stats.mu_o * self.opts.output_margin
        n = int(self.capacity_tokens / per_req)
        return max(self._min_n(), min(self.config.max_num_seqs, n))

    # ------------------------------------------------------------------ phase machine
    def _enter_decode(self) -> None:
        self.phase = DECODE

    def _reset_to_initial(self, now_ns: int) -> None:
        self._set_n(self._recovery_target(), now_ns)
        self.last_n_change_ns = now_ns
        self.phase = INITIAL_FILL
        self.prefilled = 0
        self.refill_target = 0

    def _preempt_pending(self) -> list[Any]:
        """Preempt every partially prefilled request, newest first (so the oldest ends at the
        queue's front)."""
        out = []
        for req in reversed(list(self.prefilling)):
            self._preempt(req)
            out.append(req)
        return out

    def _transition(self, now_ns: int, plan: StepPlan) -> None:
        """Phase transitions before a step (ebplus.md §3.2)."""
        n_dec = len(self.pool)
        pending = len(self.prefilling)
        waiting = len(self.waiting) + pending
        kv_full = self._kv_full()
        if self.phase == INITIAL_FILL:
            can_go = pending == 0 or kv_full
            if self.prefilled >= self.n:
                if can_go:
                    self._enter_decode()
            elif kv_full and n_dec:
                new_n = min(self._adaptive_n(), self.prefilled)
                if new_n >= self._min_n():
                    self._set_n(new_n, now_ns)
                plan.preempted.extend(self._preempt_pending())
                self._enter_decode()
            elif not waiting and n_dec and can_go:
                if self.prefilled >= self._min_n():
                    self._set_n(self.prefilled, now_ns)
                self._enter_decode()
        elif self.phase == DECODE:
            target = self._recovery_target()
            cooldown_ns = int(self.opts.n_update_cooldown_s * 1e9)
            if (
                self.n < target
                and waiting >= target // 2
                and now_ns - self.last_n_change_ns >= cooldown_ns
            ):
                self._set_n(target, now_ns)
            if n_dec and not (self.opts.kv_gate and kv_full):
                fillable = self._fillable(n_dec, waiting)
                if fillable is not None:
                    self.refill_target = fillable
                    self.prefilled = 0
                    self.phase = REFILL
                    self.num_refills += 1
            elif not n_dec and waiting:
                self._reset_to_initial(now_ns)
        else:  # REFILL
            batch_full = len(self.running) >= self.config.max_num_seqs
            ready = (
                self.prefilled >= self.refill_target
                or (not waiting and n_dec > 0)
                or kv_full
                or (batch_full and n_dec > 0)
            )
            if ready and (pending == 0 or kv_full):
                if kv_full and pending:
                    plan.preempted.extend(self._preempt_pending())
                self._enter_decode()

    def _fillable(self, n_dec: int, waiting: int) -> int | None:
        """The refill size if the threshold test ``fillable·(N − k) ≥ n·k`` passes, else None
        (``fillable = min(waiting + pending, N − n)``; the integer form of θ/(1−θ)). With
        ``n_bound: forecast``, ``fillable`` is further limited to the queue-head requests the KV
        forecast admits (tested only once the unlimited test passes: it is monotone)."""
        fillable = min(waiting, max(0, self.n - n_dec))
        denom = self.n - self.k
        if denom <= 0 or fillable * denom < n_dec * self.k:
            return None
        if self.opts.n_bound == "forecast":
            fc = self._forecast_ready()
            if fc is not None:
                # pending chunks are running already (in the projection); test the queue heads
                pending = min(len(self.prefilling), fillable)
                fillable = pending + self._room(fc, fillable - pending)
                if fillable * denom < n_dec * self.k:
                    return None
        return fillable

    def _room(self, fc: KVForecast, count: int) -> int:
        """:meth:`KVForecast.room` of the first ``count`` queued requests, reusing the last
        answer while the projection and the requests it depended on are unchanged (a refill
        test that fails re-asks every decode step until a departure): the answer ``r`` depends
        on the first ``r + 1`` candidates only, or on all ``count`` when all fit."""
        cached = self._room_cache
        if cached is not None and cached[0] == fc.version:
            _, heads, r, asked = cached
            # a refusal at index r < count, or all of exactly ``count`` fitting
            if (r < asked and r < count) or r == asked == count:
                same = len(self.waiting) >= len(heads) and all(
                    a is b
                    for a, b in zip(heads, islice(iter(self.waiting), len(heads)), strict=True)
                )
                if same:
                    return r
        heads = list(islice(iter(self.waiting), count))
        r = fc.room((q.num_tokens, q.num_output_tokens) for q in heads)
        self._room_cache = (fc.version, heads[: r + 1], r, len(heads))
        return r

    # ------------------------------------------------------------------ steps
    def schedule(self, now_ns: int) -> StepPlan:
        self.waiting.refresh(now_ns)
        self._sched_ns = now_ns
        plan = StepPlan()
        self._transition(now_ns, plan)
        reset = False
        while True:
            if self.phase == DECODE:
                self._schedule_decodes(plan)
                if plan.num_decodes or not (len(self.waiting) or self.prefilling):
                    break
                self._reset_to_initial(now_ns)  # everything that decoded was preempted
                reset = True
                continue
            self._schedule_prefills(plan, now_ns)
            if plan.prefills:
                break
            # Nothing to prefill (budget, KV or target exhausted): decode if anything can;
            # else give way to the oldest pending chunk; else restart the fill once.
            if len(self.pool):
                self._enter_decode()
                continue
            if self.prefilling:
                victim = self.prefilling[-1]
                self._preempt(victim)
                plan.preempted.append(victim)
                continue
            if len(self.waiting) and not reset:
                self._reset_to_initial(now_ns)
                reset = True
                continue
            break
        self._plan_phase = self.phase
        return plan

    def _schedule_prefills(self, plan: StepPlan, now_ns: int) -> None:
        """Prefill-only step: continue pending chunks (all of them, budget and KV permitting),
        then admit from the queue while fewer than the phase's target have been prefilled."""
        kv = self.kv
        budget = self.step_budget()
        cap = self.config.long_prefill_token_threshold
        target = self.n if self.phase == INITIAL_FILL else self.refill_target
        remaining = target - self.prefilled
        for req in list(self.prefilling):
            if budget <= 0:
                break
            deficit, n = self._chunk(req, budget, cap)
            if kv.blocks_for(req.num_computed_tokens + n) - req.num_blocks > kv.num_free_blocks:
                continue
            plan.add_chunk(req, n)
            kv.allocate(req, req.num_computed_tokens + n)
            budget -= n
            if n == deficit:
                self.prefilled += 1
                remaining -= 1
        self.admission_blocked_by_kv = False
        waiting = self.waiting
        max_seqs = self.config.max_num_seqs
        kv_ok = self._forecast_test() if self.opts.n_bound == "forecast" else None
        while len(waiting) and budget > 0 and remaining > 0 and len(self.running) < max_seqs:
            req = waiting.peek()
            hit, shared = kv.match_prefix(req)  # prefix caching (see Scheduler._admit_waiting)
            deficit, n = self._chunk(req, budget, cap, hit)
            blocks = kv.blocks_for(req.num_computed_tokens + hit + n) - req.num_blocks - shared
            if not kv.can_admit(blocks) or (kv_ok is not None and not kv_ok(req)):
                self.admission_blocked_by_kv = True
                break
            waiting.pop()
            self._start_running(req, now_ns)
            kv.commit_prefix(req, hit)
            if hit:
                self._on_prefix_hit(req, hit)
            plan.add_chunk(req, n)
            kv.allocate(req, req.num_computed_tokens + n)
            budget -= n
            if n == deficit:
                self.prefilled += 1
                remaining -= 1

    @staticmethod
    def _chunk(req: Any, budget: int, cap: int, hit: int = 0) -> tuple[int, int]:
        """(tokens still to prefill, this step's chunk: within the budget and the per-request
        cap ``long_prefill_token_threshold``, 0 = none); ``hit``: prefix-cached tokens."""
        deficit = req.num_tokens - req.num_computed_tokens - hit
        return deficit, min(deficit, budget, cap) if cap else min(deficit, budget)

    def _schedule_decodes(self, plan: StepPlan) -> None:
        """Decode-only step: every pooled request computes one token. While the step's new KV
        blocks are not free, preempt the newest running request (an OOM event, §3.2) — after
        reclaiming idle contexts, where a composed policy holds any (augmented requests)."""
        pool, kv = self.pool, self.kv
        while pool.blocks_needed(0) > kv.num_free_blocks:
            if self._reclaim(pool.blocks_needed(0) - kv.num_free_blocks):
                continue
            victim = next(reversed(self.running.values()))
            self._preempt(victim)
            plan.preempted.append(victim)
            self.num_oom += 1
        kv.take(pool.blocks_needed(0))
        plan.num_decodes = len(pool)
        plan.decode_ctx = pool.decode_ctx()

    def repeatable_steps(self, plan: StepPlan) -> tuple[int, bool]:
        """A decode-phase plan repeats until the first departure or KV shortage when the next
        step's refill test fails: its inputs (decoding count, queue, N, k) are fixed meanwhile
        and "KV full" can only become truer as free blocks shrink. Not repeatable while an N
        recovery could fire (it depends on time). Arrivals matter unless the refill is already
        capped by N − n."""
        if plan.prefills or plan.preempted or not plan.num_decodes or self.phase != DECODE:
            return 1, True
        waiting = len(self.waiting) + len(self.prefilling)
        target = self._recovery_target()
        if self.n < target and waiting >= target // 2:
            return 1, True
        # Phase 1 may have been entered by this very schedule, before its refill test ran.
        if self._fillable(plan.num_decodes, waiting) is not None and not (
            self.opts.kv_gate and self._kv_full()
        ):
            return 1, True
        m = self.pool.steps_until_departure_or_full(self.kv.num_free_blocks)
        saturated = waiting >= max(0, self.n - plan.num_decodes) and self.n >= target
        return m, not saturated

    def update(self, plan: StepPlan, end_ns: int, num_steps: int = 1) -> None:
        if self._plan_phase is not None:
            self.num_phase_steps[self._plan_phase] += num_steps
        self._account(plan, end_ns)
        super().update(plan, end_ns, num_steps)

    def _account(self, plan: StepPlan, end_ns: int) -> None:
        """Hook: the time a plan ran (EB⁺ splits it by mode)."""

    # ------------------------------------------------------------------ results
    def extra_metrics(self) -> dict[str, Any]:
        return {
            "mode_switches": 0,
            "eb_time_share": 1.0,
            **self._eb_metrics(),
        }

    def _eb_metrics(self) -> dict[str, Any]:
        steps = sum(self.num_phase_steps) or 1
        return {
            "eb_refills": self.num_refills,
            "eb_oom_preemptions": self.num_oom,
            "eb_prefill_step_share": (self.num_phase_steps[0] + self.num_phase_steps[2]) / steps,
            "eb_theta": self.theta,
            "eb_k": self.k,
            "eb_n": self.n,
            "eb_n_hat": self.n_hat,
            "eb_p0": self.stats.p0,
            "eb_eta": self.stats.eta,
        }

    def extra_tables(self) -> dict[str, dict[str, Any]]:
        return {"eb": self._history_columns()}

    def _history_columns(self) -> dict[str, Any]:
        import numpy as np

        cols: dict[str, Any] = {}
        for key, vals in self._history.items():
            if key == "event":
                cols[key] = list(vals)
            elif key in ("time_ns", "completed", "k_hat", "n", "n_hat", "oom_events"):
                cols[key] = np.asarray(vals, dtype=np.int64)
            else:
                cols[key] = np.asarray(vals, dtype=np.float64)
        return cols
