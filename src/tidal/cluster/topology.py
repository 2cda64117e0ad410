"""Cluster topology: ``NxG:gpu`` = N nodes of G GPUs each (e.g. ``2x8:h100``,
docs/research/warmserve.md §1.3).

GPUs are numbered globally, node-major: GPU ``g`` lives on node ``g // gpus_per_node``. Links per
GPU come from the GPU catalog (:mod:`tidal.hardware.gpus`); the host-to-GPU load bandwidth and the
SSD bandwidth are configuration (docs/research/warmserve.md §4.3) because they are effective, not
peak, figures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import GPUSpec, get_gpu

_SPEC = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*:\s*([\w.@-]+)\s*$")


@dataclass(frozen=True)
class Topology:
    num_nodes: int
    gpus_per_node: int
    gpu: GPUSpec

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def node_of(self, g: int) -> int:
        return g // self.gpus_per_node

    def gpus_of(self, node: int) -> range:
        return range(node * self.gpus_per_node, (node + 1) * self.gpus_per_node)


def parse_cluster(spec: str) -> Topology:
    """``"2x8:h100"`` → 2 nodes × 8 H100s. Raises a ``ConfigError`` naming the format."""
    m = _SPEC.match(spec)
    if not m:
        raise ConfigError("cluster", f"cannot read {spec!r}", "write NODESxGPUS:GPU, e.g. 2x8:h100")
    nodes, per, gpu = int(m.group(1)), int(m.group(2)), m.group(3)
    if nodes < 1 or per < 1:
        raise ConfigError("cluster", f"{spec!r} has no GPUs", "use at least 1x1")
    return Topology(nodes, per, get_gpu(gpu))
