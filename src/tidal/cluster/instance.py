"""Records of the cluster's moving parts: model instances and prewarmed weight replicas.

Instance life cycle (docs/research/warmserve.md §1.4, §2.5): STARTING (cold-start stages run;
requests assigned to it wait) → READY (an engine serves) → STOPPING (out of routing, draining) →
STOPPED (its GPUs released). A replica is a copy of one model's weight shards on a GPU group:
LOADING (transfers in flight, pages held from the start) → WARM; it is consumed by an activation or
destroyed by an eviction (its pages freed; a loading replica's transfers cancelled).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

from tidal.cluster.models import ServedModel
from tidal.cluster.transfer import Transfer
from tidal.core.kv import KVCacheManager
from tidal.core.request import Request


class State(IntEnum):
    STARTING = 0
    READY = 1
    STOPPING = 2
    STOPPED = 3


START_KINDS = ("hit", "partial", "miss", "static")
"""How an instance got its weights: a warm replica (hit), a replica still loading (partial), a
load on the critical path (miss), or a static placement loaded before traffic (static)."""


@dataclass(eq=False)
class ModelInstance:
    iid: int
    model: ServedModel
    gpus: tuple[int, ...]
    created_ns: int
    kind: str
    cap: int
    """Router cap: concurrent requests this instance accepts (B)."""
    state: State = State.STARTING
    inflight: int = 0
    """Requests assigned and not finished. An augmented request in a tool call counts too:
    its context may hold KV on the instance, so it keeps its slot under the router's cap B
    and in the load measurements (measured: counting only requests outside calls let
    engines fill their KV with paused contexts and raised p99 TTFT 3.6× (34 → 124 s) on a 1×8 H100
    WarmServe cluster serving the INFERCEPT mixture), and the instance drains only at 0."""
    pending: list[Request] = field(default_factory=list)
    engine: int = -1
    ready_ns: int = -1
    stopped_ns: int = -1
    kv: KVCacheManager | None = None
    kv_pages: int = 0
    prefill_blocks: int = 0
    """KV blocks of each prefill engine of a disaggregated unit (:mod:`tidal.cluster.unit`)."""
    share: float = 1.0
    waiting_for: set[str] = field(default_factory=set)
    """Cold-start tracks still running (``proc``, ``weights`` or ``seq``)."""
    transfers: list[Transfer] = field(default_factory=list)
    """Weight loads on this instance's critical path."""

    @property
    def routable(self) -> bool:
        return self.state <= State.READY


@dataclass(eq=False)
class Replica:
    rid: int
    model: ServedModel
    gpus: tuple[int, ...]
    started_ns: int
    transfers: list[Transfer] = field(default_factory=list)
    warm: bool = False
    warm_ns: int = -1
    background: bool = False
    """Loaded into KV space reserved by a running instance."""
    consumer: ModelInstance | None = None
    """An instance activated on this replica while it was loading (partial hit)."""
    on_warm: Callable[[int], None] | None = None

    @property
    def owner(self) -> tuple[str, int]:
        return ("r", self.rid)

    def remaining_bytes(self) -> float:
        return sum(t.remaining for t in self.transfers if t.active)
