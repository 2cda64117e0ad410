"""Prefill-first batching: SGLang's default scheduler (``--enable-mixed-chunk`` off).

A step is a prefill batch whenever one can run — the pending chunk of a running prefill first,
then admissions from the queue head within the token budget (SGLang's
``chunked_prefill_size``) and the KV watermark — and a decode batch of every running request
only when nothing can be prefilled. Prefill and decode never share a step, so a request's
decoding stalls for the prefills of later arrivals (SGLang's ``get_next_batch_to_run``; vLLM's
pre-V1 scheduler behaved the same way).
"""

from __future__ import annotations

from tidal.engine.plan import StepPlan
from tidal.engine.policy import BATCHING, BatchingPolicy


@BATCHING.register("prefill-first")
class PrefillFirst(BatchingPolicy):
    """Exclusive prefill or decode steps, prefill whenever possible."""

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

    def repeatable_steps(self, plan: StepPlan) -> tuple[int, bool]:
        """A decode step repeats until the first departure or the first step whose KV blocks
        are not free. It was chosen because nothing could be prefilled; that stays so while
        the running set is full or the queue head is refused for KV (free blocks only shrink
        while decoding) and no arrival can overtake it; otherwise an arrival ends the run."""
        if plan.prefills or plan.preempted or not plan.num_decodes:
            return 1, True
        st = self.state
        m = st.pool.steps_until_departure_or_full(st.kv.num_free_blocks)
        full = len(st.running) >= st.config.max_num_seqs
        blocked = st.admission_blocked_by_kv and not st.waiting.arrival_can_jump_head
        return m, not (full or blocked)
