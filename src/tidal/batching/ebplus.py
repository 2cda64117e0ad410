"""EB⁺: the online selector between exclusive (EB) and mixed (MB) batching.

"Threshold-Based Exclusive Batching for LLM Inference" (arXiv 2606.00516) §4.4, as specified in
``docs/research/ebplus.md`` §3.3. The two policies share the running set; the selector
evaluates the closed-form crossover Δ(N) = LHS − RHS (Proposition 4, §2.6) on live estimates
and routes the next steps to EB when ``Δ > δ`` and back to MB when ``Δ < −sticky·δ``. The demand
EMA and surge trigger, the evaluation filters, the step-cost signal and δ, the measured probe,
the MB mode's admission cap (KV forecast, N_MB) and the hand-over at a switch — with where and
why each departs from the reference — are in ``docs/design/ebplus-selector.md``.

Exactness: the N_obs EMA changes every step, so a fast-forwarded run applies the same per-step
updates (:meth:`update` loops ``num_steps − 1`` times with the identical arithmetic), arrivals
always end a run (demand must stay constant inside it), and a run stops before the first step
whose surge check could fire.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from tidal.batching import eb_theory as theory
from tidal.batching import ebplus_log
from tidal.batching.eb import DECODE, INITIAL_FILL, ExclusiveBatching
from tidal.batching.eb_options import EBOptions
from tidal.batching.ebplus_probe import ModeProbe
from tidal.batching.ebplus_signal import selector_signal
from tidal.batching.kv_forecast import KVForecast
from tidal.core.request import Request
from tidal.engine.mb import MixedBatching
from tidal.engine.plan import StepPlan
from tidal.engine.policy import BATCHING, BatchingPolicy
from tidal.engine.state import AdmissionTest, EngineState
from tidal.engine.stats import PolicyStats

_NAN = float("nan")


@BATCHING.register("ebplus")
class EBPlus(BatchingPolicy):
    """EB⁺: the online EB/MB selector (an EB and an MB policy over one engine state)."""

    name = "ebplus"
    needs_step_costs = True
    Options = EBOptions
    options_key = "eb"

    def __init__(self, state: EngineState, opts: EBOptions) -> None:
        super().__init__(state, opts)
        kind = opts.selector.mb_cap
        self.eb = ExclusiveBatching(state, opts, need_forecast=kind == "forecast")
        self.ctl = self.eb.ctl
        self.mb = MixedBatching(state, cap=self.mb_cap, test=self._mb_test)
        self.ctl.on_refit.append(self._on_refit)
        self.ctl.on_batch.append(self.evaluate)
        self.mode: str = opts.selector.cold_mode
        self.n_mb: int | None = None
        """MB mode's memory-safe running cap N_MB (None until the first estimate)."""
        self.n_obs = float(state.config.max_num_seqs)
        self.cooldown_left = 0
        self.num_switches = 0
        self.mb_ns = 0
        """Time of the steps run in MB mode (EB mode's: ``eb.eb_ns``)."""
        self._signals: deque[float] = deque(maxlen=opts.selector.signal_window)
        self._prev_signal = _NAN
        """The signal of the last evaluation past the filters (``confirm``)."""
        self.demand = 0
        self.mb_eps = opts.bound.eps if opts.bound.mb_eps is None else opts.bound.mb_eps
        """ε of the MB mode's forecast test: ``mb_eps`` until the forecast's first miss, then
        ``eps``."""
        self.missed_ns = -1
        """When the forecast first missed (-1: not yet): a preemption in MB mode, or, with
        ``mb_count_cap: feedback``, a running request older than every sampled output."""
        self.peak_demand = 0
        """The highest demand since EB mode's last refill began (``drain_refill``)."""
        self._refills_seen = 0
        self.probe = ModeProbe(opts.probe)
        """The measured arbitration where the prediction is within its error band."""
        self.series: dict[str, list[Any]] = ebplus_log.new_series()
        self._log(0, "start", _NAN, _NAN, _NAN, opts.selector.delta)

    @property
    def opts(self) -> EBOptions:
        """The options (one model shared with the EB policy and its controller)."""
        return self.eb.opts

    @opts.setter
    def opts(self, value: EBOptions) -> None:
        self.eb.opts = value

    @property
    def forecast(self) -> KVForecast | None:
        return self.eb.forecast

    @property
    def mb_cap_kind(self) -> str:
        opts = self.ctl.opts
        return opts.selector.mb_cap

    # ------------------------------------------------------------------ state events
    def on_preempted(self, req: Request, lost_tokens: int) -> None:
        self.eb.on_preempted(req, lost_tokens)
        self.probe.on_lost(lost_tokens)
        if self.mode == "mb":
            self._missed(self.sched_ns)  # the cache overflowed under MB mode's margin

    def on_aborted(self, req: Request, now_ns: int) -> None:
        self.eb.on_aborted(req, now_ns)

    def _missed(self, now_ns: int) -> None:
        """The forecast missed: from now on EB's ε (and the count cap, ``feedback``)."""
        self.mb_eps = self.ctl.opts.bound.eps
        if self.missed_ns < 0:
            self.missed_ns = now_ns

    def _watching(self) -> bool:
        """Feedback mode, no miss yet, the forecast estimated and someone decoding."""
        gate = self.eb.gate
        return (
            self.missed_ns < 0
            and self.ctl.opts.bound.mb_count_cap == "feedback"
            and gate is not None
            and gate.fc.surv is not None
            and len(self.state.pool) > 0
        )

    def _steps_to_extrapolation(self) -> int:
        """Steps until the ⌈miss_share·n⌉-th oldest of the n decoding requests (at least the
        oldest) reaches the sample's longest output t_max, where ``S(g) = 0`` and the forecast
        extrapolates (≤ 0: it does now). Ages grow by one a step."""
        gate = self.eb.gate
        assert gate is not None  # _watching() checked it, and the survival
        surv = gate.fc.surv
        assert surv is not None
        t_max = len(surv) - 2
        pool = self.state.pool
        steps = t_max - pool.max_age()  # the q-th oldest is no older than the oldest
        q = math.ceil(self.ctl.opts.bound.miss_share * len(pool))
        return steps if steps > 0 or q <= 1 else t_max - pool.age_rank(q)

    def on_finished(self, req: Request, now_ns: int) -> None:
        self.eb.on_finished(req, now_ns)
        to = self.probe.on_finished()
        if to is not None:
            self._switch(to, now_ns)
        if self.probe.rates and not self.probe.active and self.probe.verdict is not None:
            r = self.probe.rates
            gain = r["mb"] / r["eb"] - 1.0 if r["eb"] > 0 else _NAN
            self._log(now_ns, "verdict", r["mb"], r["eb"], gain, _NAN)
            self.probe.rates = {}

    # ------------------------------------------------------------------ selector
    def _ema_step(self, demand: int, n_obs: float) -> float:
        a = self.ctl.opts.demand.n_obs_up if demand > n_obs else self.ctl.opts.demand.n_obs_down
        return a * demand + (1.0 - a) * n_obs

    def _surge(self, demand: int) -> bool:
        return (
            demand > self.ctl.opts.demand.surge_factor * self.n_obs
            and self.cooldown_left == 0
            and self.ctl.stats.initialized
        )

    def evaluate(self, now_ns: int, event: str = "evaluate", n_obs: float | None = None) -> None:
        """The EB⁺ decision (docs/research/ebplus.md §3.3 ``evaluate_mode_switch``) at demand
        ``n_obs`` (default: the EMA N_obs): Δ(N) = LHS − RHS (Proposition 4, §2.6); EB when Δ > δ,
        MB when Δ < −sticky·δ."""
        ctl, opts = self.ctl, self.ctl.opts
        if not ctl.stats.initialized or not 0.0 < ctl.theta < 1.0:
            return
        n_obs = max(1.0, self.n_obs if n_obs is None else n_obs)
        sig = selector_signal(ctl, self.state.step_budget, n_obs, self.mb_cap, self._signals)
        lhs, rhs, signal, delta, n_eb = sig.lhs, sig.rhs, sig.signal, sig.delta, sig.n_eb
        self._log(now_ns, event, lhs, rhs, signal, delta)
        if event == "surge":
            self.probe.abandon()  # a new load level: the probe's windows straddle two
        if self.cooldown_left > 0:
            self.cooldown_left -= 1
            return
        if n_obs < opts.demand.drain_n:
            return
        if opts.demand.ebb_factor and self.demand * opts.demand.ebb_factor < self.n_obs:
            return  # draining: the slow-down EMA describes the load that has left
        if sig.stepped and self._arbitrate(now_ns, event, signal, min(lhs, rhs), n_eb):
            return
        prev, self._prev_signal = self._prev_signal, signal
        if event == "surge":  # a new load level: the previous signal describes the old one
            prev = signal
        if self.mode != "eb" and self._past(signal, prev, delta):
            self._to_eb(now_ns)
        elif self.mode != "mb" and self._past(-signal, -prev, opts.selector.sticky * delta):
            self._to_mb(now_ns)

    def _arbitrate(self, now_ns: int, event: str, signal: float, cost: float, n: float) -> bool:
        """Whether the measured arbitration (:mod:`tidal.batching.ebplus_probe`) decides this
        evaluation: a probe is running, or the prediction is within the band and this level
        has a verdict (held) or no probe yet (one starts)."""
        p = self.probe
        if p.active:
            return True
        if not p.within(signal, cost, n):
            return False
        s = self.ctl.stats
        level = (n, s.mu_l, s.mu_o)
        if p.same_level(level):
            if p.verdict is None:
                return False  # abandoned at this level: the crossover decides
            if p.verdict != self.mode:
                self._switch(p.verdict, now_ns)
            return True
        if event == "surge":
            return False  # the new level's transient: a regular evaluation starts the probe
        p.start(self.mode, level)
        self._log(now_ns, "probe", _NAN, _NAN, signal, _NAN)
        return True

    def _switch(self, mode: str, now_ns: int) -> None:
        if mode == "eb":
            self._to_eb(now_ns)
        else:
            self._to_mb(now_ns)

    def _past(self, signal: float, prev: float, threshold: float) -> bool:
        """``signal > threshold``; within ``confirm``× of it, the previous evaluation's
        signal must be past it too (a marginal signal must repeat)."""
        confirm = self.ctl.opts.cost.confirm
        if signal <= threshold:
            return False
        return not confirm or signal > confirm * threshold or prev > threshold

    def _switched(self, mode: str) -> None:
        self.mode = mode
        self.cooldown_left = self.ctl.opts.selector.cooldown
        self.num_switches += 1
        if self.eb.gate is not None:
            self.eb.gate.stale = True

    def _to_eb(self, now_ns: int) -> None:
        """Requests already decoding become EB's decoding set and Phase 1 starts with
        ``N = min(#decoding + #waiting, N cap)``, or the N cap where that is below EB's
        minimum N (``switch_n: fill``, as EB's initial fill); with nothing decoding, a fresh
        fill."""
        self._switched("eb")
        self.peak_demand = self.demand
        eb, st = self.eb, self.state
        n_dec = len(st.pool)
        if n_dec:
            eb.phase = DECODE
            eb.prefilled = n_dec
            eb.refill_target = 0
            cap = self.ctl.recovery_target()
            demand = min(n_dec + len(st.waiting), cap)
            fill = self.ctl.opts.phase.switch_n == "fill"
            self.ctl.n = cap if fill and demand < eb._min_n() else demand
            self.ctl.set_k()
        elif len(st.waiting) or st.prefilling:
            eb.reset_to_initial(now_ns)
        else:
            eb.phase = INITIAL_FILL
            eb.prefilled = 0
            eb.refill_target = 0
        self._log(now_ns, "to_eb", _NAN, _NAN, _NAN, self.ctl.opts.selector.delta)

    def _to_mb(self, now_ns: int) -> None:
        """EB's phase state is dropped; MB takes over the same running set."""
        self._switched("mb")
        self.eb.phase = INITIAL_FILL
        self.eb.prefilled = 0
        self.eb.refill_target = 0
        self._log(now_ns, "to_mb", _NAN, _NAN, _NAN, self.ctl.opts.selector.delta)

    def _on_refit(self, now_ns: int) -> None:
        s = self.ctl.stats
        self.n_mb = theory.mb_safe_n(
            self.ctl.capacity_tokens,
            s.mu_l,
            s.var_l,
            s.window(),
            self.ctl.opts.bound.eps,
            self.ctl.max_seqs,
        )
        self._log(now_ns, "estimate", _NAN, _NAN, _NAN, self.ctl.opts.selector.delta)

    def mb_cap(self) -> int | None:
        """The MB mode's running-set cap (``mb_cap``; None = N_max). With ``forecast`` the
        count cap is the steady-state bound alone (the cohort bound's worst case is what the
        forecast tests per admission, from the actual ages)."""
        kind = self.mb_cap_kind
        if kind == "mb_safe":
            return self.n_mb
        if kind == "n_hat":
            return self.ctl.n_target()
        count_cap = self.ctl.opts.bound.mb_count_cap
        if kind == "forecast" and (
            count_cap is True or (count_cap == "feedback" and self.missed_ns >= 0)
        ):
            return self.ctl.n_stat
        return None

    def _mb_test(self) -> AdmissionTest | None:
        gate = self.eb.gate
        if gate is None or self.mb_cap_kind != "forecast":
            return None
        return gate.test(self.mb_eps)

    def _log(
        self, now_ns: int, event: str, lhs: float, rhs: float, signal: float, delta: float
    ) -> None:
        row = ebplus_log.selector_row(self, now_ns, event, lhs, rhs, signal, delta)
        ebplus_log.append_row(self.series, row)

    def _drain_refill(self, demand: int) -> None:
        """``drain_refill``: a refill once the demand is ``max(1, k̂)`` below its peak since
        the last one began. In a closed loop each completion is replaced at once, so the
        demand falls only when arrivals stop; the threshold test then holds the last
        arrivals until the decoding set drains to ``waiting·(N − k)/k``. The demand changes
        only at arrivals and departures, which end a fast-forwarded run."""
        eb = self.eb
        if eb.num_refills != self._refills_seen:
            self._refills_seen = eb.num_refills
            self.peak_demand = demand
        self.peak_demand = max(self.peak_demand, demand)
        if not self.ctl.opts.demand.drain_refill:
            return
        if self.peak_demand - demand >= max(1, self.ctl.k) and eb.force_refill():
            self._refills_seen = eb.num_refills
            self.peak_demand = demand

    # ------------------------------------------------------------------ steps
    @property
    def active(self) -> BatchingPolicy:
        return self.eb if self.mode == "eb" else self.mb

    def schedule(self, now_ns: int) -> StepPlan:
        st = self.state
        demand = len(st.running) + len(st.waiting)
        self.demand = demand
        self.n_obs = self._ema_step(demand, self.n_obs)
        if self._watching() and self._steps_to_extrapolation() <= 0:
            self._missed(now_ns)
        if self._surge(demand):
            self.evaluate(
                now_ns, "surge", demand if self.ctl.opts.demand.surge_n == "demand" else None
            )
        self.sched_ns = now_ns
        p = self.probe
        if p.active and p.level is not None and 2 * demand < p.level[0]:
            p.abandon()  # the closing drain: the rates would measure the emptying batch
        if self.mode == "eb":
            self._drain_refill(demand)
            return self.eb.schedule(now_ns)
        self.eb.plan_phase = None
        return self.mb.schedule(now_ns)

    def repeatable_steps(self, plan: StepPlan) -> tuple[int, bool]:
        m, _ = self.active.repeatable_steps(plan)
        if m <= 1:
            return 1, True
        # The step i of the run would update N_obs and could fire the surge test: stop before
        # the first i where it would. N_obs moves monotonically towards the (constant) demand,
        # so once N_obs ≥ D/surge_factor it never fires again. Likewise the step at which the
        # oldest request's age reaches the forecast's longest sampled output (a miss).
        if self._watching():
            m = max(1, min(m, self._steps_to_extrapolation()))
        if self.cooldown_left == 0 and self.ctl.stats.initialized:
            d, n_obs, f = self.demand, self.n_obs, self.ctl.opts.demand.surge_factor
            for i in range(1, m):
                if d <= f * n_obs:
                    break
                n_obs = self._ema_step(d, n_obs)
                if d > f * n_obs:
                    m = i
                    break
        return m, True

    def before_apply(self, plan: StepPlan, end_ns: int, num_steps: int) -> None:
        # the schedule() calls a fast-forwarded run skipped: same demand, same arithmetic
        d = self.demand
        for _ in range(num_steps - 1):
            self.n_obs = self._ema_step(d, self.n_obs)
        self.eb.before_apply(plan, end_ns, num_steps)
        self.probe.on_step(plan.num_tokens * num_steps, end_ns - self.sched_ns)
        if self.mode == "mb":
            self.mb_ns += end_ns - self.sched_ns

    # ------------------------------------------------------------------ results
    def stats(self) -> PolicyStats:
        eb = self.eb.stats()
        counters = {**eb.counters, "mode_switches": self.num_switches}
        return PolicyStats(counters, eb_ns=eb.eb_ns, mb_ns=self.mb_ns)

    def extra_metrics(self) -> dict[str, Any]:
        return ebplus_log.selector_metrics(self)

    def extra_tables(self) -> dict[str, dict[str, Any]]:
        return {"ebplus": ebplus_log.series_columns(self.series), "eb": self.ctl.history_columns()}
