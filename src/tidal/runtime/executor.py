"""``RuntimeExecutor``: the executor protocol (:mod:`tidal.engine.executor`) on a real model.

A step's duration is the measured wall time of the forward pass; :attr:`RuntimeExecutor.sampled`
holds the step's sampled tokens, which the runner has already appended to each request's
``token_ids``.
"""

from __future__ import annotations

import time

from tidal.core.request import Request
from tidal.engine.plan import StepPlan
from tidal.engine.scheduler import Scheduler
from tidal.runtime.runner import ModelRunner


class RuntimeExecutor:
    def __init__(self, runner: ModelRunner, synchronize: bool = False) -> None:
        self.runner = runner
        self.synchronize = synchronize
        """Wait for the device at the end of a step (CUDA) so that wall times are real."""
        self.sampled: list[tuple[Request, int]] = []
        """(request, token) for every request that sampled a token in the last step."""

    def execute(self, plan: StepPlan, scheduler: Scheduler, now_ns: int, idle_ns: int) -> int:
        if plan.num_steps != 1:
            raise ValueError("the runtime executes one step at a time")
        t0 = time.perf_counter_ns()
        self.sampled = []
        self.sampled = self.runner.run(plan, scheduler)
        if self.synchronize:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter_ns() - t0
