"""``muxserve``: MuxServe-style static spatial sharing (ICML'24; warmserve.md §3.5 B-MX,
Appendix A), as the WarmServe artifact re-hosts it (one vLLM engine per colocated model, CUDA
MPS shares, static KV split).

Placement (our compact version of MuxServe's optimiser): every node is split into meshes of
power-of-two sizes ([8], [4,4], [4,2,2], …, [1]*8); for each combination of node splits, the
models, sorted by compute demand (``rate · 2 · params · tokens per request``), go one by one to
the mesh where the resulting compute utilisation (Σ demand / mesh FLOPs) is lowest among those
whose memory holds them; the combination with the lowest maximum utilisation wins (ties: the
earlier one). Each model is placed once, sharded over its whole mesh.

Engines on a mesh share it: SM share ∝ compute demand, scaled by ``1 + mps_overload`` and capped
at 1 (:mod:`tidal.cluster.sharing` turns it into a slowdown); GPU memory split in proportion to
KV block size, as the artifact does (each engine's budget holds its weight shard and the rest
is its KV cache); the router cap (``max_num_seqs``) is min(B, KV tokens / mean request tokens).
Routing: the first engine of the model below its cap, else retry every second. No cold starts
during traffic, no autoscaling.
"""

from __future__ import annotations

from itertools import product

from tidal.cluster.coldstart import vanilla_plan
from tidal.cluster.instance import ModelInstance
from tidal.cluster.models import ServedModel, with_tp
from tidal.cluster.policies.base import PLACEMENTS, ClusterPolicy
from tidal.cluster.policies.common import first_below_cap
from tidal.cluster.sharing import SharedPerfModel
from tidal.core.errors import ConfigError
from tidal.core.request import Request
from tidal.hardware.perf import PerfModel


def mesh_splits(gpus: int) -> list[list[int]]:
    """Partitions of ``gpus`` into non-increasing powers of two, largest meshes first."""
    out: list[list[int]] = []

    def rec(left: int, cap: int, acc: list[int]) -> None:
        if left == 0:
            out.append(acc)
            return
        size = cap
        while size >= 1:
            if size <= left:
                rec(left - size, size, [*acc, size])
            size //= 2

    top = 1
    while top * 2 <= gpus:
        top *= 2
    rec(gpus, top, [])
    return out


def kv_split_pages(models: list[ServedModel], pool_pages: int) -> list[int] | None:
    """Per-GPU KV pages of each colocated engine, or None if one does not fit: budgets in
    proportion to KV block size, minus each weight shard."""
    total = sum(m.kv_block_bytes for m in models)
    out = []
    for m in models:
        budget = int(pool_pages * m.kv_block_bytes / total)
        kv = budget - m.weight_pages
        if kv < m.block_pages:
            return None
        out.append(kv)
    return out


@PLACEMENTS.register("muxserve")
class MuxServe(ClusterPolicy):
    name = "muxserve"

    def __init__(self, ctl) -> None:
        super().__init__(ctl)
        self.mx = self.cfg.muxserve
        self.layout: list[tuple[tuple[int, ...], list[tuple[ServedModel, float, int]]]] = []

    def _demand(self, m: ServedModel) -> float:
        s = self.ctl.stats[m.index]
        tokens = s.get("mean_prompt", 512.0) + s.get("mean_output", 128.0)
        return max(s.get("rate", 1.0), 1e-9) * 2 * m.spec.num_params * tokens

    def plan(self) -> list[tuple[tuple[int, ...], list[tuple[ServedModel, float, int]]]]:
        """[(mesh GPUs, [(model at mesh TP, SM share, KV pages per GPU)])]."""
        ctl = self.ctl
        per = ctl.topo.gpus_per_node
        flops = ctl.topo.gpu.flops
        pool = ctl.pages_per_gpu
        order = sorted(ctl.models, key=lambda m: (-self._demand(m), m.index))
        best = None
        for combo in product(mesh_splits(per), repeat=ctl.topo.num_nodes):
            meshes: list[tuple[int, ...]] = []
            for node, split in enumerate(combo):
                g = node * per
                for size in split:
                    meshes.append(tuple(range(g, g + size)))
                    g += size
            members: list[list[ServedModel]] = [[] for _ in meshes]
            load = [0.0] * len(meshes)
            ok = True
            for m in order:
                choice = None
                for k, mesh in enumerate(meshes):
                    mm = with_tp(m, len(mesh))
                    if kv_split_pages([*members[k], mm], pool) is None:
                        continue
                    u = (load[k] + self._demand(m)) / (flops * len(mesh))
                    if choice is None or u < choice[0]:
                        choice = (u, k, mm)
                if choice is None:
                    ok = False
                    break
                _, k, mm = choice
                members[k].append(mm)
                load[k] += self._demand(m)
            if not ok:
                continue
            worst = max(load[k] / (flops * len(meshes[k])) for k in range(len(meshes)))
            if best is None or worst < best[0]:
                best = (worst, meshes, members, load)
        if best is None:
            raise ConfigError(
                "cluster.models",
                f"MuxServe cannot place these models on {ctl.cfg.spec}",
                "use fewer or smaller models",
            )
        _, meshes, members, load = best
        layout = []
        for mesh, mods, total in zip(meshes, members, load, strict=True):
            if not mods:
                continue
            kv = kv_split_pages(mods, pool)
            assert kv is not None
            entries = []
            for mm, pages in zip(mods, kv, strict=True):
                raw = self._demand(mm) / total if total else 1.0 / len(mods)
                share = min(1.0, raw * (1 + self.mx.mps_overload)) if len(mods) > 1 else 1.0
                entries.append((mm, share, pages))
            layout.append((mesh, entries))
        return layout

    def setup(self, now_ns: int) -> None:
        ctl = self.ctl
        st = self.cfg.startup
        self.layout = self.plan()
        b = self.cfg.batch
        for mesh, entries in self.layout:
            for mm, share, pages in entries:
                s = ctl.stats[mm.index]
                tokens = s.get("mean_prompt", 512.0) + s.get("mean_output", 128.0)
                blocks = pages // mm.block_pages
                cap = max(1, min(b, int(blocks * mm.block_size // max(tokens, 1.0))))
                plan = vanilla_plan(st.worker_s, st.engine_s, st.nccl_s, st.kv_init_s)
                self._launch_shared(mm, mesh, plan, now_ns, share, pages, cap)

    def _launch_shared(self, mm, mesh, plan, now_ns, share, pages, cap) -> ModelInstance:
        ctl = self.ctl
        busy = [g for g in mesh if ctl.gpu_busy[g] is not None]
        saved = {g: ctl.gpu_busy[g] for g in busy}
        for g in busy:
            ctl.gpu_busy[g] = None  # engines of one mesh share its GPUs
        inst = ctl.launch(mm, mesh, plan, now_ns, "static", kv_pages=pages, share=share, cap=cap)
        for g, other in saved.items():
            ctl.gpu_busy[g] = other
        return inst

    def route(self, req: Request, m: int, now_ns: int) -> None:
        inst = first_below_cap(self.ctl.serving[m])
        if inst is None:
            self.ctl.retry_later(req, m, now_ns, self.mx.retry_s)
        else:
            self.ctl.assign(req, inst, now_ns)

    def wrap_perf(self, inst: ModelInstance, perf: PerfModel) -> PerfModel:
        if inst.share >= 1.0:
            return perf
        return SharedPerfModel(perf, inst.share, self.mx.k_prefill, self.mx.k_decode)
