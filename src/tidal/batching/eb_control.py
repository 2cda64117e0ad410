"""EB's online controller (Algorithm 1 of arXiv 2606.00516, ``docs/research/ebplus.md`` §3.1).

Every ``update_every`` completions the output-length hazard is re-fitted on a ``window``-sample
window (:mod:`tidal.batching.output_stats`); ``θ* = θ0 + Δθ`` — the CFR base θ0
(§2.3: ``p0·α_p/α_d`` or the exact ``−ln(1−p0)·α_p/α_d``) plus the IFR correction Δθ (§2.4)
— is clipped to
``[max(0.01, θ_floor), θ_max]`` and smoothed (EMA ``theta_ema``); the admission bound gives N̂*
(§2.5); N ← N̂* and the refill threshold ``k̂ = ⌊θ̂·N⌋``. With a KV forecast in use, each estimate
also refreshes its survival curve and the steady-state N of continuous batching.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tidal.batching import eb_theory as theory
from tidal.batching.eb_bound import CLTBound, ForecastGate
from tidal.batching.eb_options import EBOptions
from tidal.batching.output_stats import OutputStats
from tidal.engine.state import EngineState
from tidal.hardware.interference import StepCosts

HISTORY = (
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
_INT_COLUMNS = ("time_ns", "completed", "k_hat", "n", "n_hat", "oom_events")


class EBController:
    def __init__(
        self,
        state: EngineState,
        opts: EBOptions,
        costs: StepCosts,
        bound: CLTBound,
        gate: ForecastGate | None,
    ) -> None:
        kv = state.kv
        self.state = state
        self.opts = opts
        self.costs = costs
        self.bound = bound
        self.gate = gate
        self.max_seqs = state.config.max_num_seqs
        self.capacity_tokens = kv.num_blocks * kv.block_size
        self.stats = OutputStats(
            opts.threshold.window, opts.threshold.update_every, opts.threshold.min_samples
        )
        self.theta = (
            opts.threshold.theta_fixed
            if opts.threshold.theta_fixed is not None
            else opts.threshold.theta_cold
        )
        """Smoothed switching fraction θ̂ (the reference's ``pd_k_ratio``)."""
        self.theta_initialized = False
        self.n_hat = self.max_seqs
        """Memory-safe cap N̂* (N_max until the first estimate, or when auto-N is off)."""
        self.n = self.max_seqs
        """Current batch size N."""
        self.k = 1
        self.n_stat: int | None = None
        """Steady-state memory-safe N of continuous batching (set with the forecast)."""
        self.last_n_change_ns = 0
        self.num_oom = 0
        self.on_refit: list[Callable[[int], None]] = []
        """Called after each estimate (EB⁺ recomputes its MB cap)."""
        self.on_batch: list[Callable[[int], None]] = []
        """Called every ``update_every`` completions, after the μ̂_O/p̂ update (EB⁺ evaluates)."""
        self.history: dict[str, list[Any]] = {k: [] for k in HISTORY}
        self.set_k()

    # ------------------------------------------------------------------ N and k
    def set_k(self) -> None:
        fixed = self.opts.threshold.k_fixed
        self.k = fixed if fixed is not None else max(1, int(self.theta * self.n))

    def set_n(self, n: int, now_ns: int, stamp: bool = True) -> None:
        """Set N (and k̂ = ⌊θ̂·N⌋); ``stamp`` restarts the N-recovery cooldown."""
        if n != self.n:
            self.n = n
            self.set_k()
            if stamp:
                self.last_n_change_ns = now_ns

    def n_target(self) -> int:
        """The memory-safe batch size min(N_max, N̂*)."""
        return min(self.max_seqs, self.n_hat)

    def recovery_target(self) -> int:
        """What N recovery and resets restore N to (``n_recovery``): min(N_max, N̂*), or N_max
        as the reference scheduler."""
        if self.opts.phase.n_recovery == "n_max":
            return self.max_seqs
        return self.n_target()

    def tau_full(self) -> bool:
        """Free KV below τ_KV = clip(N·margin·μ̂_O / block / total, 0.05, kv_threshold_max)."""
        kv = self.state.kv
        blocks = self.n * self.stats.mu_o * self.opts.phase.output_margin / kv.block_size
        tau = max(0.05, min(self.opts.phase.kv_threshold_max, blocks / kv.num_blocks))
        return kv.num_free_blocks < kv.num_blocks * tau

    # ------------------------------------------------------------------ estimates
    def observe(self, prompt: int, output: int, now_ns: int) -> None:
        """Feed a completion in the reference order: window (and the re-fit it may trigger),
        the μ̂_O/p̂ batch EMAs (then ``on_batch``), then the μ̂_L EMA."""
        if output > 0:
            if self.stats.push_output(output):
                self.refit(now_ns)
            if self.stats.push_batch(output):
                for fn in self.on_batch:
                    fn(now_ns)
        self.stats.push_prompt(prompt)

    def refit(self, now_ns: int) -> None:
        """Algorithm 1's cold path: hazard → θ0 + Δθ → clip → EMA → N̂* → k̂ = ⌊θ̂·N⌋."""
        opts, c, stats = self.opts, self.costs, self.stats
        p0, eta = stats.refit_hazard()
        theta0 = theory.theta_cfr(
            p0, c.alpha_p, c.alpha_d, exact=opts.threshold.theta_form == "exact"
        )
        dtheta = 0.0
        if opts.threshold.ifr and eta > 0:
            dtheta = theory.ifr_correction(theta0, p0, eta, c.beta_d * self.n / c.alpha_d)
        if opts.threshold.theta_fixed is None:
            lo = max(theory.THETA_HARD_MIN, opts.threshold.theta_floor)
            star = max(lo, min(theta0 + dtheta, opts.threshold.theta_max))
            if not self.theta_initialized:
                self.theta = star
                self.theta_initialized = True
            else:
                a = opts.threshold.theta_ema
                self.theta = a * star + (1.0 - a) * self.theta
        if self.gate is not None:
            window = stats.window()
            self.n_stat = theory.stationary_safe_n(
                self.capacity_tokens,
                stats.mu_l,
                stats.var_l,
                *theory.output_moments(window),
                opts.bound.eps,
                self.max_seqs,
            )
            self.gate.fc.set_outputs(window, opts.bound.forecast_recent)
            self.gate.stale = True
        if opts.bound.auto_n:
            self.n_hat = self.bound.n_hat(self, p0, max(1.0, stats.mu_l))
            # the reference's memory-safe update leaves the recovery clock alone
            self.set_n(self.n_hat, now_ns, stamp=opts.phase.n_recovery == "n_hat")
        self.set_k()
        self.record(now_ns, "estimate", theta0, dtheta)
        for fn in self.on_refit:
            fn(now_ns)

    def record(self, now_ns: int, event: str, theta0: float, dtheta: float) -> None:
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
        for key, v in zip(self.history, row, strict=True):
            self.history[key].append(v)

    def history_columns(self) -> dict[str, Any]:
        cols: dict[str, Any] = {}
        for key, vals in self.history.items():
            if key == "event":
                cols[key] = list(vals)
            elif key in _INT_COLUMNS:
                cols[key] = np.asarray(vals, dtype=np.int64)
            else:
                cols[key] = np.asarray(vals, dtype=np.float64)
        return cols
