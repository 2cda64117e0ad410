"""MuxServe's placement optimiser (docs/research/warmserve.md §3.5 B-MX, Appendix A), re-derived
from ``muxserve/muxsched/placement.py`` of hao-ai-lab/MuxServe @2249cfa
(``PlacementOptimizer.optimize`` with ``smart_placement``, the tool that writes the per-mesh YAML
files the WarmServe artifact's ``prewarm_manager.py`` reads for its MuxServe runs). The simulator's
step-time model, slowed by the MPS share (:mod:`tidal.cluster.sharing`), stands in for MuxServe's
profiled A100 cost table.

Per model (``LLM`` in MuxServe): its average request rate λ over the replay
(docs/research/warmserve.md §5 Q11), its mean prompt ``P`` and output ``S`` lengths, its weight
bytes, KV bytes per token, a minimum mesh size (MuxServe's table: 7B/13B → 1, 30B → 2, 65B → 4 GPUs,
which is the smallest power of two whose per-GPU weight budget ``0.9·(1 − 0.4)·GPU memory`` holds
the weights — the rule used here), a compute scale (7B → 1, 13B → 2, 30B → 4, 65B → 8:
``2^round(log2(params / 7e9))``) and a prefill MPS percentage (7B → 80, 13B → 90, larger → 100,
``dump_to_yaml``).

Cost model (``CostEstimator``): with ``t_p(b)`` the prefill of b prompts of P tokens at 100% MPS
and ``t_d(b)`` a decode step of b sequences at context ``P + S/2`` at the decode MPS ``d``, a
batch b serves ``tpt(b) = b / (S · t_d(b) + t_p(b))`` requests/s. ``estimate_throughput``
bisects b on [1, max(2, max_seqs)] (max_seqs = min(KV cache // KV per request, 256 per GPU)) for
the smallest batch with ``tpt ≥ λ`` (it returns the last midpoint, truncated), and calls λ
satisfied when ``tpt + min(0.5, 0.1·tpt) > λ``. ``estimate_mps`` takes, per mesh size, the
smallest decode MPS in 30..90% that satisfies λ (else the one with the highest throughput): the
model's candidate (MPS, batch) for that mesh size.

Placement: each node is split into power-of-two meshes (MuxServe's list for 8 GPUs: [8], [4,4],
[4,2,2], …, [1]*8); node splits are combined with replacement; a combination is skipped if it
has more meshes than models or no mesh as large as the largest minimum mesh size. Models in
decreasing ``λ · compute scale`` go to the mesh whose estimated throughput grows most (ties: the
smaller mesh), subject to memory (weights ≤ the mesh's free memory ``0.9·0.6·GPU memory·n``,
each placed model taking its weights + 7.6 GB) and the MPS budget (Σ decode MPS ≤ 100 + 20
overload). ``estimate_mesh_throughput`` splits the mesh's KV memory (0.98·memory − weights −
6 GB per model) in proportion to ``λ · KV per token``, charges every model the prefills of all
models on the mesh, raises the batch of the model furthest below its rate one at a time, and
returns the best rate-weighted mean throughput. The combination with the highest
``Σ_mesh tpt_mesh · λ_mesh / Σ λ`` wins (first one on ties).

Output per mesh (``YamlBuilder``): tensor parallelism = mesh size; per model the MPS pair
(prefill, decode) and ``max_num_seqs`` = its candidate batch for that mesh size (the isolated
estimate, as ``dump_to_yaml`` writes it); the mesh's ``gpu_memory_utilization`` =
``(memory − weights/n − 1.6 GB·k − 6 GB·k) / memory`` for k models.

Differences from the released tool (each one is generous to MuxServe or neutral): the KV bytes
per token come from the model catalog (the tool's ``layers · hidden · 4`` ignores Llama-2-70B's
grouped-query attention, 8× too large); the mesh throughputs are kept per mesh, where the tool
indexes them by position in a list it re-sorts after every placement; no per-sequence
scheduling overhead is added to decode steps (the tool adds 0.07–0.1 ms per sequence measured on
its own runtime; the simulated engine has none); the mean lengths are the workload's (the tool's
``cfg_gen.py`` passes the workload's too, its default being ShareGPT's 161/337).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from tidal.cluster.policies.muxserve_combos import bounded_combos, node_splits
from tidal.hardware.models import ModelSpec
from tidal.hardware.perf import PerfModel

MESH_RESERVED_UTIL = 0.4
"""``MeshGroup``'s default ``gpu_memory_utilization``: weights may use 0.9·(1 − 0.4) of memory."""
ACTIVATION_BYTES = 6e9
"""Activation memory charged per model (GB in the tool)."""
PROC_BYTES = 1.6e9
"""Process memory per model (0.8 GB × two processes)."""
MPS_OVERLOAD = 20
"""Percentage points a mesh's Σ decode MPS may exceed 100 (``overload_threshold``)."""
DECODE_MPS = (30, 40, 50, 60, 70, 80, 90)
"""Decode MPS levels ``estimate_mps`` tries (profiled levels ≤ 90 except the prefill's 100)."""
ESTIMATE_PREFILL_MPS = 100
KV_USABLE = 0.98
MAX_BATCH_PER_GPU = 256
"""Largest profiled batch: 256 on one GPU, 512 on two, … (the bound on ``max_num_seqs``)."""


def prefill_mps(spec: ModelSpec) -> int:
    """The prefill MPS percentage ``dump_to_yaml`` writes (7B 80, 13B 90, 30B/65B 100)."""
    b = spec.num_params / 1e9
    return 80 if b < 10 else 90 if b < 20 else 100


def compute_scale(spec: ModelSpec) -> int:
    """``rate_scale``: 7B 1, 13B 2, 30B 4, 65B/70B 8."""
    return 2 ** max(0, round(math.log2(max(spec.num_params / 7e9, 1.0))))


@dataclass
class MuxLLM:
    """One model as the optimiser sees it (``LLM`` of placement.py)."""

    index: int
    spec: ModelSpec
    rate: float
    prompt: int
    output: int
    weight_bytes: float
    kv_per_token: float
    """KV bytes per token of the whole model (all GPUs)."""
    perf: Callable[[int], PerfModel]
    """Step-time model of the model sharded over n GPUs."""
    slowdown: Callable[[int, float, bool], float]
    """(mesh GPUs, MPS %, prefill?) → latency factor."""
    base_gpus: int = 1
    decode_factor: float = 1.0
    """Decode time per output token over the target's own step (speculative decoding:
    t_verify / (E[tokens/step] · t_step) at B requests, :mod:`tidal.cluster.spec_capacity`)."""
    candidates: dict[int, tuple[bool, int, int, float]] = field(default_factory=dict)
    """Mesh size → (satisfied, decode MPS, batch size, throughput)."""

    @property
    def scale(self) -> int:
        return compute_scale(self.spec)

    @property
    def kv_per_seq(self) -> float:
        return self.kv_per_token * (self.prompt + self.output)

    def _step(self, n: int, b: int, prefill: bool) -> float:
        perf = self.perf(n)
        if prefill:
            p = self.prompt
            return float(perf.step_seconds(0, 0, b * p, b * p * p, b * p, b))
        ctx = self.prompt + self.output // 2
        return float(perf.step_seconds(b, b * ctx, 0, 0, 0, 0))

    def latency(self, n: int, bs: float, dec_mps: float, pre_mps: float) -> tuple[float, float]:
        """(prefill of a batch, one decode step) at batch ``bs`` (linear between integers)."""
        lo = max(1, int(bs))
        w = bs - lo
        out = []
        for prefill, mps in ((True, pre_mps), (False, dec_mps)):
            a = self._step(n, lo, prefill)
            t = a + w * (self._step(n, lo + 1, prefill) - a) if w > 0 else a
            out.append(t * self.slowdown(n, mps, prefill))
        return out[0], out[1]


class MeshGroup:
    """A mesh of ``n`` GPUs of one node (``MeshGroup`` of placement.py)."""

    def __init__(self, node: int, first_gpu: int, n: int, gpu_bytes: float) -> None:
        self.node = node
        self.first_gpu = first_gpu
        self.n = n
        self.gpu_bytes = gpu_bytes
        self.remaining_mps = 100
        self.free_bytes = 0.9 * (1 - MESH_RESERVED_UTIL) * gpu_bytes * n
        self.models: list[tuple[MuxLLM, int]] = []
        self.tpt = 0.0

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(range(self.first_gpu, self.first_gpu + self.n))

    def can_place(self, llm: MuxLLM, mps: int) -> bool:
        if self.free_bytes < llm.weight_bytes:
            return False
        return self.remaining_mps + MPS_OVERLOAD >= mps

    def place(self, llm: MuxLLM, mps: int) -> None:
        self.models.append((llm, mps))
        self.free_bytes -= llm.weight_bytes + PROC_BYTES + ACTIVATION_BYTES
        self.remaining_mps -= mps

    def memory_utilization(self) -> float:
        """The YAML's ``gpu_memory_utilization`` (memory left per GPU for KV, as a fraction)."""
        k = len(self.models)
        w = sum(llm.weight_bytes for llm, _ in self.models) / self.n
        return (self.gpu_bytes - w - (PROC_BYTES + ACTIVATION_BYTES) * k) / self.gpu_bytes


@dataclass(frozen=True)
class MuxEngine:
    model: int
    prefill_mps: int
    decode_mps: int
    max_num_seqs: int


@dataclass(frozen=True)
class MuxMesh:
    gpus: tuple[int, ...]
    engines: tuple[MuxEngine, ...]
    gpu_memory_utilization: float


@dataclass(frozen=True)
class MuxPlacement:
    meshes: tuple[MuxMesh, ...]
    throughput: float
    """The optimiser's objective: rate-weighted estimated throughput (requests/s)."""


class MuxServeOptimizer:
    def __init__(self, llms: list[MuxLLM], num_nodes: int, gpus_per_node: int, gpu_bytes: float):
        self.llms = llms
        self.num_nodes = num_nodes
        self.per_node = gpus_per_node
        self.gpu_bytes = gpu_bytes
        total = sum(m.weight_bytes for m in llms) + ACTIVATION_BYTES * len(llms)
        self.avg_util = total / (gpu_bytes * num_nodes * gpus_per_node)
        """``PlacementOptimizer``'s average memory utilisation (its default KV cache size)."""
        sizes = [n for n in (1, 2, 4, 8, 16) if n <= gpus_per_node]
        for llm in llms:
            llm.base_gpus = next(
                (n for n in sizes if llm.weight_bytes <= self._weight_room(n)), sizes[-1]
            )
            for n in sizes:
                if n < llm.base_gpus:
                    continue
                cand = self.estimate_mps(llm, n)
                if cand is not None:
                    llm.candidates[n] = cand

    def _weight_room(self, n: int) -> float:
        return 0.9 * (1 - MESH_RESERVED_UTIL) * self.gpu_bytes * n

    # ------------------------------------------------------------------ cost model
    def estimate_throughput(
        self,
        llm: MuxLLM,
        n: int,
        rate: float,
        dec_mps: float,
        cache_bytes: float | None = None,
        pre_mps: float = ESTIMATE_PREFILL_MPS,
    ) -> tuple[bool, float, int]:
        """(satisfied, throughput, batch size) — bisection for the smallest batch meeting λ."""
        if cache_bytes is None:
            cache_bytes = self.avg_util * self.gpu_bytes * n
        max_seqs = min(cache_bytes // llm.kv_per_seq, MAX_BATCH_PER_GPU * n)
        low, high = 1.0, float(max(2, max_seqs))
        cur, tpt = low, 0.0
        while high - low >= 1:
            cur = (low + high) / 2
            t_p, t_d = llm.latency(n, cur, dec_mps, pre_mps)
            dec = t_d * llm.output
            if llm.decode_factor != 1.0:  # speculating: fewer, longer steps per output
                dec *= llm.decode_factor
            tpt = cur / (dec + t_p)
            if tpt >= rate:
                high = cur
            else:
                low = cur
        ok = tpt + min(0.5, tpt * 0.1) > rate
        return ok, (rate if ok else tpt), int(cur)

    def estimate_mps(self, llm: MuxLLM, n: int) -> tuple[bool, int, int, float] | None:
        """(satisfied, decode MPS, batch, throughput) of the smallest decode MPS meeting λ on
        ``n`` GPUs, else of the one with the highest throughput."""
        best: tuple[bool, int, int, float] | None = None
        for mps in DECODE_MPS:
            ok, tpt, bs = self.estimate_throughput(llm, n, llm.rate, mps)
            if ok:
                return True, mps, bs, tpt
            if best is None or tpt > best[3]:
                best = (False, mps, bs, tpt)
        return best

    def estimate_mesh_throughput(
        self, mesh: MeshGroup, llms: list[MuxLLM], dec_mps: list[int]
    ) -> float:
        """Rate-weighted mean throughput of ``llms`` sharing ``mesh`` (best over batch raises)."""
        if not llms:
            return 0.0
        n = mesh.n
        w = sum(m.weight_bytes for m in llms)
        kv_total = max(0.0, mesh.gpu_bytes * n * KV_USABLE - w - ACTIVATION_BYTES * len(llms))
        base = sum(m.kv_per_token * m.rate for m in llms)
        sizes, limits = [], []
        for m, mps in zip(llms, dec_mps, strict=True):
            local = m.rate * m.kv_per_token / base * kv_total if base else 0.0
            sizes.append(self.estimate_throughput(m, n, m.rate, mps, local)[2])
            limits.append(min(local // m.kv_per_seq, MAX_BATCH_PER_GPU * n))
        total_rate = sum(m.rate for m in llms)
        best = 0.0
        while any(b < lim for b, lim in zip(sizes, limits, strict=True)):
            lat = [
                m.latency(n, b, mps, ESTIMATE_PREFILL_MPS)
                for m, b, mps in zip(llms, sizes, dec_mps, strict=True)
            ]
            prefills = sum(t_p for t_p, _ in lat)
            mesh_tpt, worst, worst_ratio = 0.0, None, 100.0
            for i, m in enumerate(llms):
                tpt = sizes[i] / (lat[i][1] * m.output + prefills)
                mesh_tpt += tpt * m.rate
                if tpt + min(0.5, tpt * 0.1) < m.rate and sizes[i] < limits[i]:
                    ratio = tpt / m.rate
                    if ratio < worst_ratio:
                        worst, worst_ratio = i, ratio
            best = max(best, mesh_tpt / total_rate if total_rate else 0.0)
            if worst is None:
                break
            sizes[worst] += 1
        return best

    # ------------------------------------------------------------------ placement
    def _meshes(self, combo: tuple[tuple[int, ...], ...]) -> list[MeshGroup]:
        out = []
        for node, split in enumerate(combo):
            g = node * self.per_node
            for size in split:
                out.append(MeshGroup(node, g, size, self.gpu_bytes))
                g += size
        return out

    def smart_placement(self, meshes: list[MeshGroup]) -> float | None:
        """Greedy by throughput increase; returns the objective, or None if a model fits nowhere."""
        order = sorted(self.llms, key=lambda m: (m.rate * m.scale, m.scale), reverse=True)
        prio = {id(mesh): 0.0 for mesh in meshes}
        tagged = sorted(meshes, key=lambda m: (prio[id(m)], m.free_bytes), reverse=True)
        for llm in order:
            best: MeshGroup | None = None
            best_gain = -100.0
            for mesh in tagged:
                cand = llm.candidates.get(mesh.n)
                if cand is None or not mesh.can_place(llm, cand[1]):
                    continue
                tpt = self.estimate_mesh_throughput(
                    mesh,
                    [m for m, _ in mesh.models] + [llm],
                    [mps for _, mps in mesh.models] + [cand[1]],
                )
                gain = tpt - mesh.tpt
                if gain > best_gain or (gain == best_gain and best and mesh.n < best.n):
                    best, best_gain = mesh, gain
            if best is None:
                return None
            prio[id(best)] -= llm.rate * llm.scale / best.n
            best.place(llm, llm.candidates[best.n][1])
            best.tpt += best_gain
            tagged.sort(key=lambda m: (prio[id(m)], m.free_bytes), reverse=True)
        total_tpt = total_rate = 0.0
        for mesh in meshes:
            llms = [m for m, _ in mesh.models]
            rate = sum(m.rate for m in llms)
            mps = [d for _, d in mesh.models]
            total_tpt += self.estimate_mesh_throughput(mesh, llms, mps) * rate
            total_rate += rate
        return total_tpt / total_rate if total_rate else 0.0

    def optimize(self) -> MuxPlacement | None:
        need = max(min(m.candidates) for m in self.llms)
        best: tuple[float, list[MeshGroup]] | None = None
        splits = [tuple(s) for s in node_splits(self.per_node)]
        for combo in bounded_combos(splits, self.num_nodes, len(self.llms)):
            if max(max(s) for s in combo) < need:
                continue
            meshes = self._meshes(combo)
            tpt = self.smart_placement(meshes)
            if tpt is not None and (best is None or tpt > best[0]):
                best = (tpt, meshes)
        if best is None:
            return None
        tpt, meshes = best
        out = []
        for mesh in meshes:
            if not mesh.models:
                continue
            engines = tuple(
                MuxEngine(llm.index, prefill_mps(llm.spec), mps, llm.candidates[mesh.n][2])
                for llm, mps in mesh.models
            )
            out.append(MuxMesh(mesh.gpus, engines, mesh.memory_utilization()))
        return MuxPlacement(tuple(out), tpt)
