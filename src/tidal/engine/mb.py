"""Mixed batching (MB): vLLM v1 / Sarathi-Serve chunked prefill, prefill and decode in one step.

Each step: decodes, then running prefills, within the budget (preempting the newest running
requests while the step's KV blocks do not fit); then, if nothing was preempted, admission from
the queue head under N — or under a cap and an admission test given by a composing policy
(EB⁺'s MB mode).
"""

from __future__ import annotations

from collections.abc import Callable

from tidal.engine.ordering import WaitingQueue
from tidal.engine.plan import StepPlan
from tidal.engine.policy import BATCHING, BatchingPolicy
from tidal.engine.state import AdmissionTest, EngineState


@BATCHING.register("mb")
class MixedBatching(BatchingPolicy):
    """Mixed batching: vLLM v1 / Sarathi-Serve chunked prefill."""

    name = "mb"

    def __init__(
        self,
        state: EngineState,
        options: object = None,
        cap: Callable[[], int | None] | None = None,
        test: Callable[[], AdmissionTest | None] | None = None,
    ) -> None:
        super().__init__(state, options)
        self.cap = cap
        """The running-set cap of each admission (None: N)."""
        self.test = test
        """Makes each step's admission test (None: the KV watermark alone)."""
        self._plain = cap is None and test is None
        refresh = state.waiting.refresh
        self._refresh = None if type(state.waiting).refresh is WaitingQueue.refresh else refresh
        """The queue's re-ranking hook (None: a static ordering, nothing to call)."""

    def schedule(self, now_ns: int) -> StepPlan:
        st = self.state
        if self._refresh is not None:
            self._refresh(now_ns)
        plan = StepPlan()
        budget = st.schedule_running(plan, st.step_budget)
        if plan.preempted:
            return plan
        if self._plain:
            if len(st.waiting):
                st.admit(plan, budget, now_ns)
            else:  # what admit() does on an empty queue
                st.admission_blocked_by_kv = False
        else:
            test = self.test() if self.test is not None else None
            st.admit(plan, budget, now_ns, self.cap() if self.cap is not None else None, test)
        return plan

    def repeatable_steps(self, plan: StepPlan) -> tuple[int, bool]:
        """A pure-decode plan repeats until the first departure or the first step whose KV
        blocks are not free. Admission stays impossible meanwhile if the running set is full, or
        if the queue head was refused for KV (free blocks only shrink while decoding) and no
        arrival can overtake it; otherwise the next arrival ends the run."""
        if plan.prefills or plan.preempted or not plan.num_decodes:
            return 1, True
        st = self.state
        m = st.pool.steps_until_departure_or_full(st.kv.pool.num_free_blocks)
        full = len(st.running) >= st.config.max_num_seqs
        blocked = st.admission_blocked_by_kv and not st.waiting.arrival_can_jump_head
        return m, not (full or blocked)
