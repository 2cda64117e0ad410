"""KV sizing of an instance's GPU group, and what a disaggregated unit's prefill engines get
(docs/design/disagg-cluster-composition.md §B).

An aggregated instance, or a unit whose engines share one TP, gets the same KV pages on every
GPU of its group: ``params.kv_pages``, default the least free over the group. A unit with
per-pool TP (``id:TPp/TPd:PpDd``) sizes each pool on its own GPUs — the prefill GPUs hold the
larger shard when tp_p < tp_d — as each engine of a real deployment takes what is left on its
own GPUs (vLLM's ``gpu_memory_utilization`` per engine): prefill blocks ``⌊free_p /
block_pages_p⌋`` on the prefill GPUs, decode blocks ``⌊free_d / block_pages_d⌋`` on the decode
GPUs, each engine of a pool a KV cache of that many blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidal.cluster.memory import ClusterMemory
from tidal.cluster.models import ServedModel
from tidal.hardware.perf import PerfModel

Parts = list[tuple[tuple[int, ...], int]]


@dataclass(frozen=True)
class UnitParts:
    """A unit's prefill engines: their KV blocks each and their step-time model (the decode
    engines get the instance's KV cache size and step model)."""

    prefill_blocks: int
    prefill_perf: PerfModel
    gpus: tuple[int, ...] = ()
    """The unit's GPUs (prefill group first): where its KV transfers run
    (:mod:`tidal.cluster.network` when its pools sit on two nodes)."""


@dataclass(frozen=True)
class KVPlan:
    blocks: int
    """KV blocks of the (decode) engines' caches."""
    prefill_blocks: int
    """KV blocks of a unit's prefill engine (``blocks`` unless the pools' TP differ)."""
    pages: int
    """KV pages per decode GPU (``ModelInstance.kv_pages``)."""
    parts: Parts
    """KV pages per GPU over the group: ``[(GPUs, pages)]``."""


def plan_kv(
    memory: ClusterMemory,
    model: ServedModel,
    gpus: tuple[int, ...],
    kv_pages: int | None,
    max_model_len: int,
) -> KVPlan:
    """The instance's KV on ``gpus`` (its weights already allocated; module docstring).
    Raises when an engine's cache cannot hold one ``max_model_len``-token request."""
    split = model.weight_split(gpus)
    sizes = [model.prefill_block_pages, model.block_pages][-len(split) :]
    blocks: list[int] = []
    for (part, _), bp in zip(split, sizes, strict=True):
        free = min(memory.free(g) for g in part) if kv_pages is None else kv_pages
        n = free // bp
        if n * model.block_size < max_model_len:
            raise RuntimeError(
                f"{model.name} on GPUs {gpus}: {n} KV blocks cannot hold one "
                f"{max_model_len}-token request"
            )
        blocks.append(n)
    parts = [(part, n * bp) for (part, _), n, bp in zip(split, blocks, sizes, strict=True)]
    return KVPlan(blocks[-1], blocks[0], parts[-1][1], parts)
