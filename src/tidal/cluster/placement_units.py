"""Where an instance's GPUs go: one group of a node, or a split unit's two groups
(docs/design/disagg-cluster-nodes.md).

An aggregated instance, and a unit with ``split`` False, is one group of ``tp`` GPUs inside one
node. A **split** unit (``cluster.unit_pools``, :func:`tidal.cluster.models.served_models`) is
two groups: its prefill pool's P·tp_p GPUs and then its decode pool's D·tp_d GPUs, each a power
of two inside ONE node; the two may sit on different nodes (``apart``: they must). The
instance's ``gpus`` tuple is the prefill group followed by the decode group, so
:meth:`ServedModel.weight_split` (the first P·tp_p GPUs are the prefill engines') holds.

:func:`place_groups` is the one rule every policy uses for a split unit, over the policy's own
way to pick a group on a node (``pick``): the first node (in id order) with a prefill group,
then the decode group on that same node if it has one (NVLink between the pools) — unless
``apart`` — else on the first other node that has one; the first prefill node for which a
decode group exists wins. Deterministic: ``pick`` is a function of the cluster state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tidal.cluster.models import ServedModel
from tidal.cluster.topology import Topology
from tidal.core.errors import ConfigError

Group = tuple[int, ...]
Pick = Callable[[int, int, frozenset[int]], Group | None]
"""``pick(node, size, taken)``: a group of ``size`` GPUs of ``node`` avoiding ``taken``, or None."""


def split_gpus(model: ServedModel, gpus: Sequence[int]) -> list[Group]:
    """The instance's ``gpus`` cut into its groups (:attr:`ServedModel.groups`)."""
    out, at = [], 0
    for n in model.groups:
        out.append(tuple(gpus[at : at + n]))
        at += n
    assert at == len(gpus), f"{model.name}: {len(gpus)} GPUs for groups {model.groups}"
    return out


def place_groups(model: ServedModel, num_nodes: int, pick: Pick) -> Group | None:
    """The instance's GPUs by the module's rule (None: no placement now)."""
    none: frozenset[int] = frozenset()
    if not model.split:
        for node in range(num_nodes):
            group = pick(node, model.tp, none)
            if group is not None:
                return group
        return None
    size_p, size_d = model.groups
    for node_p in range(num_nodes):
        pre = pick(node_p, size_p, none)
        if pre is None:
            continue
        order = [k for k in range(num_nodes) if k != node_p]
        if not model.apart:
            order.insert(0, node_p)
        for node_d in order:
            dec = pick(node_d, size_d, frozenset(pre))
            if dec is not None:
                return pre + dec
    return None


def first_free(topo: Topology, free: Callable[[int], bool]) -> Pick:
    """A :data:`Pick` of the first ``size`` GPUs of the node (id order) that pass ``free``."""

    def pick(node: int, size: int, taken: frozenset[int]) -> Group | None:
        ok = [g for g in topo.gpus_of(node) if g not in taken and free(g)]
        return tuple(ok[:size]) if len(ok) >= size else None

    return pick


def aligned_free(topo: Topology, free: Callable[[int], bool]) -> Pick:
    """A :data:`Pick` of the first group of the node aligned to its size (offsets 0, size,
    2·size, …) whose GPUs all pass ``free`` — groups of equal size never straddle."""

    def pick(node: int, size: int, taken: frozenset[int]) -> Group | None:
        base, per = node * topo.gpus_per_node, topo.gpus_per_node
        for off in range(0, per - size + 1, size):
            group = tuple(range(base + off, base + off + size))
            if all(g not in taken and free(g) for g in group):
                return group
        return None

    return pick


def nodes_of(topo: Topology, gpus: Sequence[int]) -> list[int]:
    """The distinct nodes of ``gpus`` in order of first appearance."""
    out: list[int] = []
    for g in gpus:
        k = topo.node_of(g)
        if k not in out:
            out.append(k)
    return out


def check_placeable(models: Sequence[ServedModel], topo: Topology) -> None:
    """Raise a ``ConfigError`` naming the model when even an empty cluster has no placement
    for one of its instances (e.g. ``unit_pools: apart`` on one node)."""
    for m in models:
        if place_groups(m, topo.num_nodes, first_free(topo, lambda g: True)) is None:
            how = "on different nodes" if m.apart else "inside nodes"
            fix = "use more nodes or smaller pools"
            raise ConfigError(
                "cluster.models (--models)",
                f"{m.name}: no placement of its GPU groups {m.groups} {how} on "
                f"{topo.num_nodes} node(s) of {topo.gpus_per_node} GPUs",
                fix + (", or cluster.unit_pools: auto" if m.apart else ""),
            )
