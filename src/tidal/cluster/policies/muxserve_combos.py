"""The mesh combinations MuxServe's placement optimiser searches (docs/research/warmserve.md
§3.5 B-MX): each node split into power-of-two meshes (:func:`node_splits`, MuxServe's
``generate_candidate_clusters`` order), and the node splits combined with replacement under a
bound on the number of meshes (:func:`bounded_combos`). Re-exported by
:mod:`tidal.cluster.policies.muxserve_plan`.
"""

from __future__ import annotations

from collections.abc import Iterator


def node_splits(gpus: int) -> list[list[int]]:
    """Partitions of a node into non-increasing powers of two, largest meshes first (for 8
    GPUs exactly MuxServe's ``generate_candidate_clusters`` list, in its order)."""
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


def bounded_combos(
    splits: list[tuple[int, ...]], nodes: int, max_meshes: int
) -> Iterator[tuple[tuple[int, ...], ...]]:
    """``combinations_with_replacement(splits, nodes)`` with at most ``max_meshes`` meshes in
    all, in the same (lexicographic) order, without visiting the rest: a prefix is cut once
    its meshes plus the fewest the remaining nodes can add exceed the bound. The plain
    product has C(|splits| + nodes − 1, nodes) members (3.5·10⁸ for 32 nodes of 8 GPUs), of
    which only those with ≤ one mesh per model can hold a placement."""
    fewest = [min(len(s) for s in splits[i:]) for i in range(len(splits))]
    acc: list[tuple[int, ...]] = []

    def rec(start: int, left: int, used: int) -> Iterator[tuple[tuple[int, ...], ...]]:
        if left == 0:
            yield tuple(acc)
            return
        for i in range(start, len(splits)):
            if used + len(splits[i]) + (left - 1) * fewest[i] > max_meshes:
                continue
            acc.append(splits[i])
            yield from rec(i, left - 1, used + len(splits[i]))
            acc.pop()

    yield from rec(0, nodes, 0)
