"""Loading a model's weight shards onto GPUs as transfers (docs/research/warmserve.md §4.3): one per
shard over the GPU's host link, after the node's SSD link when the checkpoint is not in host
DRAM."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tidal.cluster.models import ServedModel
from tidal.core.units import s_to_ns

if TYPE_CHECKING:
    from tidal.cluster.controller import ClusterController


def load_weights(
    ctl: ClusterController,
    model: ServedModel,
    gpus: tuple[int, ...],
    owner: tuple[str, int],
    now_ns: int,
    on_done: Callable[[int], None],
) -> list:
    """One transfer per shard over the GPU's host link (after its node's SSD link when the
    checkpoint is not in that node's DRAM; a split unit spans two nodes); ``on_done`` after
    the slowest shard plus the serial extras of the policy (group creation, page mapping
    without memory switching)."""
    nodes = sorted({ctl.topo.node_of(g) for g in gpus})  # (a split unit: two nodes)
    from_ssd = {k: not ctl.policy.in_dram(model, k) for k in nodes}
    extra_s = ctl.policy.load_extra_s(model)
    left = [len(gpus)]
    cap = ctl.policy.load_rate_cap()

    def shard_done(t: int) -> None:
        left[0] -= 1
        if left[0] == 0:
            for k in nodes:
                if from_ssd[k]:
                    ctl.dram[k].add(model.index)
            ctl.at(t + s_to_ns(extra_s), on_done)

    out = []
    for i, g in enumerate(gpus):  # (a unit with per-pool TP: each GPU its own engine's shard)
        node = ctl.topo.node_of(g)
        links = (f"ssd:{node}", f"pcie:{g}") if from_ssd[node] else (f"pcie:{g}",)
        out.append(ctl.transfers.start(now_ns, model.shard_bytes_on(i), links, shard_done, cap))
    return out
