"""The executor protocol: run one step plan, report its duration (and, for a real model, the
sampled tokens, which the executor appends to ``Request.token_ids`` itself)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tidal.engine.plan import StepPlan
from tidal.engine.scheduler import Scheduler
from tidal.hardware.perf import PerfModel


@dataclass(slots=True)
class StepResult:
    duration_ns: int


class Executor(Protocol):
    def execute(self, plan: StepPlan, scheduler: Scheduler) -> StepResult: ...


class ModelledExecutor:
    """Executes a plan by asking a performance model how long it takes (the simulator's)."""

    def __init__(self, perf: PerfModel) -> None:
        self.perf = perf

    def execute(self, plan: StepPlan, scheduler: Scheduler) -> StepResult:
        d = self.perf.shape_ns(plan.shape()) if plan.num_tokens else 0
        return StepResult(d + plan.stall_ns)
