"""Batching policies decide, the engine state acts.

A :class:`BatchingPolicy` reads an :class:`~tidal.engine.state.EngineState` and returns the
next step's :class:`~tidal.engine.plan.StepPlan`, asking the state to admit, chunk and preempt;
it hears the state's events as a :class:`~tidal.engine.state.StateListener` (EB re-fits its
controller on completions). A policy is one class registered in :data:`BATCHING` under its
name, with its options model in ``Options`` (pydantic; ``None`` = no options): the registry
lists both (``tidal simulate --help``) and :func:`tidal.engine.build.build_scheduler` builds
any of them. The guide's example is :mod:`tidal.engine.policies_example`.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel

from tidal.core.registry import Registry
from tidal.engine.plan import StepPlan
from tidal.engine.state import EngineState, StateListener
from tidal.engine.stats import PolicyStats


class BatchingPolicy(StateListener):
    name: ClassVar[str] = "base"
    Options: ClassVar[type[BaseModel] | None] = None
    """The policy's options model (validated from YAML ``scheduler.<options_key>``)."""
    options_key: ClassVar[str] = "options"
    """Where a run's config holds the options: ``scheduler.<options_key>`` (``options``; the
    exclusive-batching family of :mod:`tidal.batching` reads ``scheduler.eb``)."""
    needs_step_costs: ClassVar[bool] = False
    """Whether the policy prices steps with the deployment's step costs (α/β), which the real
    engine takes from this machine's calibrated profile (``--profile``)."""

    def __init__(self, state: EngineState, options: Any = None) -> None:
        self.state = state
        self.sched_ns = 0
        """Start of the step last scheduled."""

    @abstractmethod
    def schedule(self, now_ns: int) -> StepPlan:
        """Decide the next step within the state's ``step_budget`` tokens. Allocates the step's KV
        blocks (through the state); does not advance progress."""

    def repeatable_steps(self, plan: StepPlan) -> tuple[int, bool]:
        """For fast-forward: how many consecutive steps (≥ 1, this one included) would be
        scheduled exactly like ``plan`` up to the decode pool's growth, and whether a new
        arrival could change that. The default, (1, True), disables fast-forward."""
        return 1, True

    def before_apply(self, plan: StepPlan, end_ns: int, num_steps: int) -> None:
        """``num_steps`` steps of ``plan`` ran until ``end_ns`` (before the state applies them)."""

    def stats(self) -> PolicyStats:
        """Summable counters and mode time (:mod:`tidal.engine.stats`)."""
        return PolicyStats()

    def extra_metrics(self) -> dict[str, Any]:
        """Policy-specific summary metrics (merged into ``summary.json``): the stats' and any
        the policy adds (gauges that do not sum)."""
        return self.stats().metrics()

    def extra_tables(self) -> dict[str, dict[str, Any]]:
        """Policy-specific time series, written as ``DIR/<name>.parquet``."""
        return {}


BATCHING: Registry[type[BatchingPolicy]] = Registry("batching", section="scheduler")


def describe_batching() -> str:
    """One item per registered policy: name, summary, where its options live (``--batching``'s
    help; :meth:`Registry.describe`). The caller completes the registry first."""
    return BATCHING.describe()


def validate_options(name: str, options: dict[str, Any]) -> BaseModel | None:
    """``scheduler.options`` validated by the options model of policy ``name`` (None: the
    policy reads its options from another key, e.g. ``scheduler.eb``, or has none)."""
    return BATCHING.validate_options(name, options)
