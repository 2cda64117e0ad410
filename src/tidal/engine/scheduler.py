"""The instance scheduler: one engine state, one batching policy, optional components.

``Scheduler`` is what a backend drives (docs/DESIGN.md §1): ``schedule()`` returns a plain
:class:`StepPlan`; ``update()`` commits it with the executor's :class:`StepOutput` — counters
advance, every stop rule is checked (the length limit; on a real model each sampled token
against the request's :class:`~tidal.core.request.StopRule`: end-of-sequence, stop token ids,
stop strings), and every request that ends emits its events. Neither knows whether a latency
model or a real model runner executed the step. Inside, the work is split three ways:

* :class:`~tidal.engine.state.EngineState` holds the requests and the KV cache and performs
  every change to them (admit, chunk, preempt, finish), emitting events;
* a :class:`~tidal.engine.policy.BatchingPolicy` (registry :data:`BATCHING`: ``mb``, ``eb``,
  ``ebplus``) decides each step over that state;
* an optional :class:`~tidal.engine.component.StepComponent` (tool-calling requests:
  :class:`tidal.augment.component.Augmentation`)
  listens to the state's events and supplies each step's token budget; it composes with any
  batching policy.

Build one with :func:`tidal.engine.build.build_scheduler`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from tidal.core.request import Request
from tidal.engine.acceptance import AcceptanceModel
from tidal.engine.plan import StepOutput, StepPlan
from tidal.engine.policy import BATCHING, BatchingPolicy
from tidal.engine.spec_pool import SpecDecodePool, spec_metrics
from tidal.engine.state import EngineState, StateView
from tidal.engine.stats import PolicyStats

if TYPE_CHECKING:
    from tidal.engine.component import StepComponent
    from tidal.hardware.interference import StepCosts

__all__ = ["BATCHING", "Scheduler", "SchedulerConfig"]


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 8192
    """Token budget B per step."""
    max_num_seqs: int = 256
    """Running-request cap N."""
    long_prefill_token_threshold: int = 0
    """Cap on one request's prefill chunk per step (0: only the budget caps it)."""
    costs: StepCosts | None = None
    """The deployment's linear step costs (policies that reason about step cost: ``eb``)."""
    eb: BaseModel | None = None
    """Options of the policies whose ``options_key`` is ``eb`` (the exclusive-batching family
    of :mod:`tidal.batching`: an ``EBOptions``; None: the policy's defaults)."""
    options: BaseModel | None = None
    """Options of another registered policy (an instance of its ``Options`` model)."""
    speculation: AcceptanceModel | None = None
    """Speculative decoding: the seeded acceptance model of the decode pool (None: off)."""

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs (as vLLM requires)")


class Scheduler(StateView):
    """An engine state driven by a batching policy, with an optional augmentation."""

    def __init__(
        self,
        state: EngineState,
        policy: BatchingPolicy,
        augmentation: StepComponent | None = None,
    ) -> None:
        self.state = state
        self.policy = policy
        self.augmentation = augmentation
        self.name = policy.name if augmentation is None else f"augmented+{policy.name}"
        state.add_listener(policy, first=True)
        if augmentation is not None:
            augmentation.attach(state)
        hook = type(policy).before_apply is not BatchingPolicy.before_apply
        self._before_apply = policy.before_apply if hook else None

    # ------------------------------------------------------------------ state (read-only)
    @property
    def config(self) -> Any:
        return self.state.config

    @property
    def num_running(self) -> int:
        return len(self.state.running)

    @property
    def num_waiting(self) -> int:
        return len(self.state.waiting)

    @property
    def num_steps(self) -> int:
        return self.state.num_steps

    @property
    def num_preemptions(self) -> int:
        return self.state.num_preemptions

    @property
    def admission_blocked_by_kv(self) -> bool:
        return self.state.admission_blocked_by_kv

    @property
    def on_finish(self) -> Callable[[Request], None] | None:
        return self.state.on_finish

    @on_finish.setter
    def on_finish(self, fn: Callable[[Request], None] | None) -> None:
        self.state.on_finish = fn

    @property
    def on_pause(self) -> Callable[[Request, int], None] | None:
        """Set by the driver: a request paused on an external call that returns at the given
        time (ns); the driver must then call :meth:`resume` (augmented requests)."""
        aug = self.augmentation
        return aug.on_pause if aug is not None else None

    @on_pause.setter
    def on_pause(self, fn: Callable[[Request, int], None] | None) -> None:
        if self.augmentation is not None:
            self.augmentation.on_pause = fn

    def has_work(self) -> bool:
        aug = self.augmentation
        return self.state.has_work() or (aug is not None and aug.has_work())

    # ------------------------------------------------------------------ driver API
    def add_request(self, req: Request) -> None:
        if self.augmentation is not None:
            self.augmentation.add_request(req)
        self.state.add(req)

    def schedule(self, now_ns: int) -> StepPlan:
        """Decide the next step. Allocates the step's KV blocks; does not advance progress."""
        aug = self.augmentation
        if aug is None:
            return self.policy.schedule(now_ns)
        aug.before_schedule(now_ns)
        plan = self.policy.schedule(now_ns)
        aug.after_schedule(plan, now_ns)
        return plan

    def repeatable_steps(self, plan: StepPlan) -> tuple[int, bool]:
        """For fast-forward: how many consecutive steps (≥ 1, this one included) would be
        scheduled exactly like ``plan`` up to the decode pool's growth, and whether a new
        arrival (or another external event) could change that."""
        aug = self.augmentation
        if aug is None:
            return self.policy.repeatable_steps(plan)
        if aug.blocks_fast_forward(plan):
            return 1, True
        k, sensitive = self.policy.repeatable_steps(plan)
        return k, sensitive or aug.waits_for_returns()

    def update(self, plan: StepPlan, output: StepOutput, end_ns: int) -> None:
        """Commit the ``plan.num_steps`` executed steps of ``plan`` that ended at ``end_ns``:
        the policy and the augmentation see the step first, then the state applies it, ending
        the requests that reached their length or matched their stop rule
        (:meth:`EngineState.apply`)."""
        if self.augmentation is not None:
            self.augmentation.before_apply(plan, end_ns)
        if self._before_apply is not None:
            self._before_apply(plan, end_ns, plan.num_steps)
        self.state.apply(plan, end_ns, plan.num_steps, output.sampled)

    def resume(self, req: Request, now_ns: int) -> None:
        """An external call of ``req`` returned."""
        if self.augmentation is None:
            raise NotImplementedError(f"{self.name} does not pause requests")
        self.augmentation.resume(req, now_ns)

    def abort(self, req: Request, now_ns: int) -> None:
        """Drop a request wherever it is (client disconnect); its KV is freed."""
        if self.augmentation is not None:
            self.augmentation.abort(req, now_ns)
        else:
            self.state.abort(req, now_ns)

    def detach(self, req: Request, now_ns: int) -> None:
        """``req`` leaves to wait on an external call, its KV discarded (the real engine's
        fallback for augmented requests, :meth:`EngineState.detach`); :meth:`reattach` brings
        it back with the call's tokens."""
        if self.augmentation is not None:
            raise NotImplementedError(f"{self.name} pauses requests itself (on_pause/resume)")
        self.state.detach(req, now_ns)

    def reattach(self, req: Request, tokens: Sequence[int]) -> None:
        """The external call of a detached ``req`` returned ``tokens``: they are appended and
        ``req`` re-enters the queue at the tail, to be prefilled with everything before them."""
        self.state.reattach(req, tokens)

    def check(self) -> None:
        """Assert the scheduler's invariants (tests and debugging; O(requests))."""
        if self.augmentation is not None:
            self.augmentation.check()
        else:
            self.state.check()
            self.state.kv.check(list(self.state.running.values()))

    # ------------------------------------------------------------------ results
    def extra_metrics(self) -> dict[str, Any]:
        """Policy-specific summary metrics (merged into ``summary.json``)."""
        m = self.policy.extra_metrics()
        if self.augmentation is not None:
            m.update(self.augmentation.extra_metrics())
        pool = self.state.pool
        if isinstance(pool, SpecDecodePool):
            m.update(spec_metrics(pool.spec_counters(), pool.k))
        return m

    def stats(self) -> PolicyStats:
        """The batching policy's summable counters and mode time."""
        stats = self.policy.stats()
        pool = self.state.pool
        if isinstance(pool, SpecDecodePool):  # speculation counters, summable over engines
            stats = stats + PolicyStats(pool.spec_counters())
        return stats

    def extra_tables(self) -> dict[str, dict[str, Any]]:
        """Policy-specific time series, written as ``DIR/<name>.parquet``."""
        return self.policy.extra_tables()
