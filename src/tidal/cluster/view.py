"""What a placement policy sees of the cluster and what it may do to it.

A policy (``tidal.cluster.policies``) reads the cluster through :class:`ClusterView`, a
read-only protocol the :class:`~tidal.cluster.controller.ClusterController` satisfies (no copy,
no indirection on the hot path), and changes it only through :class:`ClusterActions`: launch,
stop, prewarm and evict, request placement, timers, and the few policy-owned state changes
(closing a forecast window, a KV reservation target, a checkpoint cached in host DRAM). Every
action bumps the controller's ``version`` where the mechanism it calls does, so a policy's
quiet-tick test (:attr:`ClusterView.version` unchanged) stays exact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import TYPE_CHECKING, Protocol

from tidal.cluster.kv import reservation_of
from tidal.core.request import Request

if TYPE_CHECKING:
    import numpy as np

    from tidal.cluster.coldstart import StartupPlan
    from tidal.cluster.config import ClusterConfig
    from tidal.cluster.controller import ClusterController
    from tidal.cluster.instance import ModelInstance, Replica
    from tidal.cluster.load import ModelLoad
    from tidal.cluster.models import ServedModel
    from tidal.cluster.topology import Topology
    from tidal.hardware.models import ModelSpec
    from tidal.hardware.perf import PerfModel


class ClusterView(Protocol):
    """The cluster as a policy reads it (the controller's own attributes, read-only)."""

    @property
    def cfg(self) -> ClusterConfig: ...
    @property
    def topo(self) -> Topology: ...
    @property
    def models(self) -> Sequence[ServedModel]: ...
    @property
    def serving(self) -> Sequence[Sequence[ModelInstance]]:
        """Instances in routing, per model (in creation order)."""

    @property
    def live(self) -> Mapping[int, ModelInstance]:
        """Instances not yet stopped, by id."""

    @property
    def replicas(self) -> Mapping[int, Replica]: ...
    @property
    def gpu_replicas(self) -> Sequence[Sequence[Replica]]: ...
    @property
    def gpu_busy(self) -> Sequence[ModelInstance | None]: ...
    @property
    def loads(self) -> Sequence[ModelLoad]: ...
    @property
    def dram(self) -> Sequence[Set[int]]:
        """Models whose checkpoint is in each node's host DRAM."""

    @property
    def demand(self) -> Sequence[float]: ...
    @property
    def stats(self) -> Sequence[Mapping[str, float]]: ...
    @property
    def prior_avg(self) -> Sequence[np.ndarray] | None: ...
    @property
    def prior_peak(self) -> Sequence[np.ndarray] | None: ...
    @property
    def first_arrival_ns(self) -> int: ...
    @property
    def pages_per_gpu(self) -> int: ...
    @property
    def page_bytes(self) -> int: ...
    @property
    def version(self) -> int:
        """Bumped by every change a control tick could react to."""

    def idle_gpus(self, node: int) -> list[int]: ...
    def free_pages(self, gpu: int) -> int: ...
    def ssd_queued_bytes(self, node: int) -> float: ...
    def engine_perf(self, spec: ModelSpec, tp: int) -> PerfModel: ...
    def engine_handoff_s(self, now_ns: int) -> float: ...


@dataclasses.dataclass(frozen=True)
class LaunchParams:
    """How an instance is launched (:meth:`ClusterActions.launch`)."""

    kind: str
    """Start kind (:data:`tidal.cluster.instance.START_KINDS`)."""
    replica: Replica | None = None
    """Warm or loading weights taken over (else a new load when the plan loads)."""
    kv_pages: int | None = None
    """KV pages per GPU (None: every page left free on the group)."""
    share: float = 1.0
    """Share of the GPUs' compute (MuxServe's spatial sharing)."""
    cap: int | None = None
    """Most in-flight requests (None: ``cluster.batch``)."""
    min_free_blocks: int = 0
    min_total_blocks: int = 0
    """KV reservation floors (:class:`tidal.cluster.kv.ReserveToTarget`)."""
    shared_gpus: bool = False
    """GPUs may already hold other engines of the same mesh (MuxServe)."""


class ClusterActions:
    """Everything a policy may do to the cluster."""

    def __init__(self, ctl: ClusterController) -> None:
        self._ctl = ctl

    # ------------------------------------------------------------------ instances
    def launch(
        self,
        model: ServedModel,
        gpus: tuple[int, ...],
        plan: StartupPlan,
        params: LaunchParams,
        now_ns: int,
    ) -> ModelInstance:
        """An instance of ``model`` on ``gpus`` (idle unless ``shared_gpus``), starting now."""
        ctl = self._ctl
        if not params.shared_gpus:
            return ctl.launch(model, gpus, plan, params, now_ns)
        busy = ctl.gpu_busy
        saved = {g: busy[g] for g in gpus if busy[g] is not None}
        for g in saved:
            busy[g] = None  # engines of one mesh share its GPUs
        inst = ctl.launch(model, gpus, plan, params, now_ns)
        for g, other in saved.items():
            busy[g] = other
        return inst

    def stop(self, inst: ModelInstance, now_ns: int) -> None:
        """Take ``inst`` out of routing; it frees its GPUs once drained."""
        self._ctl.stop(inst, now_ns)

    def set_kv_target(self, inst: ModelInstance, free_blocks: int) -> None:
        """KV blocks ``inst`` should keep free for reservation (WarmServe §2.4)."""
        assert inst.kv is not None
        res = reservation_of(inst.kv)
        before = res.target_free
        res.set_target(free_blocks)
        if res.target_free != before:
            self._ctl.version += 1

    # ------------------------------------------------------------------ weights
    def prewarm(self, model: ServedModel, gpus: tuple[int, ...], now_ns: int) -> Replica:
        """Start loading a replica of ``model`` on ``gpus``."""
        return self._ctl.prewarm(model, gpus, now_ns)

    def evict(self, replica: Replica, now_ns: int) -> None:
        self._ctl.evict(replica, now_ns)

    def cache_checkpoints(self, node: int, models: Iterable[int]) -> None:
        """Models whose checkpoint is in ``node``'s host DRAM from now on."""
        self._ctl.dram[node].update(models)

    # ------------------------------------------------------------------ requests and load
    def assign(self, req: Request, inst: ModelInstance, now_ns: int) -> None:
        self._ctl.assign(req, inst, now_ns)

    def retry_later(self, req: Request, m: int, now_ns: int, delay_s: float) -> None:
        self._ctl.retry_later(req, m, now_ns, delay_s)

    def close_window(self, m: int, now_ns: int, window_ns: int) -> tuple[float, float]:
        """(average, peak) load of model ``m`` over the window ending now; a new one starts."""
        return self._ctl.loads[m].close_window(now_ns, window_ns)

    def changed(self) -> None:
        """Something a control tick reacts to changed on the policy's side (its forecast)."""
        self._ctl.version += 1

    # ------------------------------------------------------------------ time
    def at(self, t_ns: int, fn: Callable[[int], None]) -> None:
        self._ctl.at(t_ns, fn)

    def every(self, period_s: float, fn: Callable[[int], None], start_ns: int = 0) -> None:
        """Call ``fn`` every ``period_s`` from ``start_ns`` while requests remain."""
        self._ctl.every(period_s, fn, start_ns)
