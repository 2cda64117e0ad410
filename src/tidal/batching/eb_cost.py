"""Per-token cost of EB and MB at the operating point, from the deployment's step times
(``crossover_cost: steps``, EB⁺'s default).

The paper's crossover (§2.6, :func:`eb_theory.crossover`) compares the two policies through
linear step costs ``α + β·tokens`` fitted over prefills of 256…4096 tokens and decode batches
of 16…1024 at a 512-token context. Where the step time is not linear at the operating point —
a prefill fit whose intercept vanishes (compute-bound prefills: A100, L40S, A40), decode steps
whose KV reads grow with the context, a mixed step whose prefill compute overlaps the weight
read — the fitted constants misplace the crossover by more than the gap it decides (measured:
A100 / Qwen3-8B / balanced mix at c = 128, the closed form had MB 10 % cheaper, EB runs 7 %
faster). This module evaluates the same steady-state cycles on the step-time function itself.

With ``n`` running requests, prompt μ_L, output μ_O, mean decode context ``x̄ = μ_L + μ_O/2``
(ages uniform over an output) and token budget ``B``:

* **MB** (continuous batching): λ = n/(1 + μ_O) admissions per step. λ ≥ 1: every step
  decodes ``n`` and prefills ``λ·μ_L`` tokens (at most B − n); λ < 1: a fraction λ of the steps
  prefills one prompt beside ``n − 1`` decodes, the rest decode ``n``. Cost = E[step time] /
  (decode + prefill tokens per step).
* **EB** (refill cycle): ``k ≥ 1`` completions vacate ``k`` slots, refilled by ``⌈k·μ_L/B⌉``
  prefill-only steps; meanwhile ``k·μ_O/n̄`` decode-only steps at ``n̄ = n − (k − 1)/2``
  running: the count steps down n, n − 1, …, n − k + 1 between the k completions (the
  refill follows the k-th), so at k = 1 the whole cycle decodes n. The step time at a
  fractional n̄ is interpolated between its integer neighbours. Cost = cycle time /
  ``k·(μ_L + μ_O)``. (Issue 18: ``n − k/2`` rounded to an integer decoded 3 of 4 at c = 4,
  k = 1, and put EB 20–25 % above MB in every c = 4 cell of the robustness grid, where the
  two realise within ±3 %; at c = 16, 2–5 % against EB.)

The step function is the deployment's own (mixed steps with their interference). Both run at
the same memory-safe count (EB's ``min(N_obs, N̂*, N_max)``): MB's running set is held by the
same KV cache. The signal is ``c_MB − c_EB`` (s/token), EB wins when it is positive — the
closed form's sign convention and hysteresis δ.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

StepFn = Callable[..., int]


@dataclass(frozen=True)
class StepCrossover:
    c_eb: float
    c_mb: float

    @property
    def delta(self) -> float:
        """``c_MB − c_EB``: positive where EB is cheaper per token."""
        return self.c_mb - self.c_eb


def _prefill(step: StepFn, tokens: int, prompt: int, decodes: int = 0, ctx: int = 0) -> float:
    """Seconds of a step prefilling ``tokens`` tokens of fresh prompts of ``prompt`` tokens
    each (beside ``decodes`` decodes of total context ``ctx``)."""
    prompt = max(1, prompt)
    num = max(1, math.ceil(tokens / prompt))
    return step(decodes, ctx, tokens, tokens * prompt, tokens, num) / 1e9


def mb_cost(step: StepFn, n: float, mu_l: float, mu_o: float, budget: int) -> float:
    """MB's per-token seconds at ``n`` running requests (module docstring)."""
    nd = max(1, round(n))
    ctx = round(mu_l + mu_o / 2)
    prompt = max(1, round(mu_l))
    lam = nd / (1.0 + mu_o)
    if lam >= 1.0:
        p = max(1, min(round(lam * mu_l), budget - nd))
        return _prefill(step, p, prompt, nd, nd * ctx) / (nd + p)
    mixed = _prefill(step, min(prompt, budget), prompt, nd - 1, (nd - 1) * ctx)
    pure = step(nd, nd * ctx) / 1e9
    return (lam * mixed + (1.0 - lam) * pure) / (nd + lam * prompt)


def eb_cost(step: StepFn, n: float, k: float, mu_l: float, mu_o: float, budget: int) -> float:
    """EB's per-token seconds of a refill cycle of ``k`` slots at ``n`` (module docstring)."""
    k = max(1.0, min(k, n))
    prompt = max(1, round(mu_l))
    total = max(1, round(k * mu_l))
    full, rest = divmod(total, max(1, budget))
    t = full * _prefill(step, budget, prompt) if full else 0.0
    if rest:
        t += _prefill(step, rest, prompt)
    nbar = max(1.0, n - (k - 1.0) / 2.0)
    t += k * mu_o / nbar * _decode(step, nbar, round(mu_l + mu_o / 2))
    return t / (k * (mu_l + mu_o))


def _decode(step: StepFn, n: float, ctx: int) -> float:
    """Seconds of a decode-only step of ``n`` requests of context ``ctx`` each, linear between
    the integer counts around a fractional ``n``."""
    lo = math.floor(n)
    t_lo = step(lo, lo * ctx) / 1e9
    frac = n - lo
    if frac == 0.0:
        return t_lo
    return t_lo + frac * (step(lo + 1, (lo + 1) * ctx) / 1e9 - t_lo)


def step_crossover(
    step: StepFn, n_mb: float, n_eb: float, k: float, mu_l: float, mu_o: float, budget: int
) -> StepCrossover:
    return StepCrossover(
        eb_cost(step, n_eb, k, mu_l, mu_o, budget), mb_cost(step, n_mb, mu_l, mu_o, budget)
    )
