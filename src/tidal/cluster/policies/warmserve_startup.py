"""WarmServe's activation mechanics: the GPUs of a miss, an instance's startup plan, and the
extra load time of unified memory (docs/research/warmserve.md §2.5, §2.8).

Each follows the feature flags of ``cluster.warmserve.disable`` (``on``: feature → enabled):
``device-prewarm`` and ``engine-prewarm`` remove the worker and engine stages, ``unified-memory``
hands weights over in the GPU page pool, ``memory-switching`` maps KV lazily (off: all of it
before serving, and a load pays the mapping of its shard), ``placement`` picks the idle GPUs
that overlap the fewest replicas.
"""

from __future__ import annotations

from tidal.cluster.coldstart import StartupPlan, unified_plan
from tidal.cluster.config import ClusterConfig, StartupConfig
from tidal.cluster.models import ServedModel
from tidal.cluster.placement_units import place_groups
from tidal.cluster.view import ClusterView


def miss_gpus(view: ClusterView, model: ServedModel, evict_aware: bool) -> tuple[int, ...] | None:
    """Idle GPUs for a miss on the first node that has ``model.tp`` of them (None: none has);
    ``evict_aware``: those holding the fewest replicas (§2.5), else the first idle ones. A
    split unit takes each of its two groups so (:func:`place_groups`)."""

    def pick(node: int, size: int, taken: frozenset[int]) -> tuple[int, ...] | None:
        idle = [g for g in view.idle_gpus(node) if g not in taken]
        if len(idle) < size:
            return None
        if not evict_aware or len(idle) == size:
            return tuple(idle[:size])
        overlap = sorted((len(view.gpu_replicas[g]), g) for g in idle)
        return tuple(sorted(g for _, g in overlap[:size]))

    return place_groups(model, view.topo.num_nodes, pick)


def startup_plan(
    view: ClusterView,
    cfg: ClusterConfig,
    on: dict[str, bool],
    model: ServedModel,
    kind: str,
    gpus: tuple[int, ...],
    now_ns: int,
) -> StartupPlan:
    """The startup stages of an activation of ``kind`` (hit, partial, miss) on ``gpus``."""
    st = cfg.startup
    if on["engine-prewarm"]:
        proc = view.engine_handoff_s(now_ns)
    else:
        proc = st.engine_s
    if not on["device-prewarm"]:
        proc += st.worker_s
    if not on["unified-memory"]:
        group = st.nccl_s if model.max_tp > 1 else 0.0
        return StartupPlan(proc, True, group, st.kv_init_s)
    blocks = -(-st.lazy_kv_tokens // cfg.block_size)
    if on["memory-switching"]:
        kv_bytes = blocks * model.block_pages * view.page_bytes
    else:
        free = min(view.free_pages(g) for g in gpus)
        if kind == "miss":
            free -= model.weight_pages
        kv_bytes = max(free, 0) * view.page_bytes
    return unified_plan(proc, kv_bytes / (st.map_gbs * 1e9), load=kind == "miss")


def load_extra_s(st: StartupConfig, on: dict[str, bool], model: ServedModel) -> float:
    """Seconds a weight load adds with unified memory: the NCCL group of a TP engine and,
    without ``memory-switching``, the mapping of the shard's pages."""
    if not on["unified-memory"]:
        return 0.0
    extra = st.nccl_s if model.max_tp > 1 else 0.0
    if not on["memory-switching"]:
        extra += model.shard_bytes / (st.map_gbs * 1e9)
    return extra
