"""``RuntimeExecutor``: the executor protocol (:mod:`tidal.engine.executor`) on a real model.

A step's output is the measured wall time of the forward pass and the sampled tokens, which the
runner has already appended to each request's ``token_ids``; the scheduler's ``update`` counts
them and applies the requests' stop rules. One step at a time: no fast-forward.
"""

from __future__ import annotations

import time

from tidal.engine.plan import StepOutput, StepPlan
from tidal.runtime.runner import ModelRunner


class RuntimeExecutor:
    fast_forward = False

    def __init__(self, runner: ModelRunner, synchronize: bool = False) -> None:
        self.runner = runner
        self.synchronize = synchronize
        """Wait for the device at the end of a step (CUDA) so that wall times are real."""

    def execute(
        self,
        plan: StepPlan,
        now_ns: int,
        idle_ns: int = -1,
        max_steps: int = 1,
        horizon_ns: int | None = None,
    ) -> StepOutput:
        if plan.num_steps != 1 or max_steps != 1:
            raise ValueError("the runtime executes one step at a time")
        t0 = time.perf_counter_ns()
        sampled = self.runner.run(plan)
        if self.synchronize:
            import torch  # lazy: optional dependency (torch)

            torch.cuda.synchronize()
        return StepOutput(time.perf_counter_ns() - t0, sampled)
