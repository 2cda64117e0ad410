"""Per-iteration batch token budget (registry ``token_budget``).

* ``static`` — a constant B (vLLM's ``max_num_batched_tokens``; INFERCEPT's code hard-codes its
  profiled saturation point, 384 tokens, docs/research/augserve.md §2.4);
* ``dynamic`` — AugServe (docs/research/augserve.md §3.5 [INF]/[DEF]; its only precedent is
  INFERCEPT's commented-out ``clip(paused_preserved + free − 1000, 0, max_num_batched_tokens)``)::

      B_t = clip(free − watermark + ρ·paused − γ·grow − reserve, B_min, B_max)

  with ``free`` the free GPU KV tokens, ``paused`` the KV tokens held on the GPU by paused
  requests (reclaimable by discard or swap), ``reserve`` a safety margin (INFERCEPT's 1000)
  and ``grow`` the KV the running set will still claim before it next stops: per running
  request its pending prefill plus its predicted decode to the next call or the end,
  ``max(Ĝ − generated, 1) / (K̂ − k + 1)`` (the predictor's remaining tokens over its
  remaining segments). The spec's ``need`` (this iteration's decodes) is that horizon cut
  to one step; counting the whole segment, ``γ = 3`` times (its variance: a segment's
  length is uncertain, a preemption costs its whole recompute), keeps the budget from
  admitting what the running set is about to grow into (issue 18: Llama-3.1-70B at TP 2,
  a 23k-token cache; γ = 2 still let P99 TTFT reach 1.10× INFERCEPT's there). Lots of
  free memory → big prefill chunks (queued prompts drain fast); memory pressure → small
  ones (fewer requests admitted that would soon be preempted). Admission itself still needs
  the blocks to be free (vLLM's watermark check): the paused memory counted here is
  reclaimable by the intercept policy, not taken by force.

  **Memory-pressure fallback** (issue 18; not in the paper): for ``cooldown`` after the KV
  cache ran out — a running request preempted, or an idle context reclaimed (discarded) to
  make room — the budget is ``B_min``, INFERCEPT's static ``N_sat`` budget. The growth term
  is a forecast; where the cache
  holds only a few contexts (Llama-3.1-70B at TP 2 on 80 GB GPUs: 23k tokens), large chunks
  admit requests faster than the running set can grow into the space, every admission wave
  ends in preemptions and discards, and the recompute (10× INFERCEPT's) costs more than the
  larger chunks save. After a pressure event the cache is KV-bound by observation, and
  INFERCEPT's one-chunk-per-iteration admission is what holds there; the dynamic budget
  returns once ``cooldown`` passes without another. The default cooldown (600 s) treats
  one pressure event as the regime's signature: a cache that ran out once runs out again
  at the next admission wave, and each wave's recompute costs more than the larger chunks
  between waves saved (docs/design/augserve-defaults.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidal.core.registry import Registry

if TYPE_CHECKING:
    from tidal.augment.component import Augmentation


class TokenBudget:
    name = "base"
    dynamic = False

    def budget(self, s: Augmentation) -> int:
        raise NotImplementedError


TOKEN_BUDGETS: Registry[type[TokenBudget]] = Registry("token_budget")


@TOKEN_BUDGETS.register("static")
class StaticBudget(TokenBudget):
    name = "static"

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def budget(self, s: Augmentation) -> int:
        return self.tokens


@TOKEN_BUDGETS.register("dynamic")
class DynamicBudget(TokenBudget):
    name = "dynamic"
    dynamic = True

    def __init__(
        self,
        b_min: int = 384,
        b_max: int = 8192,
        reserve: int = 1000,
        rho: float = 1.0,
        cooldown_ns: int = 600_000_000_000,
        growth_factor: float = 3.0,
    ) -> None:
        if b_min > b_max:
            raise ValueError("dynamic budget: b_min must be <= b_max")
        self.b_min, self.b_max, self.reserve, self.rho = b_min, b_max, reserve, rho
        self.cooldown_ns = cooldown_ns
        """Memory-pressure fallback window (0: off; module docstring)."""
        self.growth_factor = growth_factor
        """γ: weight of the running set's predicted growth (0: the spec's one-step need)."""

    def headroom(self, s: Augmentation) -> float:
        """``free − watermark + ρ·paused − γ·grow − reserve`` in tokens (unclipped; with
        ``γ = 0``, the spec's ``− need``)."""
        kv = s.kv
        free = (kv.num_free_blocks - kv.watermark_blocks) * kv.block_size
        paused = s.paused_gpu_blocks() * kv.block_size
        if self.growth_factor:
            grow = self.growth_factor * running_growth(s)
        else:
            grow = len(s.pool)
        return free + self.rho * paused - grow - self.reserve

    def under_pressure(self, s: Augmentation) -> bool:
        """The KV cache ran out less than ``cooldown`` ago (the fallback holds)."""
        last = s.last_pressure_ns
        return last >= 0 and s._now - last < self.cooldown_ns

    def budget(self, s: Augmentation) -> int:
        if self.under_pressure(s):
            s.fallback_steps += 1
            return self.b_min
        return int(min(max(self.headroom(s), self.b_min), self.b_max))


def running_growth(s: Augmentation) -> float:
    """``grow``: KV tokens the running set will still claim before each request next stops
    (pending prefill + predicted decode to the next call or the end; module docstring)."""
    pool, runs = s.pool, s.runs
    total = 0.0
    for r in s.running.values():
        run = runs[r.request_id]
        if r.in_pool:
            generated = pool.computed(r) + 1 - r.prompt_len - r.num_extra_tokens
        else:
            generated = r.num_output_tokens
        pred = run.pred
        left = max(pred.output_tokens - generated, 1.0)
        total += left / (max(pred.num_calls - run.k, 0) + 1)
        total += r.num_tokens - r.num_computed_tokens
    return total
