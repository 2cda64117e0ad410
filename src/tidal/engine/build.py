"""``build_scheduler``: the one factory of an instance's scheduler.

A scheduler is an :class:`~tidal.engine.state.EngineState`, the batching policy registered
under ``batching`` (:data:`~tidal.engine.policy.BATCHING`) with its options, and optionally the
augmented-request component (:func:`tidal.engine.augment.bundles.augmentation_factory`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from tidal.core.kv import KVBlockManager
from tidal.engine.eb_options import EBOptions
from tidal.engine.ordering import WaitingQueue
from tidal.engine.policy import BATCHING, BatchingPolicy
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.engine.state import EngineState

if TYPE_CHECKING:
    from tidal.engine.augment.component import Augmentation


def policy_options(cls: type[BatchingPolicy], config: SchedulerConfig) -> BaseModel | None:
    """The options of ``cls`` in ``config``: ``config.eb`` for the exclusive-batching
    family, ``config.options`` when it is an instance of the policy's model, else defaults."""
    model = cls.Options
    if model is None:
        return None
    if isinstance(config.options, model):
        return config.options
    if model is EBOptions:
        return config.eb
    return model()


def make_policy(name: str, state: EngineState) -> BatchingPolicy:
    import tidal.engine.policies  # noqa: F401  (registers every policy)

    cls = BATCHING.get(name)
    opts: Any = policy_options(cls, state.config)
    return cls(state, opts)


def build_scheduler(
    config: SchedulerConfig,
    kv: KVBlockManager,
    batching: str = "mb",
    waiting: WaitingQueue | None = None,
    augmentation: Callable[[EngineState], Augmentation] | None = None,
) -> Scheduler:
    state = EngineState(config, kv, waiting)
    policy = make_policy(batching, state)
    return Scheduler(state, policy, augmentation(state) if augmentation is not None else None)
