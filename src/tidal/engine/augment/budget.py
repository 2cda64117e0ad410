"""Per-iteration batch token budget (registry ``token_budget``).

* ``static`` — a constant B (vLLM's ``max_num_batched_tokens``; INFERCEPT's code hard-codes its
  profiled saturation point, 384 tokens, augserve.md §2.4);
* ``dynamic`` — AugServe (augserve.md §3.5 [INF]/[DEF]; its only precedent is INFERCEPT's
  commented-out ``clip(paused_preserved + free − 1000, 0, max_num_batched_tokens)``)::

      B_t = clip(free − watermark + ρ·paused − need − reserve, B_min, B_max)

  with ``free`` the free GPU KV tokens, ``paused`` the KV tokens held on the GPU by paused
  requests (reclaimable by discard or swap), ``need`` the tokens this iteration's decodes add,
  ``reserve`` a safety margin (INFERCEPT's 1000). Lots of free memory → big prefill chunks
  (queued prompts drain fast); memory pressure → small ones (fewer requests admitted that
  would soon be preempted). Admission itself still needs the blocks to be free (vLLM's
  watermark check): the paused memory counted here is reclaimable by the intercept policy,
  not taken by force.

  **Memory-pressure fallback** (issue 18; not in the paper): for ``cooldown`` after the KV
  cache ran out — a running request preempted, or an idle context reclaimed (discarded) to
  make room — the budget is ``B_min``, INFERCEPT's static ``N_sat`` budget. The headroom
  counts free memory now, not the growth of the contexts already admitted; where the cache
  holds only a few contexts (Llama-3.1-70B at TP 2 on 80 GB GPUs: 23k tokens), large chunks
  admit requests faster than the running set can grow into the space, every admission wave
  ends in preemptions and discards, and the recompute (10× INFERCEPT's) costs more than the
  larger chunks save. After a pressure event the cache is KV-bound by observation, and
  INFERCEPT's one-chunk-per-iteration admission is what holds there; the dynamic budget
  returns once ``cooldown`` passes without another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidal.core.registry import Registry

if TYPE_CHECKING:
    from tidal.engine.augment.component import Augmentation


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
        cooldown_ns: int = 10_000_000_000,
    ) -> None:
        if b_min > b_max:
            raise ValueError("dynamic budget: b_min must be <= b_max")
        self.b_min, self.b_max, self.reserve, self.rho = b_min, b_max, reserve, rho
        self.cooldown_ns = cooldown_ns
        """Memory-pressure fallback window (0: off; module docstring)."""

    def headroom(self, s: Augmentation) -> float:
        """``free − watermark + ρ·paused − need − reserve`` in tokens (unclipped)."""
        kv = s.kv
        free = (kv.num_free_blocks - kv.watermark_blocks) * kv.block_size
        paused = s.paused_gpu_blocks() * kv.block_size
        return free + self.rho * paused - len(s.pool) - self.reserve

    def under_pressure(self, s: Augmentation) -> bool:
        """The KV cache ran out less than ``cooldown`` ago (the fallback holds)."""
        last = s.last_pressure_ns
        return last >= 0 and s._now - last < self.cooldown_ns

    def budget(self, s: Augmentation) -> int:
        if self.under_pressure(s):
            s.fallback_steps += 1
            return self.b_min
        return int(min(max(self.headroom(s), self.b_min), self.b_max))
