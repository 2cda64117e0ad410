"""Prefill-first batching: SGLang's default scheduler (``--enable-mixed-chunk`` off).

A step is a prefill batch whenever one can run — the pending chunk of a running prefill first,
then admissions from the queue head within the token budget (SGLang's
``chunked_prefill_size``) and the KV watermark — and a decode batch of every running request
only when nothing can be prefilled. Prefill and decode never share a step, so a request's
decoding stalls for the prefills of later arrivals (SGLang's ``get_next_batch_to_run``; vLLM's
pre-V1 scheduler behaved the same way).
"""

from __future__ import annotations

from tidal.engine.mb import MixedBatching
from tidal.engine.plan import StepPlan
from tidal.engine.policy import BATCHING


@BATCHING.register("prefill-first")
class PrefillFirst(MixedBatching):
    """Exclusive prefill or decode steps, prefill whenever possible. A decode step repeats
    exactly as MB's does (:meth:`MixedBatching.repeatable_steps`): it is chosen only when
    nothing can be admitted, which stays so while the running set is full or the queue head
    is refused for KV, until the first departure or KV shortage."""

    name = "prefill-first"

    def schedule(self, now_ns: int) -> StepPlan:
        st = self.state
        st.waiting.refresh(now_ns)
        plan = StepPlan()
        budget, _ = st.continue_prefills(plan, st.step_budget)
        st.admit(plan, budget, now_ns)
        if plan.prefills:
            return plan
        st.schedule_running(plan, 0, prefills=False)
        return plan
