"""``RuntimeExecutor``: the executor protocol (:mod:`tidal.engine.executor`) on a real model.

Its step result carries the measured wall time of the forward pass and the sampled tokens, which
the runner has already appended to each request's ``token_ids``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tidal.core.request import Request
from tidal.engine.executor import StepResult
from tidal.engine.plan import StepPlan
from tidal.engine.scheduler import Scheduler
from tidal.runtime.runner import ModelRunner


@dataclass(slots=True)
class RuntimeStepResult(StepResult):
    sampled: list[tuple[Request, int]] = field(default_factory=list)
    """(request, token) for every request that sampled a token this step."""


class RuntimeExecutor:
    def __init__(self, runner: ModelRunner, synchronize: bool = False) -> None:
        self.runner = runner
        self.synchronize = synchronize
        """Wait for the device at the end of a step (CUDA) so that wall times are real."""

    def execute(self, plan: StepPlan, scheduler: Scheduler) -> RuntimeStepResult:
        if plan.num_steps != 1:
            raise ValueError("the runtime executes one step at a time")
        t0 = time.perf_counter_ns()
        sampled = self.runner.run(plan, scheduler)
        if self.synchronize:
            import torch

            torch.cuda.synchronize()
        return RuntimeStepResult(time.perf_counter_ns() - t0, sampled)
