"""EB⁺'s crossover signal: the cost gap between MB and EB at the current demand, and δ.

The closed form Δ(N) = LHS − RHS (Proposition 4, :func:`tidal.batching.eb_theory.crossover`)
or, with ``crossover_cost: steps`` and a known step-time function, ``c_MB − c_EB`` of both
policies' steady-state cycles (:func:`tidal.batching.eb_cost.step_crossover`); δ is the
configured threshold, scaled with the cost and widened by the signal's spread where enabled.
The choices are defended in ``docs/design/ebplus-selector.md``.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from tidal.batching import eb_theory as theory
from tidal.batching.eb_control import EBController
from tidal.batching.eb_cost import step_crossover


@dataclass(frozen=True)
class SelectorSignal:
    """One evaluation's two sides, their difference (> 0 favours EB), δ and EB's N."""

    lhs: float
    rhs: float
    signal: float
    delta: float
    n_eb: float
    stepped: bool
    """Whether the step-cost crossover priced it (else the closed form)."""


def selector_signal(
    ctl: EBController,
    step_budget: int,
    n_obs: float,
    mb_cap: Callable[[], int | None],
    signals: deque[float],
) -> SelectorSignal:
    """The signal at demand ``n_obs`` (≥ 1) from ``ctl``'s live estimates; appends it to
    ``signals`` (the window of the adaptive δ) when ``n_obs`` passes the drain filter."""
    opts, stats, c = ctl.opts, ctl.stats, ctl.costs
    theta0 = ctl.theta
    paper = opts.selector.mb_cost == "paper"
    n_mb, n_eb = n_obs, n_obs
    if opts.selector.crossover_n == "effective":
        cap = mb_cap()
        n_mb = min(n_obs, float(ctl.max_seqs if cap is None else cap))
        n_eb = min(n_obs, float(ctl.n_target()))
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
        alpha_mb=max(c.alpha_p, c.alpha_d) if opts.cost.mb_alpha == "step" else None,
        k=theta0 * n_eb,
        mixed_steps=opts.selector.crossover_lhs == "steps",
    )
    lhs, rhs, signal = x.lhs, x.rhs, x.delta
    if opts.cost.crossover_cost == "steps" and c.step_ns is not None:
        n_eb = min(n_obs, float(ctl.n_target()))
        mu_l, mu_o = stats.mu_l, stats.mu_o
        y = step_crossover(c.step_ns, n_eb, n_eb, theta0 * n_eb, mu_l, mu_o, step_budget)
        lhs, rhs, signal = y.c_mb, y.c_eb, y.delta
    if n_obs >= opts.demand.drain_n:
        signals.append(signal)
    delta = opts.selector.delta
    stepped = opts.cost.crossover_cost == "steps" and c.step_ns is not None
    if stepped and opts.cost.delta_rel > 0:  # a share of the cost; the floor capped
        cost, share = min(lhs, rhs), opts.cost.delta_cap
        delta = max(min(delta, share * cost) if share else delta, opts.cost.delta_rel * cost)
    if opts.selector.delta_adaptive and len(signals) >= 4:
        delta = max(delta, opts.selector.delta_k * statistics.stdev(signals))
    return SelectorSignal(lhs, rhs, signal, delta, n_eb, stepped)
