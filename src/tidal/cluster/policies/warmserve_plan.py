"""WarmServe's prewarm planner: replica targets and scores (docs/research/warmserve.md §2.2) and
evict-aware placement (§2.3), as pure functions of the cluster state so they can be tested alone.

Scores, per model m with ``running(m)`` instances and predicted average/peak in-flight load:

    k_avg = ⌈avg/B⌉, k_peak = ⌈peak/B⌉, nF = max(k_avg − running, 0),
    nB = max(k_peak − running − nF, 0), N = nF + nB,
    Tcold = bytes / tp / 2^30 / 32 GB/s,  burst = peak / avg,
    score_i = Tcold · e^{−i/N} (i < nF),  score_{nF+j} = Tcold · burst · e^{−(nF+j)/N}.

Existing replicas of m take the first score slots in order; those beyond N score 0.

Placement: new replicas in decreasing score order; each goes on the group S (|S| = tp, one
node, every GPU with room for the shard and a free slot) that satisfies COMPAT with every
replica q touching S — model(q) ≠ model(r); equal TP ⇒ S = footprint(q); smaller q ⇒
footprint(q) ⊆ S; larger q ⇒ S ⊆ footprint(q) — so footprints stay laminar. Among candidates
(ascending-GPU-id enumeration, first minimum kept) it takes the least total overlapped score
among those where r would outrank every overlapped replica, else the least total overlapped
score. No candidate: the replica is skipped (the planner never evicts).

A split unit (:mod:`tidal.cluster.placement_units`) is placed group by group: its prefill group
by the rule above over all nodes, then its decode group by the same rule on the prefill group's
node first (unless ``apart``), else over the other nodes; each group is its own footprint of
its own size for COMPAT. No decode group: the replica is skipped.

Ablation (e), ``placement`` disabled: models in turn, each on the first ``tp`` GPUs (any, in
id order) of the first node with room that hold no replica of the same model, until the current
model's quota (its N) runs out or it cannot be placed (the artifact counts N without subtracting
existing replicas, and so does this).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations

Group = tuple[int, ...]


@dataclass(eq=False)
class PlanReplica:
    model: int
    tp: int
    gpus: tuple[int, ...]
    score: float = 0.0
    parts: tuple[tuple[int, ...], ...] = ()
    """A split unit's groups (prefill, decode); empty: one group, ``gpus``."""

    def footprints(self) -> list[PlanReplica]:
        """The replica as COMPAT sees it: itself, or one replica per group of a split unit."""
        if not self.parts:
            return [self]
        return [PlanReplica(self.model, len(p), p, self.score) for p in self.parts]


def model_scores(
    pred_avg: float, pred_peak: float, running: int, batch: int, tcold_s: float
) -> tuple[int, int, list[float]]:
    """(nF, nB, scores) of one model (module docstring)."""
    if pred_peak <= 0:
        return 0, 0, []
    n_f = max(math.ceil(pred_avg / batch) - running, 0)
    n_b = max(math.ceil(pred_peak / batch) - running - n_f, 0)
    total = n_f + n_b
    burst = pred_peak / pred_avg if pred_avg > 0 else 1.0
    scores = [tcold_s * math.exp(-i / total) for i in range(n_f)]
    scores += [tcold_s * burst * math.exp(-(n_f + j) / total) for j in range(n_b)]
    return n_f, n_b, scores


def compatible(group: tuple[int, ...], model: int, tp: int, others: list[PlanReplica]) -> bool:
    """COMPAT(S, r) against the replicas touching S."""
    s = set(group)
    for q in others:
        if not s.intersection(q.gpus):
            continue
        if q.model == model:
            return False
        fq = set(q.gpus)
        if (q.tp == tp and fq != s) or (q.tp < tp and not fq <= s) or (q.tp > tp and not s <= fq):
            return False
    return True


def place(
    new: PlanReplica,
    weight_pages: int,
    free: list[int],
    slots_left: list[int],
    covered: list[list[PlanReplica]],
    nodes: list[range],
) -> tuple[int, ...] | None:
    """The group the evict-aware rule picks for ``new`` (or None)."""
    master: tuple[tuple[int, ...], float] | None = None
    low: tuple[tuple[int, ...], float] | None = None
    for node in nodes:
        avail = [g for g in node if free[g] >= weight_pages and slots_left[g] > 0]
        if len(avail) < new.tp:
            continue
        for group in combinations(avail, new.tp):
            touching: list[PlanReplica] = []
            for g in group:
                for q in covered[g]:
                    if q not in touching:
                        touching.append(q)
            if not compatible(group, new.model, new.tp, touching):
                continue
            mx = max((q.score for q in touching), default=0.0)
            total = sum(q.score for q in touching)
            if mx < new.score:
                if master is None or master[1] > total:
                    master = (group, total)
            elif low is None or low[1] > total:
                low = (group, total)
    if master is not None:
        return master[0]
    return low[0] if low is not None else None


def plan_prewarm(
    scores: list[list[float]],
    tps: list[int],
    weight_pages: list[int],
    existing: list[PlanReplica],
    free: list[int],
    slots_left: list[int],
    nodes: list[range],
    smart: bool = True,
    layouts: list[tuple[tuple[int, ...], bool]] | None = None,
) -> list[tuple[int, tuple[int, ...]]]:
    """New replicas to load: (model, GPU group). ``existing`` (warm, loading and backing
    running instances, in order) get their score slots; ``free`` and ``slots_left`` are per GPU
    and are not modified. ``layouts``: per model, its group sizes and whether a split unit's
    groups must sit on different nodes (default: one group of ``tps[m]``)."""
    free = list(free)
    slots_left = list(slots_left)
    covered: list[list[PlanReplica]] = [[] for _ in free]
    seen = [0] * len(scores)
    lay = layouts or [((t,), False) for t in tps]
    for q in existing:
        i = seen[q.model]
        seen[q.model] += 1
        q.score = scores[q.model][i] if i < len(scores[q.model]) else 0.0
        for f in q.footprints():
            for g in f.gpus:
                covered[g].append(f)
    actions: list[tuple[int, tuple[int, ...]]] = []

    def commit(m: int, group: tuple[int, ...], score: float) -> None:
        sizes = lay[m][0]
        parts = _cut(group, sizes) if len(sizes) > 1 else ()
        for f in PlanReplica(m, tps[m], group, score, parts).footprints():
            for g in f.gpus:
                covered[g].append(f)
                free[g] -= weight_pages[m]
                slots_left[g] -= 1
        actions.append((m, group))

    if not smart:
        _first_fit(scores, lay, weight_pages, free, slots_left, covered, nodes, commit)
        return actions

    todo = [
        PlanReplica(m, tps[m], (), scores[m][i])
        for m in range(len(scores))
        for i in range(seen[m], len(scores[m]))
    ]
    todo.sort(key=lambda r: -r.score)
    for r in todo:
        sizes, apart = lay[r.model]
        if len(sizes) == 1:
            group = place(r, weight_pages[r.model], free, slots_left, covered, nodes)
        else:
            group = _place_split(r, sizes, apart, weight_pages[r.model], free, slots_left,
                                 covered, nodes)  # fmt: skip
        if group is not None:
            commit(r.model, group, r.score)
    return actions


def _first_fit(
    scores: list[list[float]],
    lay: list[tuple[tuple[int, ...], bool]],
    weight_pages: list[int],
    free: list[int],
    slots_left: list[int],
    covered: list[list[PlanReplica]],
    nodes: list[range],
    commit: Callable[[int, Group, float], None],
) -> None:
    """Ablation (e) (module docstring): models in turn, each on the first GPUs with room and no
    replica of the same model, until the current model's quota runs out or it cannot be placed."""
    quota = [len(s) for s in scores]
    m = 0
    while quota[m] > 0:
        quota[m] -= 1

        def ok(node: int, size: int, taken: frozenset[int], m: int = m) -> Group | None:
            cand = [g for g in nodes[node] if g not in taken and free[g] >= weight_pages[m]
                    and slots_left[g] > 0 and all(q.model != m for q in covered[g])]
            return tuple(cand[:size]) if len(cand) >= size else None  # fmt: skip

        group = _groups(lay[m], len(nodes), ok)
        if group is None:
            break
        commit(m, group, 0.0)
        m = (m + 1) % len(scores)


def _cut(group: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    out, at = [], 0
    for n in sizes:
        out.append(group[at : at + n])
        at += n
    return tuple(out)


def _groups(
    layout: tuple[tuple[int, ...], bool],
    num_nodes: int,
    pick: Callable[[int, int, frozenset[int]], tuple[int, ...] | None],
) -> tuple[int, ...] | None:
    """First-fit groups of one replica (``tidal.cluster.placement_units.place_groups``'s rule)."""
    sizes, apart = layout
    none: frozenset[int] = frozenset()
    for node_p in range(num_nodes):
        pre = pick(node_p, sizes[0], none)
        if pre is None:
            continue
        if len(sizes) == 1:
            return pre
        order = [k for k in range(num_nodes) if k != node_p]
        for node_d in order if apart else [node_p, *order]:
            dec = pick(node_d, sizes[1], frozenset(pre))
            if dec is not None:
                return pre + dec
    return None


def _place_split(
    r: PlanReplica,
    sizes: tuple[int, ...],
    apart: bool,
    weight_pages: int,
    free: list[int],
    slots_left: list[int],
    covered: list[list[PlanReplica]],
    nodes: list[range],
) -> tuple[int, ...] | None:
    """A split unit's groups by the evict-aware rule (module docstring)."""
    pre = place(PlanReplica(r.model, sizes[0], (), r.score), weight_pages, free, slots_left,
                covered, nodes)  # fmt: skip
    if pre is None:
        return None
    home = next(k for k, node in enumerate(nodes) if pre[0] in node)
    slots = [0 if g in pre else s for g, s in enumerate(slots_left)]
    dec_r = PlanReplica(r.model, sizes[1], (), r.score)
    tries = [] if apart else [[nodes[home]]]
    tries.append([node for k, node in enumerate(nodes) if k != home])
    for where in tries:
        dec = place(dec_r, weight_pages, free, slots, covered, where)
        if dec is not None:
            return pre + dec
    return None
