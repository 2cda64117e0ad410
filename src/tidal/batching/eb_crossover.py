"""Closed forms of the EB/MB crossover (Proposition 4, §2.6): which of exclusive (EB) and mixed
(MB) batching is cheaper per token at an operating point.

Source: "Threshold-Based Exclusive Batching for LLM Inference" (arXiv 2606.00516), as specified
in ``docs/research/ebplus.md`` §2.6; the notation is :mod:`tidal.batching.eb_theory`'s (which
re-exports these names). Pure functions of floats, no state.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


# --------------------------------------------------------------------------- §2.6 crossover
def beta_eb_w(r: float, beta_p: float, beta_d: float) -> float:
    """EB's workload-weighted marginal cost per token: ``β_p·(1−r) + β_d·r`` (§1.2)."""
    return beta_p * (1.0 - r) + beta_d * r


def decode_share(mu_l: float, mu_o: float) -> float:
    """Steady-state decode-token share of a workload: ``r = μ_O/(μ_L + μ_O)``."""
    return mu_o / (mu_l + mu_o)


@dataclass(frozen=True)
class Crossover:
    """Proposition 4 (``prop:comparison``, §2.6) evaluated at one operating point."""

    r: float
    theta0: float
    k: float
    n: float
    lhs: float
    """β_MB^e(r) − β_EB^w(r): the per-token contention MB pays (s/token)."""
    rhs: float
    """EB's extra amortised fixed cost per token (s/token)."""
    c_eb: float
    c_mb: float

    @property
    def delta(self) -> float:
        """Δ(N) = LHS − RHS; > 0 ⇒ EB wins, < 0 ⇒ MB wins."""
        return self.lhs - self.rhs

    @property
    def winner(self) -> str:
        return "eb" if self.delta > 0 else "mb"

    @property
    def margin(self) -> float:
        """Throughput of the winner over the loser, minus 1 (from the per-token costs)."""
        return max(self.c_eb, self.c_mb) / min(self.c_eb, self.c_mb) - 1.0


def crossover(
    mu_l: float,
    mu_o: float,
    n: float,
    theta0: float,
    alpha_p: float,
    beta_p: float,
    alpha_d: float,
    beta_d: float,
    beta_mb_e: Callable[[float], float],
    alpha_mb: float | None = None,
    k: float | None = None,
    mixed_steps: bool = False,
) -> Crossover:
    """The EB–MB crossover (§2.6). Per-token costs:

    * EB: ``c_EB = β_EB^w + (α_p + α_d·Λ·μ_O)/(k·(μ_L+μ_O))``, Λ = −ln(1−θ0);
    * MB: ``c_MB = β_MB^e(r) + α_MB·(1+μ_O)/(N·(μ_L+μ_O))``;

    EB wins iff ``LHS = β_MB^e − β_EB^w > RHS = [(α_p − α_d·ln(1−θ0)·μ_O)/k − α_MB(1+μ_O)/N]
    / (μ_L+μ_O)``. ``k`` defaults to θ0·N (EB⁺ online form) and ``α_MB`` to α_p.

    ``mixed_steps``: LHS is the interference MB actually pays at N running requests
    (:func:`mb_interference`) instead of ΔI(r) on every token — the same above N = 1 + μ_O,
    less below it, where most of MB's steps carry no prefill."""
    r = decode_share(mu_l, mu_o)
    a_mb = alpha_p if alpha_mb is None else alpha_mb
    kk = theta0 * n if k is None else k
    tokens = mu_l + mu_o
    lam = -math.log(1.0 - theta0)
    bw = beta_eb_w(r, beta_p, beta_d)
    bm = beta_mb_e(r)
    if mixed_steps:
        bm = bw + mb_interference(
            mu_l, mu_o, n, lambda x: beta_mb_e(x) - beta_eb_w(x, beta_p, beta_d)
        )
    eb_fixed = (alpha_p + alpha_d * lam * mu_o) / (kk * tokens)
    mb_fixed = a_mb * (1.0 + mu_o) / (n * tokens)
    return Crossover(
        r=r,
        theta0=theta0,
        k=kk,
        n=n,
        lhs=bm - bw,
        rhs=eb_fixed - mb_fixed,
        c_eb=bw + eb_fixed,
        c_mb=bm + mb_fixed,
    )


def mb_interference(mu_l: float, mu_o: float, n: float, delta_i: Callable[[float], float]) -> float:
    """Per-token interference of MB in steady state at ``n`` running requests, where a mixed
    step of ``n_p`` prefill and ``n_d`` decode tokens costs ``ΔI(r_s)·(n_p + n_d)`` extra,
    ``r_s = n_d/(n_p + n_d)`` (the simulator's step model). Requests complete at
    ``λ = n/(1 + μ_O)`` per step. With ``λ ≥ 1`` every step mixes prefills and decodes in the
    workload's proportion: ΔI(r) per token, the paper's LHS (§2.6). With ``λ < 1`` only one
    step per request is mixed: its prefill of ``μ_L`` tokens beside the ``n − 1`` others'
    decodes, so ``ΔI(r_s)·(n − 1 + μ_L)/(μ_L + μ_O)`` per token with
    ``r_s = (n − 1)/(n − 1 + μ_L)`` — continuous at ``n − 1 = μ_O``, 0 for a lone request."""
    d = n - 1.0
    if d >= mu_o:
        return delta_i(decode_share(mu_l, mu_o))
    if d <= 0:
        return 0.0
    return delta_i(d / (d + mu_l)) * (d + mu_l) / (mu_l + mu_o)


def threshold_decode_share(beta_mb_e: Callable[[float], float], beta_d: float) -> float | None:
    """The decode-token share r at which MB's effective per-token cost ``β_MB^e(r)`` first
    reaches the pure-decode marginal cost ``β_d`` (the abstract's "≈20 % on RTX PRO 6000"),
    found by bisection on [0, 1]; None if MB stays below β_d on the whole range, 0.0 if it
    starts above."""
    f0 = beta_mb_e(0.0) - beta_d
    if f0 >= 0:
        return 0.0
    if beta_mb_e(1.0) - beta_d < 0:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if beta_mb_e(mid) - beta_d < 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def crossover_concurrency(
    mu_l: float,
    mu_o: float,
    theta0: float,
    alpha_p: float,
    beta_p: float,
    alpha_d: float,
    beta_d: float,
    beta_mb_e: Callable[[float], float],
    alpha_mb: float | None = None,
) -> float | None:
    """The batch size N above which EB wins when ``k = θ0·N`` (RHS ∝ 1/N, §2.6):
    ``N_x = [(α_p − α_d ln(1−θ0) μ_O)/θ0 − α_MB(1+μ_O)] / ((μ_L+μ_O)·LHS)``.
    None when LHS ≤ 0 (MB wins at every N); 0 when the bracket is ≤ 0 (EB wins at every N)."""
    r = decode_share(mu_l, mu_o)
    lhs = beta_mb_e(r) - beta_eb_w(r, beta_p, beta_d)
    a_mb = alpha_p if alpha_mb is None else alpha_mb
    bracket = (alpha_p - alpha_d * math.log(1.0 - theta0) * mu_o) / theta0 - a_mb * (1.0 + mu_o)
    if lhs <= 0:
        return None
    if bracket <= 0:
        return 0.0
    return bracket / ((mu_l + mu_o) * lhs)
