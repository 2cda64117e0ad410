"""Closed forms of exclusive batching (EB) and of the EB/MB crossover.

Source: "Threshold-Based Exclusive Batching for LLM Inference" (arXiv 2606.00516), as specified
in ``docs/research/ebplus.md`` §2 (formulas as implemented by the authors' eb-vllm scheduler;
proposition names are the ones its docstrings use). Pure functions of floats (and of numpy
samples of output lengths), no state.

Notation: prefill step ``α_p + β_p·L``, decode step ``α_d + β_d·j`` (§1.1); ``p`` (``p0``) the
per-step completion probability of a decoding request (CFR: geometric outputs, ``p ≈ 1/μ_O``);
``N`` the EB batch size, ``k`` the completions that trigger a refill, ``θ = k/N``.
"""

from __future__ import annotations

import math

import numpy as np

from tidal.batching.eb_crossover import (
    Crossover,
    beta_eb_w,
    crossover,
    crossover_concurrency,
    decode_share,
    mb_interference,
    threshold_decode_share,
)

__all__ = [  # the §2.6 crossover is re-exported from tidal.batching.eb_crossover
    "THETA_HARD_MIN",
    "Crossover",
    "beta_eb_w",
    "clt_batch_size",
    "cohort_occupancy",
    "cohort_safe_n",
    "crossover",
    "crossover_concurrency",
    "decode_share",
    "ifr_correction",
    "kv_per_slot",
    "mb_interference",
    "mb_safe_n",
    "memory_safe_n",
    "memory_safe_n_paper",
    "optimal_k",
    "output_moments",
    "stationary_occupancy",
    "stationary_safe_n",
    "tau",
    "theta_cfr",
    "theta_lhs",
    "theta_rhs",
    "theta_small",
    "threshold_decode_share",
]

THETA_HARD_MIN = 0.01
"""Floor of every θ the controller computes (eb-vllm ``_PD_THETA_HARD_MIN``)."""


# --------------------------------------------------------------------------- §2.2 exact k*
def tau(j: int, p: float, alpha_d: float, beta_d: float) -> float:
    """Expected time to the next completion while ``j`` requests decode (§2.2):
    ``τ(j) = (α_d + β_d·j) / (1 − (1−p)^j)``, ``τ(0) = ∞``."""
    if j <= 0:
        return math.inf
    denom = 1.0 - (1.0 - p) ** j
    return (alpha_d + beta_d * j) / denom if denom > 0 else math.inf


def optimal_k(n: int, p: float, alpha_p: float, alpha_d: float, beta_d: float) -> int:
    """Exact finite-N threshold (Proposition 1, §2.2): the least ``k ≥ 1`` with
    ``k·τ(N−k) − Σ_{j=N−k+1..N} τ(j) ≥ α_p``; ``⌊N/5⌋`` (at least 1) if none. O(N).

    Keep decoding while one more completion is cheaper than paying a refill's fixed cost."""
    taus = [tau(j, p, alpha_d, beta_d) for j in range(n + 1)]
    tail = 0.0
    for k in range(1, n + 1):
        tail += taus[n - k + 1]
        if k * taus[n - k] >= tail + alpha_p:
            return k
    return max(1, n // 5)


# --------------------------------------------------------------------------- §2.3 asymptotic θ
def theta_lhs(theta: float) -> float:
    """``g(θ) = θ/(1−θ) + ln(1−θ)``: increasing from g(0) = 0 to g(1⁻) = ∞; g(θ) ≈ θ²/2."""
    return theta / (1.0 - theta) + math.log(1.0 - theta)


def theta_rhs(p0: float, alpha_p: float, alpha_d: float, exact: bool = False) -> float:
    """Right side of the θ equation: ``p0·α_p/α_d`` (camera-ready form) or, with ``exact``,
    ``−ln(1−p0)·α_p/α_d`` (the "exact CFR" form, ``Eq. theta_base``)."""
    rate = -math.log1p(-p0) if exact else p0
    return rate * alpha_p / alpha_d


def theta_cfr(p0: float, alpha_p: float, alpha_d: float, exact: bool = False) -> float:
    """Asymptotically optimal switching fraction θ* (CFR base, §2.3): the root of
    ``θ/(1−θ) + ln(1−θ) = p0·α_p/α_d`` (or the exact-CFR right side), by bisection on
    [0.001, 0.999]; clamped to [0.01, 0.99]; 0.01 when the right side is ≤ 1e-6."""
    if p0 <= 0.0:
        return THETA_HARD_MIN
    if p0 >= 1.0:
        return 0.99
    rhs = theta_rhs(p0, alpha_p, alpha_d, exact)
    if rhs <= 1e-6:
        return THETA_HARD_MIN
    lo, hi = 0.001, 0.999
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        g = theta_lhs(mid)
        if abs(g - rhs) < 1e-12:
            lo = hi = mid
            break
        if g < rhs:
            lo = mid
        else:
            hi = mid
    return max(THETA_HARD_MIN, min(0.99, 0.5 * (lo + hi)))


def theta_small(p0: float, alpha_p: float, alpha_d: float) -> float:
    """Small-θ approximation of the CFR threshold: ``θ* ≈ sqrt(2·p0·α_p/α_d)`` (§2.3)."""
    return math.sqrt(2.0 * p0 * alpha_p / alpha_d)


# --------------------------------------------------------------------------- §2.4 IFR
def ifr_correction(theta0: float, p0: float, eta: float, rho: float) -> float:
    """First-order correction for an increasing hazard ``h(t) = p0 + η·t`` (Theorem
    ``thm:threshold_ifr``, §2.4): ``Δθ = η(1−θ0)²/(p0²·θ0) · [Λ(θ0/(1−θ0) − Λ/2) + ρ(Λ − θ0)]``
    with ``Λ = −ln(1−θ0)`` and ``ρ = β_d·N/α_d``. Guards: 0 ≤ Δθ ≤ 5·θ0; 0 when η ≤ 0."""
    if eta <= 0.0 or not 0.0 < theta0 < 1.0:
        return 0.0
    lam = -math.log(1.0 - theta0)
    duration = lam * (theta0 / (1.0 - theta0) - lam / 2.0)
    per_token = rho * (lam - theta0)
    denom = p0 * p0 * theta0
    if denom < 1e-12:
        return 0.0
    delta = eta * (1.0 - theta0) ** 2 / denom * (duration + per_token)
    return min(max(0.0, delta), 5.0 * theta0)


# --------------------------------------------------------------------------- §2.5 memory-safe N
def kv_per_slot(theta: float, p0: float, mu_l: float) -> float:
    """Expected KV occupancy of one EB slot in steady state (Proposition 3):
    ``D(θ) = μ_L + (1−θ)/(θ·p0) · ln(1/(1−θ))``; D(θ→0) → μ_L + 1/p0."""
    lam = -math.log(1.0 - theta)
    return mu_l + (1.0 - theta) / (theta * p0) * lam


def memory_safe_n_paper(capacity: float, theta: float, p0: float, mu_l: float, eps: float) -> int:
    """Paper closed form (Eq. ``eq:Nstar``): ``N̂* = ⌊(C − ν·ln(1/ε)) / D(θ)⌋`` with
    ``ν = 1/(p0²·μ_L)`` — keeps P(KV overflow) ≤ ε. At least 1."""
    nu = 1.0 / (p0 * p0 * mu_l)
    return max(1, math.floor((capacity - nu * math.log(1.0 / eps)) / kv_per_slot(theta, p0, mu_l)))


def clt_batch_size(
    capacity: float, d: float, var: float, eps: float = 0.01, n_cap: int = 1 << 30
) -> int:
    """The largest N with ``N·D + σ·sqrt(N·ln(1/ε)) ≤ C`` (the CLT bound of §2.5 for N slots of
    mean occupancy D and variance σ² = ``var``): ``√N = (−σ√ℓ + sqrt(σ²ℓ + 4DC)) / (2D)``,
    ℓ = ln(1/ε), ε clamped to [1e-6, 0.5]; clamped to [1, ``n_cap``]."""
    eps = min(max(eps, 1e-6), 0.5)
    ell = math.log(1.0 / eps)
    sigma = math.sqrt(max(var, 0.0))
    root = (-sigma * math.sqrt(ell) + math.sqrt(var * ell + 4.0 * d * capacity)) / (2.0 * d)
    n = math.floor(max(0.0, root) ** 2)
    return max(1, min(n_cap, n))


def memory_safe_n(
    capacity: float, theta: float, p0: float, mu_l: float, eps: float = 0.01, n_cap: int = 1 << 30
) -> int:
    """CLT form the authors' code uses for all paper results (§2.5): the largest N with
    ``N·D(θ) + σ(θ)·sqrt(N·ln(1/ε)) ≤ C``, ``σ² = 2Λ(1 + (p0·μ_L + Λ/θ)²)/p0²``, solved as
    ``√N = (−σ√ℓ + sqrt(σ²ℓ + 4DC)) / (2D)``, ℓ = ln(1/ε); clamped to [1, ``n_cap``].
    ε is clamped to [1e-6, 0.5]; invalid θ or p0 return ``n_cap``."""
    if not 0.0 < theta < 1.0 or p0 <= 0.0 or capacity <= 0:
        return n_cap
    lam = -math.log(1.0 - theta)
    d = mu_l + (1.0 - theta) / (theta * p0) * lam
    sigma_sq = 2.0 * lam * (1.0 + (p0 * mu_l + lam / theta) ** 2) / max(p0 * p0, 1e-18)
    return clt_batch_size(capacity, d, sigma_sq, eps, n_cap)


def stationary_occupancy(
    mu_l: float, var_l: float, m1: float, m2: float, m3: float
) -> tuple[float, float]:
    """Mean and variance of one slot's KV occupancy (tokens) under continuous
    batching, where a slot is refilled as soon as its request completes (MB, and EB's θ → 0
    limit). By the renewal-reward theorem the request in a slot at a random time is length-
    biased and its age A (tokens generated so far) is uniform over its output length, so with
    ``m_j = E[O^j]``: ``E[A] = m2/(2·m1)``, ``E[A²] = m3/(3·m1)`` (continuous ages: the mean is
    exactly midway between counting 0…O−1 and 1…O generated tokens); the occupancy is the
    prompt plus A (prompt independent of output length): mean ``μ_L + m2/(2·m1)``, variance
    ``Var(L) + Var(A)``.

    For geometric outputs (the paper's CFR, mean 1/p) ``m2/(2·m1) = (2−p)/(2p) ≈ 1/p``: the
    mean is the paper's ``D(θ → 0) = μ_L + 1/p0`` (§2.5). For bounded outputs it is smaller
    (uniform ±50 % around μ_O: ``μ_L + 0.54·μ_O``), which is why the CFR occupancy overstates
    MB's KV need by up to 2× on the synthetic mixes."""
    if m1 <= 0:
        return mu_l, max(var_l, 0.0)
    ea = m2 / (2.0 * m1)
    var_a = max(0.0, m3 / (3.0 * m1) - ea * ea)
    return mu_l + ea, max(var_l, 0.0) + var_a


def stationary_safe_n(
    capacity: float,
    mu_l: float,
    var_l: float,
    m1: float,
    m2: float,
    m3: float,
    eps: float = 0.01,
    n_cap: int = 1 << 30,
) -> int:
    """Memory-safe batch size of continuous batching in steady state: :func:`clt_batch_size`
    with the stationary slot occupancy of :func:`stationary_occupancy` (the §2.5 CLT bound with
    MB's own steady state instead of EB's cycle). ``n_cap`` without output data."""
    if m1 <= 0 or capacity <= 0:
        return n_cap
    d, var = stationary_occupancy(mu_l, var_l, m1, m2, m3)
    return clt_batch_size(capacity, d, var, eps, n_cap)


def cohort_occupancy(
    mu_l: float, var_l: float, outputs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-slot KV occupancy of a cohort of requests admitted together, at each age t at which
    one of ``outputs`` (an output-length sample) is still running: a request of age t holds
    ``X = (L + t)·1{O > t}`` tokens, so with ``S(t) = P(O > t)``:
    ``E[X] = (μ_L + t)·S(t)`` and ``Var(X) = (Var(L) + (μ_L + t)²)·S(t) − E[X]²``. Evaluated at
    ``t = o − 1`` for every sampled length o (where ``S`` steps down), S empirical. Returns
    ``(mean, var)`` arrays."""
    o = np.sort(np.asarray(outputs, dtype=np.float64))
    n = len(o)
    surv = (n - np.searchsorted(o, o, side="left")) / n  # P(O ≥ o_i) = P(O > o_i − 1)
    tok = mu_l + o - 1.0
    mean = tok * surv
    var = (max(var_l, 0.0) + tok * tok) * surv - mean * mean
    return mean, np.maximum(var, 0.0)


def cohort_safe_n(
    capacity: float,
    mu_l: float,
    var_l: float,
    outputs: np.ndarray,
    eps: float = 0.01,
    n_cap: int = 1 << 30,
) -> int:
    """The largest N whose cohort (N requests admitted at once, as closed-loop clients at a
    phase start or a burst) stays within the KV capacity at every age with the §2.5 CLT margin:
    the minimum over ages of :func:`clt_batch_size` with :func:`cohort_occupancy`. ``n_cap``
    without output data."""
    if len(outputs) == 0 or capacity <= 0:
        return n_cap
    d, var = cohort_occupancy(mu_l, var_l, outputs)
    ok = d > 0
    if not ok.any():
        return n_cap
    d, var = d[ok], var[ok]
    # clt_batch_size at every age at once (the same expression, elementwise)
    ell = math.log(1.0 / min(max(eps, 1e-6), 0.5))
    root = (-np.sqrt(var) * math.sqrt(ell) + np.sqrt(var * ell + 4.0 * d * capacity)) / (2.0 * d)
    n = int(np.floor(np.maximum(root, 0.0) ** 2).min())
    return max(1, min(n_cap, n))


def output_moments(outputs: np.ndarray) -> tuple[float, float, float]:
    """``(E[O], E[O²], E[O³])`` of an output-length sample (zeros when empty)."""
    o = np.asarray(outputs, dtype=np.float64)
    if len(o) == 0:
        return 0.0, 0.0, 0.0
    return float(o.mean()), float((o * o).mean()), float((o**3).mean())


def mb_safe_n(
    capacity: float,
    mu_l: float,
    var_l: float,
    outputs: np.ndarray,
    eps: float = 0.01,
    n_cap: int = 1 << 30,
) -> int:
    """Memory-safe running-set size of mixed batching (EB⁺'s MB mode): the smaller of the
    steady-state (:func:`stationary_safe_n`) and the cohort (:func:`cohort_safe_n`) bounds,
    from an output-length sample (the estimator's window) and the prompt mean and variance."""
    o = np.asarray(outputs, dtype=np.float64)
    if len(o) == 0:
        return n_cap
    m1, m2, m3 = output_moments(o)
    return min(
        stationary_safe_n(capacity, mu_l, var_l, m1, m2, m3, eps, n_cap),
        cohort_safe_n(capacity, mu_l, var_l, o, eps, n_cap),
    )
