"""SGLang's scheduler with its launch flags ``--enable-mixed-chunk`` and ``--max-prefill-tokens``.

SGLang (0.5's ``Scheduler.get_new_batch_prefill`` and ``PrefillAdder`` in
``managers/schedule_policy.py``, Apache-2.0) builds each step's prefill batch from the
pending chunk of a running prefill, then from the queue head, under two budgets:

* the chunk budget ``chunked_prefill_size`` (Tidal's token budget): a prompt larger than what
  is left of it is cut to that (one chunk), and the step ends;
* the prefill cap ``max_prefill_tokens`` (default 16,384): the step's *first* prefill is
  admitted whole (only the chunk budget cuts it); each further new prompt only while its new
  tokens stay *below* the cap less the tokens the step already prefills
  (``real_input_tokens >= rem_input_tokens and can_run_list`` refuses it; it then waits for
  the next step, and so do the prompts behind it). This is 0.5.6's ``add_one_req``; not
  modelled: its ``add_one_req_ignore_eos`` (``ignore_eos`` with the radix cache off) and
  newer SGLang with chunked prefill have no per-prompt test, only the stop once the step's
  prefill reaches the cap.

Without ``--enable-mixed-chunk`` a step is a prefill batch whenever one can be formed and a
decode batch of every running request otherwise (:mod:`tidal.engine.prefill_first`). With it
the running decodes join the prefill batch (``mix_with_running``) and take one token each
from both budgets (``mixed_with_decode_tokens``): Tidal's mixed step
(:mod:`tidal.engine.mb`) under SGLang's cap.

A new prompt's tokens are counted without prefix-cache hits (SGLang counts the uncached
extend length; the cap is then conservative where a prompt hits the cache). Fast-forward is
exact: a refusal by the cap happens only in a step that already prefills, which is never a
repeated pure-decode step (:meth:`MixedBatching.repeatable_steps`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tidal.core.request import Request
from tidal.engine.mb import MixedBatching
from tidal.engine.plan import StepPlan
from tidal.engine.policy import BATCHING
from tidal.engine.state import EngineState

SGLANG_MAX_PREFILL_TOKENS = 16384
"""SGLang's default ``--max-prefill-tokens``."""


class SGLangOptions(BaseModel):
    """SGLang's launch flags that shape a step (``scheduler.options`` of ``sglang``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    enable_mixed_chunk: bool = False
    """``--enable-mixed-chunk``: running decodes share the step of a prefill chunk."""
    max_prefill_tokens: int = Field(default=SGLANG_MAX_PREFILL_TOKENS, ge=1)
    """``--max-prefill-tokens``: the cap on a step's new prefill tokens past its first prompt."""


class _Cap:
    """One step's admission test: the step's first prefill passes (whole, chunked by the
    budget); a further prompt passes iff its new tokens are below ``cap`` less the step's
    prefill tokens so far."""

    __slots__ = ("cap", "plan", "refused")

    def __init__(self, plan: StepPlan, cap: int) -> None:
        self.plan, self.cap, self.refused = plan, cap, False

    def __call__(self, req: Request) -> bool:
        plan = self.plan
        if not plan.prefills:
            return True
        ok = req.num_tokens - req.num_computed_tokens < self.cap - plan.prefill_tokens
        self.refused = not ok
        return ok


@BATCHING.register("sglang")
class SGLangBatching(MixedBatching):
    """SGLang's step: prefill-first, or mixed with ``enable_mixed_chunk``, under SGLang's
    ``max_prefill_tokens`` admission cap."""

    name = "sglang"
    Options = SGLangOptions

    def __init__(self, state: EngineState, options: object = None) -> None:
        super().__init__(state, options)
        opts = options if isinstance(options, SGLangOptions) else SGLangOptions()
        self.mixed = opts.enable_mixed_chunk
        self.max_prefill_tokens = opts.max_prefill_tokens

    def schedule(self, now_ns: int) -> StepPlan:
        st = self.state
        st.waiting.refresh(now_ns)
        plan = StepPlan()
        if self.mixed:
            budget = st.schedule_running(plan, st.step_budget)
            if plan.preempted:
                return plan
            # the decodes count against the cap as they do against the chunk budget
            cap = self.max_prefill_tokens - plan.num_decodes
        else:
            budget, _ = st.continue_prefills(plan, st.step_budget)
            cap = self.max_prefill_tokens
        test = _Cap(plan, cap)
        st.admit(plan, budget, now_ns, None, test)
        if test.refused:  # refused by the cap, not for KV: the next step may admit it
            st.admission_blocked_by_kv = False
        if not self.mixed and not plan.prefills:
            st.schedule_running(plan, 0, prefills=False)
        return plan
