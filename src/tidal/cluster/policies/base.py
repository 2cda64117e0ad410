"""The policy interface the controller calls (see :mod:`tidal.cluster.controller`). A policy
reads the cluster through ``self.view`` and acts on it only through ``self.act``
(:mod:`tidal.cluster.view`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from tidal.core.registry import Registry
from tidal.core.request import Request
from tidal.hardware.perf import PerfModel

if TYPE_CHECKING:
    from tidal.cluster.instance import ModelInstance
    from tidal.cluster.models import ServedModel
    from tidal.cluster.view import ClusterActions, ClusterView


class ClusterPolicy:
    name = "base"
    uses_load_stamps = False
    """Whether the policy reads the 5-s average load (then the controller keeps stamps)."""
    Options: ClassVar[type[BaseModel] | None] = None
    """The policy's options model (None: none), validated from ``cluster.placement_options``
    (the registries' one options hook, :class:`tidal.core.registry.Registry`)."""
    options_key: ClassVar[str] = "placement_options"

    def __init__(self, view: ClusterView, act: ClusterActions) -> None:
        self.view = view
        self.act = act
        self.cfg = view.cfg
        model = type(self).Options
        self.options: Any = (
            model.model_validate(self.cfg.placement_options) if model is not None else None
        )
        """The validated ``cluster.placement_options`` (None: the policy takes none)."""

    # ------------------------------------------------------------------ events
    def setup(self, now_ns: int) -> None:
        """At the start of the run (warm-up before the first request)."""

    def route(self, req: Request, m: int, now_ns: int) -> None:
        """Place an arriving (or retrying) request: ``act.assign`` or ``act.retry_later``."""
        raise NotImplementedError

    def on_finish(self, inst: ModelInstance, now_ns: int) -> None:
        """A request of ``inst`` finished (counters only: schedule events to react)."""

    def on_ready(self, inst: ModelInstance, now_ns: int) -> None:
        """``inst`` finished its cold start."""

    def on_stopped(self, inst: ModelInstance, now_ns: int) -> None:
        """``inst`` released its GPUs."""

    # ------------------------------------------------------------------ mechanisms
    def keep_weights(self, inst: ModelInstance) -> bool:
        """Whether a stopped instance's weights stay as a warm replica (warm scale-down)."""
        return False

    def in_dram(self, model: ServedModel, node: int) -> bool:
        """Whether ``model``'s checkpoint is in ``node``'s host DRAM (else it comes from SSD)."""
        return True

    def load_extra_s(self, model: ServedModel) -> float:
        """Serial time after the last shard lands (group creation, page mapping)."""
        return 0.0

    def load_rate_cap(self) -> float:
        """Per-shard rate cap of a load (bytes/s)."""
        return math.inf

    def wrap_perf(self, inst: ModelInstance, perf: PerfModel) -> PerfModel:
        return perf


PLACEMENTS: Registry[type[ClusterPolicy]] = Registry("placement", section="cluster")
