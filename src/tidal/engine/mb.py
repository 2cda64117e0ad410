"""Mixed batching (MB): vLLM v1 / Sarathi-Serve chunked prefill, prefill and decode in one step."""

from __future__ import annotations

from tidal.engine.plan import StepPlan
from tidal.engine.scheduler import BATCHING, Scheduler


@BATCHING.register("mb")
class MixedBatchingScheduler(Scheduler):
    name = "mb"

    def schedule(self, now_ns: int) -> StepPlan:
        self.waiting.refresh(now_ns)
        plan = StepPlan()
        budget = self._schedule_running(plan, self.step_budget())
        if not plan.preempted:
            self._admit_waiting(plan, budget, now_ns)
        return plan

    def repeatable_steps(self, plan: StepPlan) -> tuple[int, bool]:
        """A pure-decode plan repeats until the first departure or the first step whose KV
        blocks are not free. Admission stays impossible meanwhile if the running set is full, or
        if the queue head was refused for KV (free blocks only shrink while decoding) and no
        arrival can overtake it; otherwise the next arrival ends the run."""
        if plan.prefills or plan.preempted or not plan.num_decodes:
            return 1, True
        m = self.pool.steps_until_departure_or_full(self.kv.num_free_blocks)
        full = len(self.running) >= self.config.max_num_seqs
        blocked = self.admission_blocked_by_kv and not self.waiting.arrival_can_jump_head
        return m, not (full or blocked)
