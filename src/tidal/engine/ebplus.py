"""EB⁺: the online selector between exclusive (EB) and mixed (MB) batching.

"Threshold-Based Exclusive Batching for LLM Inference" (arXiv 2606.00516) §4.4, as specified in
``shared/research/ebplus.md`` §3.3. The two policies share the running set; the selector
evaluates the closed-form crossover Δ(N) = LHS − RHS (Proposition 4, §2.6) on live estimates
and routes the next steps to EB when ``Δ > δ`` and back to MB when ``Δ < −sticky·δ``:

* every step: demand D = running + waiting; ``N_obs ← a·D + (1−a)·N_obs`` with a = 0.3 when D
  rises above N_obs and 0.03 otherwise (fast up, slow down); a surge ``D > 2·N_obs`` outside
  the cooldown triggers an evaluation at once — at N_obs = D (``surge_n: demand``, default):
  the surge means the EMA lags the demand by more than 2×, and the reference's evaluation at
  the lagging EMA kept MB for 100 completions where EB wins (BENCHMARKS.md, issue3d);
* every 100 completions (after the estimator's μ̂_O/p̂ update): an evaluation with
  ``r = μ̂_O/(μ̂_L+μ̂_O)``, ``θ0 = θ̂``, ``k̂ = θ0·N_obs``, ``N = N_obs``, ``α_MB = α_p`` — or,
  with ``crossover_n: effective`` (default), at the batch sizes each policy can actually run:
  ``N = min(N_obs, N_max, N_MB)`` for MB and ``k̂ = θ0·min(N_obs, N̂*, N_max)`` for EB (the reference
  credits EB with N_obs even when memory caps it far lower);
  ``β_MB^e`` is ``β_EB^w + ΔI_step`` (the simulator's own step interference, Q14) or, with
  ``mb_cost: paper``, the paper's measured quadratic;
* a decision needs the estimator initialised, no cooldown (3 evaluations after a switch),
  ``N_obs ≥ 16`` (drain filter: RHS ∝ 1/N_obs explodes while the system empties) and — ours,
  ``ebb_factor`` — a demand of at least N_obs/2 (between load phases the slowly decaying EMA
  describes the load that left);
* LHS: with ``crossover_lhs: steps`` (default) the interference MB pays at N running requests,
  :func:`eb_theory.mb_interference` — the paper's ΔI(r) at N ≥ 1 + μ_O, less below, where
  most MB steps carry no prefill.

The MB mode admits by the KV forecast once the estimator has data (``mb_cap: forecast``, the
default: each admission must keep the running set's age-conditioned projected occupancy within
the cache, :mod:`tidal.engine.kv_forecast`, under a count cap of the steady-state bound below),
or at most ``N_MB`` running requests (``mb_cap: mb_safe``): the §2.5 CLT bound ``N·D +
σ·sqrt(N·ln(1/ε)) ≤ C`` evaluated with MB's own slot occupancy instead of EB's cycle — in steady
state ``D = μ_L + E[O²]/(2E[O])`` (renewal reward; the paper's ``D(θ → 0) = μ_L + 1/p0`` for
geometric outputs), and for a cohort admitted at once (closed-loop clients at a phase start)
``(μ_L + t)·P(O > t)`` at every age t — the smaller N of the two (:func:`eb_theory.mb_safe_n`),
from the estimator's window and prompt EMAs, re-computed at every estimate. The reference runs
MB at N_max and relies on recompute preemption (``mb_cap: none``); EB's N̂* (``n_hat``)
overstates MB's need on bounded outputs. Before the first estimate MB runs at N_max; with
``mb_cap: forecast`` its admissions keep ``cold_reserve`` of the cache free until then.

MB → EB: requests already decoding become EB's decoding set and Phase 1 starts with
``N = min(#decoding + #waiting, N cap)``; with nothing decoding, EB starts a fresh fill. EB → MB:
EB's phase state is dropped and the mixed scheduler takes over the same running set.

Exactness: the N_obs EMA changes every step, so a fast-forwarded run applies the same per-step
updates (:meth:`update` loops ``num_steps − 1`` times with the identical arithmetic), arrivals
always end a run (demand must stay constant inside it), and a run stops before the first step
whose surge check could fire.
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any

from tidal.core.kv import KVBlockManager
from tidal.engine import eb_theory as theory
from tidal.engine.eb import DECODE, INITIAL_FILL, ExclusiveBatchingScheduler
from tidal.engine.mb import MixedBatchingScheduler
from tidal.engine.ordering import WaitingQueue
from tidal.engine.plan import StepPlan
from tidal.engine.scheduler import BATCHING, SchedulerConfig


@BATCHING.register("ebplus")
class EBPlusScheduler(ExclusiveBatchingScheduler):
    name = "ebplus"

    def __init__(
        self, config: SchedulerConfig, kv: KVBlockManager, waiting: WaitingQueue | None = None
    ) -> None:
        super().__init__(config, kv, waiting)
        self.mode = self.opts.cold_mode
        self.n_mb: int | None = None
        """MB mode's memory-safe running cap N_MB (None until the first estimate)."""
        self.n_obs = float(config.max_num_seqs)
        self.cooldown_left = 0
        self.num_switches = 0
        self.time_in_mode = {"mb": 0, "eb": 0}
        self._signals: deque[float] = deque(maxlen=self.opts.signal_window)
        self._demand = 0
        self._series: dict[str, list[Any]] = {
            k: []
            for k in (
                "time_ns",
                "event",
                "mode",
                "demand",
                "n_obs",
                "r",
                "mu_l",
                "mu_o",
                "theta",
                "k_hat",
                "n_hat",
                "n_mb",
                "lhs",
                "rhs",
                "signal",
                "delta",
                "cooldown",
            )
        }
        self._log(0, "start", float("nan"), float("nan"), float("nan"), self.opts.delta)

    # ------------------------------------------------------------------ selector
    def _ema_step(self, demand: int, n_obs: float) -> float:
        a = self.opts.n_obs_up if demand > n_obs else self.opts.n_obs_down
        return a * demand + (1.0 - a) * n_obs

    def _surge(self, demand: int) -> bool:
        return (
            demand > self.opts.surge_factor * self.n_obs
            and self.cooldown_left == 0
            and self.stats.initialized
        )

    def evaluate(self, now_ns: int, event: str = "evaluate", n_obs: float | None = None) -> None:
        """The EB⁺ decision (ebplus.md §3.3 ``evaluate_mode_switch``) at demand ``n_obs``
        (default: the EMA N_obs)."""
        stats, c, opts = self.stats, self.costs, self.opts
        if not stats.initialized:
            return
        theta0 = self.theta
        if not 0.0 < theta0 < 1.0:
            return
        paper = opts.mb_cost == "paper"
        n_obs = max(1.0, self.n_obs if n_obs is None else n_obs)
        n_mb, n_eb = n_obs, n_obs
        if opts.crossover_n == "effective":
            cap = self._mb_cap()
            n_mb = min(n_obs, float(self.config.max_num_seqs if cap is None else cap))
            n_eb = min(n_obs, float(self._n_target()))
        x = theory.crossover(
            stats.mu_l,
            stats.mu_o,
            n_mb,
            theta0,
            c.alpha_p,
            c.beta_p,
            c.alpha_d,
            c.beta_d,
            lambda r: c.beta_mb_e(r, paper_fit=paper),
            k=theta0 * n_eb,
            mixed_steps=opts.crossover_lhs == "steps",
        )
        signal = x.delta
        if n_obs >= opts.drain_n:
            self._signals.append(signal)
        delta = opts.delta
        if opts.delta_adaptive and len(self._signals) >= 4:
            delta = max(delta, opts.delta_k * statistics.stdev(self._signals))
        self._log(now_ns, event, x.lhs, x.rhs, signal, delta)
        if self.cooldown_left > 0:
            self.cooldown_left -= 1
            return
        if n_obs < opts.drain_n:
            return
        if opts.ebb_factor and self._demand * opts.ebb_factor < self.n_obs:
            return  # draining: the slow-down EMA describes the load that has left
        if signal > delta and self.mode != "eb":
            self._to_eb(now_ns)
        elif signal < -opts.sticky * delta and self.mode != "mb":
            self._to_mb(now_ns)

    def _to_eb(self, now_ns: int) -> None:
        self.mode = "eb"
        self.cooldown_left = self.opts.cooldown
        self.num_switches += 1
        self._fc_stale = True
        n_dec = len(self.pool)
        if n_dec:
            self.phase = DECODE
            self.prefilled = n_dec
            self.refill_target = 0
            self.n = min(n_dec + len(self.waiting), self._recovery_target())
            self._set_k()
        elif len(self.waiting) or self.prefilling:
            self._reset_to_initial(now_ns)
        else:
            self.phase = INITIAL_FILL
            self.prefilled = 0
            self.refill_target = 0
        self._log(now_ns, "to_eb", float("nan"), float("nan"), float("nan"), self.opts.delta)

    def _to_mb(self, now_ns: int) -> None:
        self.mode = "mb"
        self.cooldown_left = self.opts.cooldown
        self.num_switches += 1
        self.phase = INITIAL_FILL
        self.prefilled = 0
        self.refill_target = 0
        self._fc_stale = True
        self._log(now_ns, "to_mb", float("nan"), float("nan"), float("nan"), self.opts.delta)

    def _on_batch(self, now_ns: int) -> None:
        self.evaluate(now_ns)

    def _refit(self, now_ns: int) -> None:
        super()._refit(now_ns)
        s, cap = self.stats, self.config.max_num_seqs
        self.n_mb = theory.mb_safe_n(
            self.capacity_tokens, s.mu_l, s.var_l, s.window(), self.opts.eps, cap
        )
        self._log(now_ns, "estimate", float("nan"), float("nan"), float("nan"), self.opts.delta)

    def _mb_cap_kind(self) -> str:
        return "n_hat" if self.opts.mb_memory_safe else self.opts.mb_cap

    def _uses_forecast(self) -> bool:
        return super()._uses_forecast() or self._mb_cap_kind() == "forecast"

    def _mb_cap(self) -> int | None:
        """The MB mode's running-set cap (``mb_cap``; None = N_max). With ``forecast`` the
        count cap is the steady-state bound alone (the cohort bound's worst case is what the
        forecast tests per admission, from the actual ages)."""
        kind = self._mb_cap_kind()
        if kind == "mb_safe":
            return self.n_mb
        if kind == "n_hat":
            return self._n_target()
        if kind == "forecast":
            return self.n_stat
        return None

    def _log(
        self, now_ns: int, event: str, lhs: float, rhs: float, signal: float, delta: float
    ) -> None:
        s = self.stats
        row = (
            now_ns,
            event,
            self.mode,
            self._demand,
            self.n_obs,
            s.mu_o / (s.mu_l + s.mu_o),
            s.mu_l,
            s.mu_o,
            self.theta,
            self.theta * max(1.0, self.n_obs),
            self.n_hat,
            -1 if self.n_mb is None else self.n_mb,
            lhs,
            rhs,
            signal,
            delta,
            self.cooldown_left,
        )
        for key, v in zip(self._series, row, strict=True):
            self._series[key].append(v)

    # ------------------------------------------------------------------ steps
    def schedule(self, now_ns: int) -> StepPlan:
        demand = len(self.running) + len(self.waiting)
        self._demand = demand
        self.n_obs = self._ema_step(demand, self.n_obs)
        if self._surge(demand):
            self.evaluate(now_ns, "surge", demand if self.opts.surge_n == "demand" else None)
        if self.mode == "eb":
            return super().schedule(now_ns)
        self.waiting.refresh(now_ns)
        self._sched_ns = now_ns
        self._plan_phase = None
        plan = StepPlan()
        budget = self._schedule_running(plan, self.step_budget())
        if not plan.preempted:
            kv_ok = self._forecast_test() if self._mb_cap_kind() == "forecast" else None
            self._admit_waiting(plan, budget, now_ns, self._mb_cap(), kv_ok)
        return plan

    def repeatable_steps(self, plan: StepPlan) -> tuple[int, bool]:
        if self.mode == "eb":
            m, _ = super().repeatable_steps(plan)
        else:
            m, _ = MixedBatchingScheduler.repeatable_steps(self, plan)  # type: ignore[arg-type]
        if m <= 1:
            return 1, True
        # The step i of the run would update N_obs and could fire the surge test: stop before
        # the first i where it would. N_obs moves monotonically towards the (constant) demand,
        # so once N_obs ≥ D/surge_factor it never fires again.
        if self.cooldown_left == 0 and self.stats.initialized:
            d, n_obs, f = self._demand, self.n_obs, self.opts.surge_factor
            for i in range(1, m):
                if d <= f * n_obs:
                    break
                n_obs = self._ema_step(d, n_obs)
                if d > f * n_obs:
                    m = i
                    break
        return m, True

    def update(self, plan: StepPlan, end_ns: int, num_steps: int = 1) -> None:
        # the schedule() calls a fast-forwarded run skipped: same demand, same arithmetic
        d = self._demand
        for _ in range(num_steps - 1):
            self.n_obs = self._ema_step(d, self.n_obs)
        super().update(plan, end_ns, num_steps)

    def _account(self, plan: StepPlan, end_ns: int) -> None:
        self.time_in_mode[self.mode] += end_ns - self._sched_ns

    # ------------------------------------------------------------------ results
    def extra_metrics(self) -> dict[str, Any]:
        busy = self.time_in_mode["mb"] + self.time_in_mode["eb"]
        return {
            "mode_switches": self.num_switches,
            "eb_time_share": self.time_in_mode["eb"] / busy if busy else 0.0,
            "ebplus_final_mode": self.mode,
            "ebplus_mb_cap": -1 if (cap := self._mb_cap()) is None else cap,
            **self._eb_metrics(),
        }

    def extra_tables(self) -> dict[str, dict[str, Any]]:
        import numpy as np

        cols: dict[str, Any] = {}
        for key, vals in self._series.items():
            if key in ("event", "mode"):
                cols[key] = list(vals)
            elif key in ("time_ns", "demand", "n_hat", "n_mb", "cooldown"):
                cols[key] = np.asarray(vals, dtype=np.int64)
            else:
                cols[key] = np.asarray(vals, dtype=np.float64)
        return {"ebplus": cols, "eb": self._history_columns()}
