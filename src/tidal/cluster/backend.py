"""What the cluster needs from a backend (the simulator implements it; a real multi-instance
runtime would too). The cluster never imports a backend (docs/ARCHITECTURE.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tidal.cluster.models import ServedModel
from tidal.cluster.unit import UnitParts
from tidal.core.kv import KVBlockManager
from tidal.core.request import Request
from tidal.hardware.perf import PerfModel


class Backend(Protocol):
    """A backend may also set ``prefix_caching = True``: engines' KV caches then cache prompt
    prefixes (:func:`~tidal.cluster.kv.reserving_kv`)."""

    def now_ns(self) -> int:
        """Current time."""
        ...

    def call_at(self, t_ns: int, fn: Callable[[int], None]) -> None:
        """Run ``fn(t)`` at ``t`` (a control event: after step ends and arrivals at ``t``)."""
        ...

    def start_engine(
        self, model: ServedModel, kv: KVBlockManager, perf: PerfModel, unit: UnitParts | None = None
    ) -> int:
        """Create a serving engine of ``model`` with this KV cache and step-time model (its
        scheduler: the run's batching policy and ordering); returns its index. A
        disaggregated unit (``unit`` given) is its engines: ``kv`` and ``perf`` its decode
        engines', ``unit`` its prefill engines'."""
        ...

    def release_engine(self, engine: int) -> None:
        """The instance on ``engine`` stopped (drained); the backend may reuse the engine."""
        ...

    def deliver(self, engine: int, req: Request, now_ns: int) -> None:
        """Hand ``req`` to ``engine``'s queue (only called from control events)."""
        ...
