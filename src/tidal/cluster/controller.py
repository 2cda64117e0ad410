"""The cluster controller: shared mechanisms every placement policy uses (docs/research/warmserve.md
§2.5, §4.1). A policy (``tidal.cluster.policies``) decides *where* and *when*, reading the
controller as a :class:`~tidal.cluster.view.ClusterView` and acting through
:class:`~tidal.cluster.view.ClusterActions`; the controller does it:

* GPU grants: an instance takes a group of idle GPUs; its weights come from a warm replica
  (zero-copy retag), a loading replica, or a new load; its KV cache takes the pages it is given
  (by default every page left free on its GPUs after weights);
* cold starts: runs a :class:`StartupPlan` with timers and transfers, then asks the backend for
  an engine and hands it the requests that were assigned meanwhile;
* replicas: loads of weight shards as transfers over each GPU's host link (and the node's SSD
  link when the checkpoint is not in host DRAM), holding their pages from the start;
  cancellation frees the pages;
* stopping: an instance leaves routing, drains, then frees its KV (and its weights, unless the
  policy keeps them as a warm replica: warm scale-down);
* load and accounting: per-model in-flight load, GPU-seconds, start kinds, memory log.

Event discipline (exactness, docs/DESIGN.md §2): the controller changes an engine's work only from
control events or arrivals (``backend.deliver``); a request finishing only updates counters and,
if something must react, schedules a control event at the same time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tidal.cluster.accounting import Ledger, model_gpu_seconds, start_counts, start_metrics
from tidal.cluster.backend import Backend
from tidal.cluster.coldstart import StartupPlan
from tidal.cluster.config import ClusterConfig
from tidal.cluster.engine_pool import EnginePool
from tidal.cluster.instance import START_KINDS, ModelInstance, Replica, State
from tidal.cluster.kv import reservation_of, reserving_kv
from tidal.cluster.load import ModelLoad
from tidal.cluster.memory import ClusterMemory
from tidal.cluster.models import ServedModel, served_models
from tidal.cluster.placement_units import check_placeable
from tidal.cluster.policies import PLACEMENTS
from tidal.cluster.retire import retire
from tidal.cluster.spec_capacity import engine_perf
from tidal.cluster.startup_run import run_startup_plan
from tidal.cluster.topology import parse_cluster
from tidal.cluster.transfer import TransferEngine
from tidal.cluster.unit import UnitParts, plan_kv
from tidal.cluster.view import ClusterActions, ClusterView, LaunchParams
from tidal.cluster.weight_load import load_weights
from tidal.core.request import Request
from tidal.core.spool import ColumnSet
from tidal.core.units import s_to_ns
from tidal.hardware.models import ModelSpec
from tidal.hardware.perf import PerfModel


class ClusterController:
    def __init__(
        self,
        cfg: ClusterConfig,
        backend: Backend,
        model_of: np.ndarray,
        prior_avg: list[np.ndarray] | None = None,
        prior_peak: list[np.ndarray] | None = None,
        demand: list[float] | None = None,
        stats: list[dict[str, float]] | None = None,
        first_arrival_ns: int = 0,
    ) -> None:
        self.cfg = cfg
        self.backend = backend
        self.placed: dict[int, ModelInstance] = {}
        """The instance each in-flight request was assigned to (``Request.payload`` belongs
        to the workload: an augmented request's segments)."""
        self.topo = parse_cluster(cfg.spec)
        gpu = self.topo.gpu
        self.page_bytes = cfg.page_mib * 2**20
        per, pools = self.topo.gpus_per_node, cfg.unit_pools
        self.models = served_models(cfg.models, gpu, per, self.page_bytes, cfg.block_size, pools)
        check_placeable(self.models, self.topo)
        self.pages_per_gpu = int(cfg.gpu_memory_utilization * gpu.mem_bytes // self.page_bytes)
        n = self.topo.num_gpus
        self.memory = ClusterMemory(n, self.pages_per_gpu, len(self.models))
        st = cfg.startup
        links = {f"pcie:{g}": min(st.host_to_gpu_gbs, gpu.pcie_gbs) * 1e9 for g in range(n)}
        links.update({f"ssd:{k}": st.ssd_gbs * 1e9 for k in range(self.topo.num_nodes)})
        self.transfers = TransferEngine(links, backend.call_at)
        self.model_of = model_of
        self.prior_avg, self.prior_peak = prior_avg, prior_peak
        self.demand = demand or [1.0] * len(self.models)
        """Expected average in-flight load per model (static policies size with it)."""
        self.stats = stats or [{} for _ in self.models]
        """Workload statistics per model (``rate``, ``mean_prompt``, ``mean_output``)."""
        self.first_arrival_ns = first_arrival_ns
        self.gpu_busy: list[ModelInstance | None] = [None] * n
        self.replicas: dict[int, Replica] = {}
        self.gpu_replicas: list[list[Replica]] = [[] for _ in range(n)]
        self.num_instances = 0
        self.ledger = Ledger()
        """Rows of stopped instances (their objects are dropped) and the GPUs-held log."""
        self.live: dict[int, ModelInstance] = {}
        """Instances not yet stopped, by id (in creation order)."""
        self.serving: list[list[ModelInstance]] = [[] for _ in self.models]
        self.loads = [ModelLoad() for _ in self.models]
        self.dram: list[set[int]] = [set() for _ in range(self.topo.num_nodes)]
        """Models whose checkpoint sits in each node's host DRAM (the rest come from SSD)."""
        self.num_requests = len(model_of)
        self.num_finished = 0
        self._next_rid = 0
        self._perf_cache: dict[tuple[int, int, float], PerfModel] = {}
        self.engine_pool = EnginePool(st)
        self.replicas_loaded = 0
        self.replicas_evicted = 0
        self.loads_cancelled = 0
        self.version = 0
        """Bumped by every change a control tick could react to (arrivals, finishes, instance
        and replica life-cycle events, memory changes): a tick that changed nothing may skip
        its successors while the version and the clock-driven inputs stay the same."""
        view: ClusterView = self
        self.policy = PLACEMENTS.get(cfg.placement)(view, ClusterActions(self))
        for load in self.loads:
            load.keep_stamps = self.policy.uses_load_stamps

    # ------------------------------------------------------------------ time
    def now(self) -> int:
        return self.backend.now_ns()

    def at(self, t_ns: int, fn: Callable[[int], None]) -> None:
        self.backend.call_at(t_ns, fn)

    def every(self, period_s: float, fn: Callable[[int], None], start_ns: int = 0) -> None:
        """Call ``fn`` at ``start, start + period, …`` while requests remain."""
        step = s_to_ns(period_s)

        def tick(t: int) -> None:
            if self.num_finished >= self.num_requests:
                return
            fn(t)
            self.at(t + step, tick)

        self.at(start_ns, tick)

    # ------------------------------------------------------------------ requests
    def start(self) -> None:
        self.policy.setup(self.now())

    def on_arrival(self, req: Request, now_ns: int) -> None:
        m = int(self.model_of[req.request_id])
        self.loads[m].change(now_ns, +1)
        self.version += 1
        self.policy.route(req, m, now_ns)

    def assign(self, req: Request, inst: ModelInstance, now_ns: int) -> None:
        """Send ``req`` to ``inst`` (it waits there if the instance is still starting)."""
        inst.inflight += 1
        self.version += 1
        self.placed[req.request_id] = inst
        if inst.state == State.READY:
            self.backend.deliver(inst.engine, req, now_ns)
        else:
            inst.pending.append(req)

    def retry_later(self, req: Request, m: int, now_ns: int, delay_s: float) -> None:
        """The request found no instance: route it again after ``delay_s`` (artifact: 1 s)."""
        self.at(now_ns + s_to_ns(delay_s), lambda t: self.policy.route(req, m, t))

    def on_finish(self, req: Request, now_ns: int) -> None:
        """Called at a step end: counters only; reactions go through control events."""
        m = int(self.model_of[req.request_id])
        self.loads[m].change(now_ns, -1)
        self.num_finished += 1
        self.version += 1
        inst = self.placed.pop(req.request_id)
        inst.inflight -= 1
        if inst.state == State.STOPPING and inst.inflight == 0:
            self.at(now_ns, lambda t: retire(self, inst, t))
        self.policy.on_finish(inst, now_ns)

    # ------------------------------------------------------------------ GPUs and instances
    def idle_gpus(self, node: int) -> list[int]:
        return [g for g in self.topo.gpus_of(node) if self.gpu_busy[g] is None]

    def free_pages(self, gpu: int) -> int:
        return self.memory.free(gpu)

    def ssd_queued_bytes(self, node: int) -> float:
        """Bytes still to read over ``node``'s SSD link (every active transfer on it)."""
        link = f"ssd:{node}"
        return sum(t.remaining for t in self.transfers.active.values() if link in t.links)

    def _set_busy(self, now_ns: int, gpus: tuple[int, ...], inst: ModelInstance | None) -> None:
        for g in gpus:
            self.gpu_busy[g] = inst
        busy = sum(1 for x in self.gpu_busy if x is not None)
        self.ledger.log_busy(now_ns, busy)

    def launch(
        self,
        model: ServedModel,
        gpus: tuple[int, ...],
        plan: StartupPlan,
        params: LaunchParams,
        now_ns: int,
    ) -> ModelInstance:
        """Create an instance of ``model`` on idle ``gpus`` and start its cold start.

        Weights: ``params.replica`` (warm or loading) is taken over; otherwise, with
        ``plan.load``, a new load starts (now, or after the engine track for sequential plans).
        KV: ``params.kv_pages`` per GPU, default every page still free on the group (minimum
        over its GPUs)."""
        kind, replica, kv_pages = params.kind, params.replica, params.kv_pages
        assert kind in START_KINDS
        for g in gpus:
            if self.gpu_busy[g] is not None:
                raise RuntimeError(f"GPU {g} is busy")
        cap = params.cap or self.cfg.batch * model.slots
        inst = ModelInstance(self.num_instances, model, gpus, now_ns, kind, cap, share=params.share)
        self.num_instances += 1
        self.version += 1
        self.live[inst.iid] = inst
        self.serving[model.index].append(inst)
        self._set_busy(now_ns, gpus, inst)
        wkey = ("w", inst.iid)
        if replica is not None:
            self._detach_replica(replica)
            self.memory.retag(now_ns, gpus, replica.owner, wkey, "weights")
            if not replica.warm:
                replica.consumer = inst
        elif plan.load:
            self.memory.alloc_parts(now_ns, model.weight_split(gpus), wkey, model.index, "weights")
        kvp = plan_kv(self.memory, model, gpus, kv_pages, self.cfg.max_model_len)
        blocks, inst.kv_pages, inst.prefill_blocks = kvp.blocks, kvp.pages, kvp.prefill_blocks
        self.memory.alloc_parts(now_ns, kvp.parts, ("kv", inst.iid), model.index, "kv")
        caching = getattr(self.backend, "prefix_caching", False)
        inst.kv = reserving_kv(
            caching, blocks, model.block_size, params.min_free_blocks, params.min_total_blocks
        )
        reservation_of(inst.kv).on_reserve = lambda n, inst=inst: self._kv_reserved(inst, n)
        run_startup_plan(self, inst, plan, replica, now_ns)
        return inst

    def _ready(self, inst: ModelInstance, now_ns: int) -> None:
        if inst.state == State.STOPPED or inst.ready_ns >= 0:
            return
        if inst.state == State.STARTING:
            inst.state = State.READY
        inst.ready_ns = now_ns
        self.version += 1
        perf = self.perf_for(inst)
        assert inst.kv is not None
        if inst.model.disaggregated:  # a unit: its prefill engines' KV size and step model
            perf_p = self.perf_for(inst, inst.model.prefill_engine_tp)
            unit = UnitParts(inst.prefill_blocks, perf_p, inst.gpus)
            inst.engine = self.backend.start_engine(inst.model, inst.kv, perf, unit=unit)
        else:
            inst.engine = self.backend.start_engine(inst.model, inst.kv, perf)
        pending, inst.pending = inst.pending, []
        for req in pending:
            self.backend.deliver(inst.engine, req, now_ns)
        self.policy.on_ready(inst, now_ns)

    def engine_perf(self, spec: ModelSpec, tp: int) -> PerfModel:
        """Step-time model of an unshared engine of ``spec`` on ``tp`` GPUs (plus the eager-mode
        overhead with ``cluster.eager_overhead``)."""
        return engine_perf(self.cfg, spec, self.topo.gpu, tp)

    def perf_for(self, inst: ModelInstance, tp: int = 0) -> PerfModel:
        """The step model of ``inst``'s engines of ``tp`` GPUs (default: its engine TP)."""
        tp = tp or inst.model.engine_tp
        key = (inst.model.index, tp, inst.share)
        perf = self._perf_cache.get(key)
        if perf is None:
            perf = self.engine_perf(inst.model.spec, tp)
            perf = self.policy.wrap_perf(inst, perf)
            self._perf_cache[key] = perf
        return perf

    def stop(self, inst: ModelInstance, now_ns: int) -> None:
        """Take ``inst`` out of routing; it frees its GPUs once drained."""
        if inst.state >= State.STOPPING:
            return
        inst.state = State.STOPPING
        self.version += 1
        self.serving[inst.model.index].remove(inst)
        if inst.inflight == 0:
            retire(self, inst, now_ns)

    def _kv_reserved(self, inst: ModelInstance, blocks: int) -> None:
        pages = blocks * inst.model.block_pages
        self.version += 1
        inst.kv_pages -= pages
        self.memory.release(self.now(), inst.gpus, ("kv", inst.iid), pages)

    # ------------------------------------------------------------------ engine pool
    def engine_handoff_s(self, now_ns: int) -> float:
        """Seconds until a prewarmed engine process is ready (:class:`EnginePool`)."""
        return self.engine_pool.handoff_s(now_ns)

    # ------------------------------------------------------------------ replicas and loads
    def _attach_replica(self, r: Replica) -> None:
        self.version += 1
        self.replicas[r.rid] = r
        for g in r.gpus:
            self.gpu_replicas[g].append(r)

    def _detach_replica(self, r: Replica) -> None:
        self.version += 1
        self.replicas.pop(r.rid, None)
        for g in r.gpus:
            lst = self.gpu_replicas[g]
            if r in lst:
                lst.remove(r)

    def prewarm(self, model: ServedModel, gpus: tuple[int, ...], now_ns: int) -> Replica:
        """Start loading a replica of ``model`` on ``gpus`` (pages held from now)."""
        r = self._new_replica(model, gpus, now_ns)
        r.background = any(self.gpu_busy[g] is not None for g in gpus)
        return r

    def _new_replica(
        self,
        model: ServedModel,
        gpus: tuple[int, ...],
        now_ns: int,
        owner: tuple[str, int] | None = None,
    ) -> Replica:
        r = Replica(self._next_rid, model, gpus, now_ns)
        self._next_rid += 1
        key = owner or r.owner
        if owner is None:
            self.memory.alloc_parts(now_ns, model.weight_split(gpus), key, model.index, "prewarm")
            self._attach_replica(r)
        r.transfers = load_weights(self, model, gpus, key, now_ns, lambda t: self._warm(r, t))
        return r

    def _warm(self, r: Replica, now_ns: int) -> None:
        if r.warm:
            return
        r.warm = True
        r.warm_ns = now_ns
        self.version += 1
        self.replicas_loaded += 1
        if r.on_warm is not None:
            r.on_warm(now_ns)

    def evict(self, r: Replica, now_ns: int) -> None:
        """Destroy a replica: cancel its loads, free its pages."""
        for tr in r.transfers:
            if tr.active:
                self.transfers.cancel(now_ns, tr)
                self.loads_cancelled += 1
        r.warm = False
        r.on_warm = None
        self.version += 1
        self._detach_replica(r)
        self.memory.release(now_ns, r.gpus, r.owner)
        self.replicas_evicted += 1

    # ------------------------------------------------------------------ teardown and results
    def shutdown(self, now_ns: int) -> None:
        """End of run: stop every instance and drop every replica (memory must be empty)."""
        for inst in list(self.live.values()):
            if inst.state < State.STOPPING:
                self.stop(inst, now_ns)
            elif inst.state == State.STOPPING:
                retire(self, inst, now_ns)
        for r in list(self.replicas.values()):
            self.evict(r, now_ns)

    def gpu_seconds(self, t0_ns: int, t1_ns: int) -> float:
        """∫ (GPUs held by instances) dt over [t0, t1]."""
        return self.ledger.gpu_seconds(t0_ns, t1_ns)

    def start_counts(self, model: int | None = None) -> dict[str, int]:
        return start_counts(self.instance_table(), model)

    def cluster_metrics(self, model: int | None, t0_ns: int, t1_ns: int) -> dict[str, Any]:
        """Start counts and GPU-seconds, cluster-wide (``model`` None) or of one model."""
        table = self.instance_table()
        m = start_metrics(table, model)
        if model is None:
            m["gpu_seconds"] = self.gpu_seconds(t0_ns, t1_ns)
            m["replicas_loaded"] = self.replicas_loaded
            m["replicas_evicted"] = self.replicas_evicted
            m["loads_cancelled"] = self.loads_cancelled
            m["peak_pages_used"] = max(self.memory.peak_used)
            m["pages_per_gpu"] = self.pages_per_gpu
        else:
            m["gpu_seconds"] = model_gpu_seconds(table, model, t0_ns, t1_ns)
        return m

    def instance_table(self) -> ColumnSet:
        """One row per instance, stopped or live (:mod:`tidal.cluster.accounting`)."""
        return self.ledger.table(self.live.values())
