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
    """One transfer per shard over the GPU's host link (after the node's SSD link when the
    checkpoint is not in its DRAM); ``on_done`` after the slowest shard plus the serial
    extras of the policy (group creation, page mapping without memory switching)."""
    node = ctl.topo.node_of(gpus[0])
    from_ssd = not ctl.policy.in_dram(model, node)
    extra_s = ctl.policy.load_extra_s(model)
    left = [len(gpus)]
    cap = ctl.policy.load_rate_cap()

    def shard_done(t: int) -> None:
        left[0] -= 1
        if left[0] == 0:
            if from_ssd:
                ctl.dram[node].add(model.index)
            ctl.at(t + s_to_ns(extra_s), on_done)

    out = []
    for i, g in enumerate(gpus):  # (a unit with per-pool TP: each GPU its own engine's shard)
        links = (f"ssd:{node}", f"pcie:{g}") if from_ssd else (f"pcie:{g}",)
        out.append(ctl.transfers.start(now_ns, model.shard_bytes_on(i), links, shard_done, cap))
    return out
