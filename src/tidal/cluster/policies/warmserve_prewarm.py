"""WarmServe's prewarming step (docs/research/warmserve.md §2.2–2.4): the cluster view turned into
the planner's inputs (:mod:`tidal.cluster.policies.warmserve_plan`) and its placements read back.

Invariant: a model that already holds as many replicas (warm, loading, or backing a live
instance) as it has scores gets nothing new with evict-aware placement on; the planner never
evicts, so every action lands on free pages and a free replica slot.
"""

from __future__ import annotations

from tidal.cluster.instance import State
from tidal.cluster.models import ServedModel
from tidal.cluster.placement_units import split_gpus
from tidal.cluster.policies.warmserve_plan import PlanReplica, plan_prewarm
from tidal.cluster.view import ClusterView


def existing_replicas(view: ClusterView) -> list[PlanReplica]:
    """Replicas as the artifact's planner sees them: warm and loading replicas and the
    weights backing live instances (which stay registered as replicas), by creation time."""
    items: list[tuple[int, PlanReplica]] = []

    def replica(model: ServedModel, gpus: tuple[int, ...]) -> PlanReplica:
        parts = tuple(split_gpus(model, gpus)) if model.split else ()
        return PlanReplica(model.index, model.tp, gpus, 0.0, parts)

    for r in view.replicas.values():
        items.append((r.started_ns, replica(r.model, r.gpus)))
    for inst in view.live.values():
        if inst.state != State.STOPPED:
            items.append((inst.created_ns, replica(inst.model, inst.gpus)))
    items.sort(key=lambda x: x[0])
    return [p for _, p in items]


def prewarm_actions(
    view: ClusterView, scores: list[list[float]], max_slots: int, smart: bool
) -> list[tuple[int, tuple[int, ...]]]:
    """``(model, GPU group)`` for each new replica of this period, from every model's replica
    scores; ``smart``: evict-aware placement (off: ablation (e), round-robin first fit)."""
    if smart:
        have = [0] * len(scores)
        for r in view.replicas.values():
            have[r.model.index] += 1
        for inst in view.live.values():
            have[inst.model.index] += 1
        if all(len(s) <= h for s, h in zip(scores, have, strict=True)):
            return []  # every model has its N replicas: nothing to place
    if not any(scores):
        return []
    n = view.topo.num_gpus
    return plan_prewarm(
        scores,
        [m.tp for m in view.models],
        [m.weight_pages for m in view.models],
        existing_replicas(view),
        [view.free_pages(g) for g in range(n)],
        [max_slots - len(view.gpu_replicas[g]) for g in range(n)],
        [view.topo.gpus_of(k) for k in range(view.topo.num_nodes)],
        smart=smart,
        layouts=[(m.groups, m.apart) for m in view.models],
    )
