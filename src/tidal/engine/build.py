"""``build_scheduler``: the one factory of an instance's scheduler.

A scheduler is an :class:`~tidal.engine.state.EngineState`, the batching policy registered
under ``batching`` (:data:`~tidal.engine.policy.BATCHING`) with its options, and optionally the
augmented-request component (:func:`tidal.augment.bundles.augmentation_factory`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from tidal.core.kv import KVBlockManager
from tidal.engine import mb, prefill_first, sglang_batching  # noqa: F401  (the engine's own policies registered)
from tidal.engine.ordering import WaitingQueue
from tidal.engine.policy import BATCHING, BatchingPolicy
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.engine.state import EngineState

if TYPE_CHECKING:
    from tidal.engine.component import StepComponent


def policy_options(cls: type[BatchingPolicy], config: SchedulerConfig) -> BaseModel | None:
    """The options of ``cls`` in ``config``: ``config.options`` when it is an instance of the
    policy's model, else the field named by its ``options_key`` (``config.eb``) when that is
    one, else the model's defaults."""
    model = cls.Options
    if model is None:
        return None
    for given in (config.options, getattr(config, cls.options_key, None)):
        if isinstance(given, model):
            return given
    return model()


def make_policy(name: str, state: EngineState) -> BatchingPolicy:
    """The policy registered under ``name``, over ``state``. The caller makes the registry
    complete (:mod:`tidal.cluster.registries`: every policy package imported)."""
    cls = BATCHING.get(name)
    opts: Any = policy_options(cls, state.config)
    return cls(state, opts)


def build_scheduler(
    config: SchedulerConfig,
    kv: KVBlockManager,
    batching: str = "mb",
    waiting: WaitingQueue | None = None,
    augmentation: Callable[[EngineState], StepComponent] | None = None,
) -> Scheduler:
    state = EngineState(config, kv, waiting)
    policy = make_policy(batching, state)
    return Scheduler(state, policy, augmentation(state) if augmentation is not None else None)
