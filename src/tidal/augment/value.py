"""AugServe's scheduling value: the estimated system cost of a request's (remaining) phases.

Stage I (on arrival, docs/research/augserve.md §3.2): from the predicted output length Ĝ, the
predicted calls (T̂_k, Â_k) and the context at each call, pick each call's context policy Ŝ_k by
INFERCEPT's min-waste rule (paper forms, :mod:`tidal.augment.waste`) and sum the cost of
prefill, decode, the calls under Ŝ_k and the resumptions. Stage II (docs/research/augserve.md §3.3):
whenever the request re-enters the ready queue (a call returned, it was preempted) the value is
recomputed over the *remaining* phases only, with what is now known: the actual returned tokens
still to prefill, the policy actually used (a Discard adds the recompute), the generated count (Ĝ is
re-bucketed upward once it is exceeded). Lower value = cheaper = served first.

The paper's exact equation could not be retrieved (docs/research/augserve.md §0); this is the spec's
reconstruction [INF], in two units, switchable:

memory-time (default; token·seconds, INFERCEPT's waste units; LAMPS ranks the same way)::

    prefill   It · ⌈D/N⌉ · C_D            D tokens to prefill, C_D the context after it
    decode    It · ĝ · (c + ĝ/2)          ĝ tokens decoded from context c
    call k    W_{Ŝ_k}(c_k, T̂_k)
    resume k  It · ⌈Â_k/N⌉ · (c_k + Â_k)  (+ It·⌈r_k/N⌉·r_k if Ŝ_k = Discard,
                                            + T_swap(c_k)·c_k if Ŝ_k = Swap)

time (Proposition 1's units, seconds of service)::

    It · (⌈D/N⌉ + Ĝ_rem + Σ_k Â_k/N) + Σ_k penalty(Ŝ_k)    penalty: 0 | T_fwd(c_k) | 2·T_swap(c_k)

with ``It`` the iteration time at the current token budget ``N`` (the dynamic budget when it
is on), and ``r_k = c_k − H_k`` the tokens a Discard recomputes (``H_k``: those expected to
stay in the prefix cache through the call, 0 without it). Without a prediction (``none``)
every request has value 0 (FCFS by arrival).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tidal.augment.predictor import NO_PREDICTION, Prediction, bucket_upper
from tidal.augment.waste import (
    IterationProfile,
    expected_cached_tokens,
    waste_discard,
    waste_preserve,
    waste_swap,
)

PRESERVE, DISCARD, SWAP = 0, 1, 2


@dataclass(frozen=True, slots=True)
class CostEnv:
    """Runtime quantities the value uses (a snapshot when the value is computed)."""

    profile: IterationProfile
    budget: int
    """N: tokens per iteration."""
    swap_s_per_token: float
    other_ctx: int
    """GPU context tokens of the running batch (``C_other``, and the stalled term of W_S)."""
    swap_ok: bool = True
    """Whether host swap space is free (else Swap is not a candidate)."""
    cache: tuple[int, float] | None = None
    """With the prefix cache: (free GPU tokens, tokens/s the running batch claims), the
    inputs of a discarded context's expected re-hit ``H``; a Discard recomputes ``C − H``."""
    block_size: int = 16

    @property
    def it_s(self) -> float:
        return self.profile.iteration_s(self.budget)

    def t_fwd_s(self, tokens: float) -> float:
        return self.it_s * math.ceil(tokens / self.budget)

    def recompute_tokens(self, ctx: int, call_s: float) -> int:
        """Tokens a context discarded for a call of ``call_s`` recomputes (``C − H``)."""
        if self.cache is None:
            return ctx
        return ctx - expected_cached_tokens(ctx, self.block_size, call_s, *self.cache)


def min_waste_policy(ctx: int, call_s: float, env: CostEnv) -> tuple[int, float]:
    """INFERCEPT's rule with the paper's waste forms (docs/research/augserve.md §2.1): argmin over
    Preserve, Discard, Swap of their waste; returns (policy, waste). Discard recomputes only
    the tokens not expected to stay cached (:meth:`CostEnv.recompute_tokens`)."""
    rec = env.recompute_tokens(ctx, call_s)
    w = [
        waste_preserve(call_s, ctx),
        waste_discard(rec, env.other_ctx, env.t_fwd_s(rec)),
        waste_swap(ctx, env.swap_s_per_token, env.other_ctx) if env.swap_ok else math.inf,
    ]
    best = min(range(3), key=lambda i: (w[i], i))
    return best, w[best]


def remaining_value(
    pred: Prediction,
    *,
    prompt: int,
    context: int,
    pending: int,
    generated: int,
    calls_done: int,
    env: CostEnv,
    form: str = "memory",
) -> float:
    """Value of the remaining phases of a request whose context (after its pending prefill)
    is ``context`` tokens, ``pending`` of them still to prefill, having generated
    ``generated`` tokens and finished ``calls_done`` calls."""
    if pred is NO_PREDICTION:
        return 0.0
    n_budget = env.budget
    it = env.it_s
    g_total = pred.output_tokens
    if generated >= g_total:
        g_total = float(bucket_upper(generated))
    g_left = max(g_total - generated, 1.0)
    calls_left = max(pred.num_calls - calls_done, 0)
    g_seg = g_left / (calls_left + 1)
    c = float(context)
    if form == "time":
        v = it * (math.ceil(pending / n_budget) + g_left)
        for j in range(calls_done, calls_done + calls_left):
            c += g_seg
            pol, _ = min_waste_policy(int(c), pred.call_s[j], env)
            v += it * pred.return_tokens[j] / n_budget
            if pol == DISCARD:
                v += env.t_fwd_s(env.recompute_tokens(int(c), pred.call_s[j]))
            elif pol == SWAP:
                v += 2 * c * env.swap_s_per_token
            c += pred.return_tokens[j]
        return v
    v = it * math.ceil(pending / n_budget) * c if pending else 0.0
    for j in range(calls_done, calls_done + calls_left + 1):
        v += it * g_seg * (c + g_seg / 2)
        c += g_seg
        if j == calls_done + calls_left:
            break
        pol, w = min_waste_policy(int(c), pred.call_s[j], env)
        a = pred.return_tokens[j]
        v += w + it * math.ceil(a / n_budget) * (c + a)
        if pol == DISCARD:
            rec = env.recompute_tokens(int(c), pred.call_s[j])
            v += env.t_fwd_s(rec) * rec
        elif pol == SWAP:
            v += c * env.swap_s_per_token * c
        c += a
    return v


def stage1_value(pred: Prediction, prompt: int, env: CostEnv, form: str = "memory") -> float:
    """V1 on arrival: the whole request, its prompt still to prefill."""
    return remaining_value(
        pred,
        prompt=prompt,
        context=prompt,
        pending=prompt,
        generated=0,
        calls_done=0,
        env=env,
        form=form,
    )
