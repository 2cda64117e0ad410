"""``serverlessllm``: ServerlessLLM-style autoscaling (OSDI'24; docs/research/warmserve.md §3.5 B-SL
and Appendix A), as its open-source router and storage-aware scheduler do it.

* Autoscaler, every ``loop_s`` (1 s) per model: desired = clamp(⌈in-flight / target⌉, min,
  max); one instance is created per tick while desired exceeds the instances running or
  starting; one is stopped per tick when desired is lower and no request arrived for
  ``keep_alive_s`` (the idle timer grows by one loop per tick and resets at every arrival).
* Startup-time-aware server choice: among nodes with ``tp`` idle GPUs, the lowest estimated load
  time — ``bytes / host-link bandwidth`` when the checkpoint is in the node's DRAM pool, else the
  node's SSD queue plus ``bytes / SSD bandwidth``; the first ``tp`` idle GPUs there.
* Cold start: nothing is prewarmed — worker, engine, group (TP > 1), weights through the
  node's tiers, KV allocation, in sequence (§1.4 vanilla column). A checkpoint read from SSD
  stays in that node's DRAM.
* Router: a FIFO queue per model; the head goes round-robin to a ready instance with fewer than
  ``instance_cap`` outstanding requests, re-checked whenever an instance frees a slot, becomes
  ready, or every loop.
"""

from __future__ import annotations

from collections import deque

from tidal.cluster.coldstart import vanilla_plan
from tidal.cluster.instance import ModelInstance
from tidal.cluster.models import ServedModel
from tidal.cluster.placement_units import first_free, place_groups
from tidal.cluster.policies.base import PLACEMENTS, ClusterPolicy
from tidal.cluster.policies.common import RoundRobin, scale_step
from tidal.cluster.view import ClusterActions, ClusterView, LaunchParams
from tidal.core.request import Request


@PLACEMENTS.register("serverlessllm")
class ServerlessLLM(ClusterPolicy):
    name = "serverlessllm"

    def __init__(self, view: ClusterView, act: ClusterActions) -> None:
        super().__init__(view, act)
        self.sl = self.cfg.serverlessllm
        m = len(view.models)
        self.queues: list[deque[Request]] = [deque() for _ in range(m)]
        self.rr = RoundRobin(m)
        self.idle_s = [0.0] * m
        self.last_arrival = [-1] * m
        if self.sl.checkpoints == "dram":
            for node in range(view.topo.num_nodes):
                act.cache_checkpoints(node, range(m))
        self._dispatch_pending = [False] * m

    def setup(self, now_ns: int) -> None:
        self.act.every(self.sl.loop_s, self.tick, now_ns)

    def in_dram(self, model: ServedModel, node: int) -> bool:
        return model.index in self.view.dram[node]

    # ------------------------------------------------------------------ routing
    def route(self, req: Request, m: int, now_ns: int) -> None:
        self.queues[m].append(req)
        self.idle_s[m] = 0.0
        self._dispatch(m, now_ns)

    def _dispatch(self, m: int, now_ns: int) -> None:
        self._dispatch_pending[m] = False
        q, insts = self.queues[m], self.view.serving[m]
        while q:
            inst = self.rr.pick(m, insts, self.sl.instance_cap)
            if inst is None:
                return
            self.act.assign(q.popleft(), inst, now_ns)

    def on_finish(self, inst: ModelInstance, now_ns: int) -> None:
        m = inst.model.index
        if self.queues[m] and not self._dispatch_pending[m]:
            self._dispatch_pending[m] = True
            self.act.at(now_ns, lambda t: self._dispatch(m, t))

    def on_ready(self, inst: ModelInstance, now_ns: int) -> None:
        self._dispatch(inst.model.index, now_ns)

    # ------------------------------------------------------------------ autoscaler
    def _idle(self, g: int) -> bool:
        return self.view.gpu_busy[g] is None

    def tick(self, now_ns: int) -> None:
        for m in range(len(self.view.models)):
            scale_step(self.view, self.sl, self.idle_s, m, now_ns, self._create, self.act.stop)
            self._dispatch(m, now_ns)

    def _create(self, model: ServedModel, now_ns: int) -> ModelInstance | None:
        view = self.view
        st = self.cfg.startup
        host_bw = min(st.host_to_gpu_gbs, view.topo.gpu.pcie_gbs) * 1e9
        best = None
        for node in range(view.topo.num_nodes):
            idle = view.idle_gpus(node)
            if len(idle) < model.tp:
                continue
            if self.in_dram(model, node):
                est = model.shard_bytes / host_bw
            else:
                queued = view.ssd_queued_bytes(node)
                total = sum(model.shard_bytes_on(i) for i in range(model.tp))  # (every shard)
                est = (queued + total) / (st.ssd_gbs * 1e9)
            if best is None or est < best[0]:
                best = (est, tuple(idle[: model.tp]))
        if model.split:  # a unit's two groups (cluster/placement_units.py): first idle ones
            group = place_groups(model, view.topo.num_nodes, first_free(view.topo, self._idle))
            best = None if group is None else (0.0, group)
        if best is None:
            return None
        plan = vanilla_plan(
            st.worker_s, st.engine_s, st.nccl_s if model.max_tp > 1 else 0.0, st.kv_init_s
        )
        return self.act.launch(model, best[1], plan, LaunchParams("miss"), now_ns)
