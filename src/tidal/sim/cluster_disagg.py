"""Disaggregated units of a cluster run (docs/design/disagg-cluster-composition.md §B): the
engines of a model declared ``id:PpDd`` / ``id:TPp/TPd:PpDd`` (:mod:`tidal.cluster.models`).

The controller places, prewarms, starts, routes to and stops such a unit as one instance on
its P·tp_p + D·tp_d GPUs; the backend (:class:`tidal.sim.cluster_run.SimBackend`) asks this
module for its engines. A unit is P prefill and D decode simulated engines: the decode engines
each a KV cache of the instance's size (decode engine 0 takes the controller's manager) and the
decode step model (speculating when the model does, ``sim/cluster_spec.py``), the prefill
engines each a cache of their own pool's size and the step model of their own TP
(:class:`tidal.cluster.unit.UnitParts`). They are wired by
:class:`~tidal.sim.disagg_wiring.DisaggWiring` as a single disaggregated run is (pull
protocol): a request delivered to the unit is routed to a prefill engine as its prefill leg,
its KV moves over the unit's NVLink ports (tp_p per prefill engine, tp_d per decode engine,
``cluster/links.py``) when the unit's GPUs are inside one node, or, when its two groups sit on
different nodes (a split unit, ``cluster/placement_units.py``), over the cluster's NICs,
shared by every unit (:class:`tidal.cluster.network.NicFabric`, ``cluster.network``); the
decode leg finishes it — the controller hears only the decode leg's finish. The prefill
engines run the plain scheduler; with augmented requests the decode engines run the
augmented one (``sim/disagg_augment.py``).

Engines of a unit are never reused for another instance (a stopped unit's engines stay idle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidal.cluster.kv import reserving_kv
from tidal.cluster.links import pool_links, resolve_link
from tidal.cluster.models import ServedModel
from tidal.cluster.network import NetworkConfig, NicFabric, UnitNics, engine_gpus
from tidal.cluster.topology import Topology
from tidal.core.kv import KVBlockManager
from tidal.core.request import Request
from tidal.engine.scheduler import Scheduler
from tidal.hardware.gpus import GPUSpec
from tidal.hardware.perf import PerfModel
from tidal.sim.disagg_metrics import DisaggColumns
from tidal.sim.disagg_wiring import DisaggWiring, prefill_leg
from tidal.sim.instance import SimInstance
from tidal.sim.routers import make_router
from tidal.sim.simulator import RESUME, Simulation

if TYPE_CHECKING:
    Build = Callable[[ServedModel, KVBlockManager, PerfModel, bool, int], Scheduler]


class _OutputLengths(dict[int, int]):
    """Request id → output length, each read once (by the decode leg's construction)."""

    def __getitem__(self, rid: int) -> int:
        return self.pop(rid)


@dataclass
class Unit:
    prefill: list[SimInstance]
    decode: list[SimInstance]
    wiring: DisaggWiring
    route: Callable[[Request], int] | None
    """Router over the prefill engines (None: one)."""
    model: str = ""
    """The model's name in the results."""
    start_ns: int = 0
    """When its engines were built (the instance became READY)."""
    stop_ns: int = -1
    """When it was released (stopped, drained); −1: live."""
    gpus: tuple[int, ...] = ()
    """The unit's GPUs, prefill group first (as the controller placed it)."""


class DisaggEngines:
    """The disaggregated units' engines of one cluster simulation (module docstring)."""

    def __init__(
        self,
        sim: Simulation,
        gpu: GPUSpec,
        num_requests: int,
        topo: Topology | None = None,
        net: NetworkConfig | None = None,
    ) -> None:
        self.sim = sim
        self.gpu = gpu
        self.topo = topo
        self.net = net or NetworkConfig()
        self.fabric: NicFabric | None = None
        """The cluster's NICs (built at the first unit whose pools sit on two nodes)."""
        self.caching = False
        """Engines cache prompt prefixes (the backend's ``prefix_caching``)."""
        self.cols = DisaggColumns(num_requests)
        self.out_len = _OutputLengths()
        self.units: dict[int, Unit] = {}
        """Front engine index (the unit's first prefill engine) → its live unit."""
        self.every: list[Unit] = []
        """Every unit built, live or stopped, in start order (for the metrics)."""
        self.wirings: list[DisaggWiring] = []

    def start(
        self,
        model: ServedModel,
        kv: KVBlockManager,
        perfs: tuple[PerfModel, PerfModel],
        build: Build,
        add: Callable[[Scheduler, PerfModel], int],
        prefill_blocks: int,
        gpus: tuple[int, ...] = (),
    ) -> int:
        """Build, add and wire one unit's engines; returns its front engine's index. ``build``
        makes a scheduler (the flag: plain, for a prefill engine; then the engine's TP),
        ``add`` an engine; ``perfs``: the (prefill, decode) engines' step models; each prefill
        engine a KV cache of ``prefill_blocks`` blocks (:mod:`tidal.cluster.unit`); ``gpus``:
        the unit's (prefill group first), which decide its link (module docstring)."""
        p, d = model.prefill_engines, model.decode_engines
        tp_p, tp_d = model.prefill_engine_tp, model.engine_tp
        (perf_p, perf_d), size = perfs, kv.block_size

        def own_kv(blocks: int) -> KVBlockManager:
            return reserving_kv(self.caching, blocks, size, 0, 0)

        pre = [add(build(model, own_kv(prefill_blocks), perf_p, True, tp_p), perf_p)
               for _ in range(p)]  # fmt: skip
        dec = [add(build(model, kv if j == 0 else own_kv(kv.num_blocks), perf_d, False, tp_d),
                   perf_d) for j in range(d)]  # fmt: skip
        insts = self.sim.instances
        p_insts, d_insts = [insts[i] for i in pre], [insts[i] for i in dec]
        cross = self._nics(model, gpus)
        link = resolve_link("auto", self.gpu, self.gpu, model.tp) if cross is None else (
            cross.fabric.link)  # fmt: skip
        per_gpu = model.spec.kv_bytes_per_token_per_gpu(tp_d)
        wiring = DisaggWiring(
            self.sim, p_insts, d_insts, link, (per_gpu, tp_d), self.cols, self.out_len,
            "least-loaded",
        )  # fmt: skip
        wiring.set_capacities(pool_links(link, p, tp_p, d, tp_d))
        if cross is not None:  # the shared NICs carry its transfers
            wiring.links = cross  # type: ignore[assignment]
            src, dst = cross.ports["tx:p0"], cross.ports["rx:d0"]
            wiring.ideal_rate = cross.fabric.ideal_rate(src, dst)
        for i, inst in enumerate(p_insts):
            wiring.attach_prefill(i, inst)
        for j, inst in enumerate(d_insts):
            wiring.attach_decode(j, inst)
        route = make_router("least-loaded", p_insts) if p > 1 else None
        unit = Unit(p_insts, d_insts, wiring, route, model.name, self.sim.now_ns, gpus=gpus)
        self.units[pre[0]] = unit
        self.every.append(unit)
        self.wirings.append(wiring)
        return pre[0]

    def _nics(self, model: ServedModel, gpus: tuple[int, ...]) -> UnitNics | None:
        """The fabric's view for a unit whose GPUs span nodes (None: one node, NVLink)."""
        topo = self.topo
        if topo is None or not gpus or len({topo.node_of(g) for g in gpus}) < 2:
            return None
        if self.fabric is None:
            call_at = lambda t, fn: self.sim.call_at(t, fn, RESUME)  # noqa: E731
            self.fabric = NicFabric(topo, self.net, call_at)
        p, d = model.prefill_engines, model.decode_engines
        k = p * model.prefill_engine_tp
        ports = {f"tx:p{i}": g for i, g in enumerate(engine_gpus(gpus, p, model.prefill_engine_tp))}
        ports.update(
            {f"rx:d{j}": g for j, g in enumerate(engine_gpus(gpus[k:], d, model.engine_tp))}
        )
        return UnitNics(self.fabric, ports)

    def deliver(self, front: int, req: Request, now_ns: int) -> None:
        """``req`` to the unit: its prefill leg to a prefill engine."""
        unit = self.units[front]
        self.out_len[req.request_id] = req.max_output_len
        i = unit.route(req) if unit.route is not None else 0
        self.sim.deliver(unit.prefill[i].index, prefill_leg(req), now_ns)

    def release(self, front: int) -> None:
        self.units.pop(front).stop_ns = self.sim.now_ns

