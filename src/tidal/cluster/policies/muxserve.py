"""``muxserve``: MuxServe-style static spatial sharing (ICML'24; docs/research/warmserve.md §3.5
B-MX, Appendix A), as the WarmServe artifact re-hosts it (``prewarm_manager.py`` with ``--muxserve``
and ``muxserve_utils.py``): one vLLM engine per (mesh, model), all started before traffic.

* Placement: MuxServe's optimiser (:mod:`tidal.cluster.policies.muxserve_plan`) on the replay's
  average rate and mean lengths per model (docs/research/warmserve.md §5 Q11).
* SM share: each engine gets the MPS thread percentage ``max(prefill MPS, decode MPS)`` of its
  placement, normalised over its mesh to sum to 100% (the artifact's launch loop); its steps are
  slowed by :mod:`tidal.cluster.sharing` (MuxServe's measured profile by default).
* Memory: the engine's KV cache per GPU is the mesh's ``gpu_memory_utilization`` (the memory the
  optimiser leaves for KV) × GPU memory × its share of the mesh's KV block sizes, the block size
  of a model being its per-GPU KV block at its own tensor-parallel degree (the artifact's
  ``ModelKVConfig`` table: 7B at TP 1, 13B at TP 2, 70B at TP 4). Capped so that weights and KV
  fit the page pool.
* Router: the first engine of the model with fewer in-flight requests than its ``max_num_seqs``
  (the placement's batch size, ``cap: plan``; ``cap: batch`` uses B instead, a sensitivity
  setting), else retry every second. No cold starts during traffic, no autoscaling.

Not reproduced: the artifact computes every engine's memory fraction from the block size of the
last model in the mesh's YAML (a loop-variable slip) and passes MuxServe's KV fraction as vLLM's
``--gpu-memory-utilization``, which vLLM reads as weights + KV; both would shrink or break the
KV caches, so the intended proportional KV split is used.
"""

from __future__ import annotations

from tidal.cluster.coldstart import vanilla_plan
from tidal.cluster.instance import ModelInstance
from tidal.cluster.models import ServedModel, cdiv, with_tp
from tidal.cluster.policies.base import PLACEMENTS, ClusterPolicy
from tidal.cluster.policies.common import first_below_cap
from tidal.cluster.policies.muxserve_plan import MuxLLM, MuxPlacement, MuxServeOptimizer
from tidal.cluster.sharing import SharedPerfModel, k_slowdown, profile_slowdown
from tidal.cluster.view import ClusterActions, ClusterView, LaunchParams
from tidal.core.errors import ConfigError
from tidal.core.request import Request
from tidal.hardware.perf import PerfModel


class MeshEngine:
    """What one engine of the static layout gets."""

    def __init__(self, model: ServedModel, share: float, kv_pages: int, cap: int, mps: tuple):
        self.model = model
        self.share = share
        self.kv_pages = kv_pages
        self.cap = cap
        self.mps = mps
        """(prefill MPS, decode MPS) of the placement."""


@PLACEMENTS.register("muxserve")
class MuxServe(ClusterPolicy):
    name = "muxserve"

    def __init__(self, view: ClusterView, act: ClusterActions) -> None:
        super().__init__(view, act)
        self.mx = self.cfg.muxserve
        for m in view.models:
            if m.disaggregated:
                raise ConfigError(
                    "cluster.models", f"{m.name}: MuxServe's meshes share GPUs between "
                    "aggregated engines, not disaggregated units",
                    "drop the :PpDd suffix, or use placement warmserve, serverlessllm or dedicated",
                )  # fmt: skip
        self.placement: MuxPlacement | None = None
        self.layout: list[tuple[tuple[int, ...], list[MeshEngine]]] = []

    # ------------------------------------------------------------------ placement
    def slowdown(self, n: int, percent: float, prefill: bool) -> float:
        if self.mx.slowdown == "profile":
            return profile_slowdown(n, percent, prefill)
        return k_slowdown(percent / 100, self.mx.k_prefill if prefill else self.mx.k_decode)

    def llms(self) -> list[MuxLLM]:
        view = self.view
        out = []
        for m in view.models:
            s = view.stats[m.index]
            cache: dict[int, PerfModel] = {}

            def perf(n: int, spec=m.spec, cache=cache) -> PerfModel:
                if n not in cache:
                    cache[n] = view.engine_perf(spec, n)
                return cache[n]

            out.append(
                MuxLLM(
                    index=m.index,
                    spec=m.spec,
                    rate=max(s.get("rate", 1.0), 1e-6),
                    prompt=max(1, round(s.get("mean_prompt", 512.0))),
                    output=max(1, round(s.get("mean_output", 128.0))),
                    weight_bytes=float(m.spec.weight_bytes),
                    kv_per_token=m.spec.kv_bytes_per_token_per_gpu(1),
                    perf=perf,
                    slowdown=self.slowdown,
                    decode_factor=s.get("decode_time_factor", 1.0),
                )
            )
        return out

    def plan(self) -> list[tuple[tuple[int, ...], list[MeshEngine]]]:
        """[(mesh GPUs, its engines)] of the static layout."""
        view = self.view
        gpu_bytes = float(view.topo.gpu.mem_bytes)
        opt = MuxServeOptimizer(
            self.llms(), view.topo.num_nodes, view.topo.gpus_per_node, gpu_bytes
        )
        self.placement = opt.optimize() if all(m.candidates for m in opt.llms) else None
        if self.placement is None:
            raise ConfigError(
                "cluster.models",
                f"MuxServe's optimiser finds no placement of these models on {view.cfg.spec}",
                "use fewer or smaller models, or a larger cluster",
            )
        pool = view.pages_per_gpu
        layout = []
        for mesh in self.placement.meshes:
            n = len(mesh.gpus)
            weights = [with_tp(view.models[e.model], n) for e in mesh.engines]
            pct = [max(e.prefill_mps, e.decode_mps) for e in mesh.engines]
            blk = [view.models[e.model].kv_block_bytes for e in mesh.engines]
            kv_budget = mesh.gpu_memory_utilization * gpu_bytes
            kv = [int(kv_budget * b / sum(blk)) // view.page_bytes for b in blk]
            room = pool - sum(w.weight_pages for w in weights)
            if sum(kv) > room:
                kv = [k * room // sum(kv) for k in kv]
            engines = []
            for e, mm, p, pages in zip(mesh.engines, weights, pct, kv, strict=True):
                need = cdiv(self.cfg.max_model_len, mm.block_size) * mm.block_pages
                if pages < need:
                    raise ConfigError(
                        "cluster.models",
                        f"MuxServe's layout leaves {mm.name} on GPUs {mesh.gpus} {pages} KV pages "
                        f"per GPU, fewer than one {self.cfg.max_model_len}-token request needs",
                        "use fewer or smaller models, or a larger cluster",
                    )
                cap = self._cap(e.max_num_seqs, mm, pages)
                share = p / sum(pct)
                mps = (e.prefill_mps, e.decode_mps)
                engines.append(MeshEngine(mm, share, pages, max(1, cap), mps))
            layout.append((mesh.gpus, engines))
        return layout

    def _cap(self, planned: int, mm: ServedModel, kv_pages: int) -> int:
        if self.mx.cap == "plan":
            return planned
        if self.mx.cap == "batch":
            return self.cfg.batch
        s = self.view.stats[mm.index]
        tokens = s.get("mean_prompt", 512.0) + s.get("mean_output", 128.0)
        return int((kv_pages // mm.block_pages) * mm.block_size // max(tokens, 1.0))

    # ------------------------------------------------------------------ events
    def setup(self, now_ns: int) -> None:
        st = self.cfg.startup
        self.layout = self.plan()
        for mesh, engines in self.layout:
            for e in engines:
                plan = vanilla_plan(
                    st.worker_s, st.engine_s, st.nccl_s if len(mesh) > 1 else 0.0, st.kv_init_s
                )
                self._launch_shared(e, mesh, plan, now_ns)

    def _launch_shared(self, e: MeshEngine, mesh, plan, now_ns) -> ModelInstance:
        params = LaunchParams(
            "static", kv_pages=e.kv_pages, share=e.share, cap=e.cap, shared_gpus=True
        )
        return self.act.launch(e.model, mesh, plan, params, now_ns)

    def route(self, req: Request, m: int, now_ns: int) -> None:
        inst = first_below_cap(self.view.serving[m])
        if inst is None:
            self.act.retry_later(req, m, now_ns, self.mx.retry_s)
        else:
            self.act.assign(req, inst, now_ns)

    def wrap_perf(self, inst: ModelInstance, perf: PerfModel) -> PerfModel:
        if inst.share >= 1.0:
            return perf
        n = len(inst.gpus)
        pct = 100 * inst.share
        return SharedPerfModel(
            perf, inst.share, self.slowdown(n, pct, True), self.slowdown(n, pct, False)
        )
