"""INFERCEPT's GPU-memory waste of the three ways to hold a context during a call.

Waste = memory held without doing useful work × the time it is held (INFERCEPT §4,
``docs/research/augserve.md`` §2.1). All functions return **token·seconds**; multiply by
``M`` (KV bytes per token) for byte·seconds. ``C`` is the paused request's context.

Paper forms (as AugServe restates them, docs/research/augserve.md §2.1):

* Preserve: ``W_P = T_INT · C`` — the context idles for the (remaining) call time;
* Discard: ``W_D = T_fwd(C) · C + T_fwd(C) · C_other`` — recomputing C takes ``T_fwd(C)``,
  during which the recomputed context and the other running contexts wait;
* Swap: ``W_S = 2 · T_swap(C) · N_stalled`` — out and in, each stalling ``N_stalled`` tokens
  of the running batch (the spec's [DEF] for the paper's ``N_fwd_max``).

INFERCEPT's released scheduler refines two of them (docs/research/augserve.md §2.4,
``scheduler_v2.py``):

* chunked Discard (:func:`waste_discard_chunked`): the context is recomputed in chunks that
  fill the spare capacity ``c_h = max(N_sat − running_batch, 1)`` of each iteration;
* budgeted Swap (:func:`waste_swap_budgeted`): within the per-iteration swap budget the
  transfer overlaps compute and stalls nobody; what remains is the request's own memory,
  held while it drains out (C → 0 over ``T_swap``) and fills back in: ``C · T_swap(C)`` [INF].

With the prefix cache (issue 14), a discarded context's full blocks stay cached in the LRU
free queue and a resumed request re-hits those not evicted meanwhile, so Discard recomputes
only ``C − H`` tokens (:func:`expected_cached_tokens`); the Discard forms take that count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tidal.hardware.perf import PerfModel


@dataclass(frozen=True, slots=True)
class IterationProfile:
    """INFERCEPT's linear iteration-time model ``It(N) = α·N + γ`` seconds for a batch of N
    tokens, and its saturation point ``N_sat`` (384 tokens in INFERCEPT's A100 profile)."""

    alpha_s: float
    gamma_s: float
    saturation_tokens: int = 384

    def iteration_s(self, tokens: float) -> float:
        return self.alpha_s * tokens + self.gamma_s

    @property
    def saturated_s(self) -> float:
        """``f_s``: iteration time at the saturation point."""
        return self.iteration_s(self.saturation_tokens)

    @classmethod
    def from_perf(cls, perf: PerfModel, saturation_tokens: int = 384) -> IterationProfile:
        """Fit α and γ to a performance model through prefill steps of ``N_sat`` and
        ``2·N_sat`` tokens (a line through the saturated regime, as INFERCEPT profiles)."""
        n = saturation_tokens

        def t(k: int) -> float:
            return perf.step_ns(0, 0, k, k * k, k, 1) / 1e9

        alpha = (t(2 * n) - t(n)) / n
        gamma = max(t(n) - alpha * n, 0.0)
        return cls(alpha, gamma, n)


def waste_preserve(remaining_call_s: float, ctx: int) -> float:
    """``W_P = max(T_remaining, 0) · C``."""
    return max(remaining_call_s, 0.0) * ctx


def waste_discard(ctx: int, other_ctx: int, t_fwd_s: float) -> float:
    """Paper form ``W_D = T_fwd(C)·C + T_fwd(C)·C_other``."""
    return t_fwd_s * ctx + t_fwd_s * other_ctx


def waste_discard_chunked(
    ctx: int, running_batch: int, running_tokens: int, profile: IterationProfile
) -> float:
    """INFERCEPT code form (docs/research/augserve.md §2.4): with ``c_h = max(N_sat − running_batch,
    1)``, ``n = max(⌈C/c_h⌉ − 1, 0)`` full chunks, ``f_s = It(N_sat)``, ``f_ch = α·c_h``, ``last = C
    mod c_h``::

        W = f_s·c_h·n(n+1)/2 + f_ch·n·running_tokens + α·last·(running_tokens + last)

    (the recomputed context grows by one chunk per saturated iteration; each chunk adds
    ``f_ch`` to the iteration of the ``running_tokens`` other tokens)."""
    c_h = max(profile.saturation_tokens - running_batch, 1)
    n = max(math.ceil(ctx / c_h) - 1, 0)
    f_s = profile.saturated_s
    f_ch = profile.alpha_s * c_h
    w = f_s * c_h * n * (n + 1) / 2 + f_ch * n * running_tokens
    last = ctx % c_h
    return w + profile.alpha_s * last * (running_tokens + last)


def waste_swap(ctx: int, swap_s_per_token: float, stalled_tokens: int) -> float:
    """Paper form ``W_S = 2 · T_swap(C) · N_stalled`` with ``T_swap(C) = C · t_token``."""
    return 2.0 * ctx * swap_s_per_token * stalled_tokens


def waste_swap_budgeted(ctx: int, swap_s_per_token: float) -> float:
    """Budgeted, pipelined swap: ``C · T_swap(C) = C² · t_token`` (module docstring)."""
    return ctx * ctx * swap_s_per_token


def expected_cached_tokens(
    ctx: int, block_size: int, call_s: float, free_tokens: int, alloc_tokens_per_s: float
) -> int:
    """``H``: tokens of a context discarded now that are still cached when it resumes after
    ``call_s``. Its ``⌊C/bs⌋`` full blocks join the most-recent end of the LRU free queue, so
    eviction takes the ``free_tokens`` ahead of them first; the running set claims
    ``alloc_tokens_per_s`` meanwhile; what it claims beyond the free memory is evicted from
    the discarded context, tail block first (the prefix of what is left still hits)::

        H = max(⌊C/bs⌋·bs − ⌈max(alloc·T − free, 0)/bs⌉·bs, 0)
    """
    full = ctx // block_size * block_size
    over = max(alloc_tokens_per_s * max(call_s, 0.0) - free_tokens, 0.0)
    return max(full - math.ceil(over / block_size) * block_size, 0)
