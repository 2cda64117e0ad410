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
        self, b_min: int = 384, b_max: int = 8192, reserve: int = 1000, rho: float = 1.0
    ) -> None:
        if b_min > b_max:
            raise ValueError("dynamic budget: b_min must be <= b_max")
        self.b_min, self.b_max, self.reserve, self.rho = b_min, b_max, reserve, rho

    def headroom(self, s: Augmentation) -> float:
        """``free − watermark + ρ·paused − need − reserve`` in tokens (unclipped)."""
        kv = s.kv
        free = (kv.num_free_blocks - kv.watermark_blocks) * kv.block_size
        paused = s.paused_gpu_blocks() * kv.block_size
        return free + self.rho * paused - len(s.pool) - self.reserve

    def budget(self, s: Augmentation) -> int:
        return int(min(max(self.headroom(s), self.b_min), self.b_max))
