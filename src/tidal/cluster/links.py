"""Links between the prefill and the decode pool of a disaggregated deployment
(docs/design/disaggregation-speculation.md §1.2).

A link kind has a per-GPU line rate (each GPU sends or receives its own KV shard over its own
NVLink port or NIC, as NIXL and Mooncake do) and a one-way latency; ``efficiency`` scales the
line rate to the rate a transfer achieves. The constants are assumptions until measured (design
§7.2) and are printed in ``summary.json``:

=========  ==========================  ==========  =========================================
kind       bandwidth per GPU (GB/s)    latency µs  what
=========  ==========================  ==========  =========================================
nvlink     the GPU's ``nvlink_gbs``    2           both pools in one NVLink node
ib-ndr     50 (400 Gb/s NIC)           5           InfiniBand NDR, one NIC per GPU
ib-xdr     100 (800 Gb/s NIC)          5           InfiniBand XDR / ConnectX-8
roce-400   50 (400 Gb/s NIC)           10          RoCE v2 over 400 GbE
eth-100    12.5 (100 Gb/s NIC)         30          TCP over 100 GbE (NIXL's TCP backend)
pcie       the GPU's ``pcie_gbs``      5           through host memory
=========  ==========================  ==========  =========================================

``auto`` picks ``nvlink`` when every GPU of both pools fits one node (``gpus_per_node``), both
pools run on the same GPU type and it has NVLink; otherwise ``ib-ndr``.

The :class:`~tidal.cluster.transfer.TransferEngine` links of a deployment
(:func:`pool_links`): ``tx:p{i}`` — prefill instance i sends over its ``tp_p`` GPUs' ports, and
``rx:d{j}`` — decode instance j receives over its ``tp_d`` GPUs' ports; a transfer's path is
``(tx:p{i}, rx:d{j})``, so transfers from one prefill instance, or into one decode instance,
share its ports max-min fairly.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import GPUSpec

LINK_KINDS: dict[str, tuple[float | None, float, str]] = {
    "nvlink": (None, 2.0, "nvlink_gbs"),
    "ib-ndr": (50.0, 5.0, ""),
    "ib-xdr": (100.0, 5.0, ""),
    "roce-400": (50.0, 10.0, ""),
    "eth-100": (12.5, 30.0, ""),
    "pcie": (None, 5.0, "pcie_gbs"),
}
"""Kind → (GB/s per GPU, or None: the GPU's own field named third; one-way latency µs)."""

DEFAULT_EFFICIENCY = 0.8
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class LinkSpec:
    """One resolved link: achieved bytes/s per GPU and one-way latency (ns)."""

    kind: str
    line_gbs: float
    """Line rate per GPU, GB/s (10⁹ bytes/s)."""
    efficiency: float
    latency_ns: int

    @property
    def bytes_per_s(self) -> float:
        """Achieved rate of one GPU's port: line rate × efficiency."""
        return self.line_gbs * 1e9 * self.efficiency

    def summary(self) -> dict[str, float | str]:
        return {
            "kv_link": self.kind,
            "kv_link_gbs_per_gpu": self.line_gbs,
            "kv_link_efficiency": self.efficiency,
            "kv_link_latency_us": self.latency_ns / 1e3,
        }


def auto_kind(gpu_p: GPUSpec, gpu_d: GPUSpec, total_gpus: int, per_node: int) -> str:
    """``nvlink`` when both pools fit one NVLink node of one GPU type, else ``ib-ndr``."""
    same = gpu_p.name == gpu_d.name and gpu_p.nvlink_gbs > 0
    return "nvlink" if same and total_gpus <= per_node else "ib-ndr"


def resolve_link(
    kind: str,
    gpu_p: GPUSpec,
    gpu_d: GPUSpec,
    total_gpus: int,
    bandwidth_gbs: float | None = None,
    latency_us: float | None = None,
    efficiency: float | None = None,
    per_node: int = GPUS_PER_NODE,
) -> LinkSpec:
    """The link of ``kind`` (or ``auto``) between the pools; the three overrides replace the
    kind's constants. A GPU-dependent kind uses the slower of the two GPUs' ports."""
    if kind == "auto":
        kind = auto_kind(gpu_p, gpu_d, total_gpus, per_node)
    if kind not in LINK_KINDS:
        raise ConfigError(
            "deployment.kv_transfer.link",
            f"unknown link kind {kind!r}",
            f"valid: auto, {', '.join(LINK_KINDS)}",
        )
    gbs, lat, field = LINK_KINDS[kind]
    if gbs is None:
        gbs = min(getattr(gpu_p, field), getattr(gpu_d, field))
        if gbs <= 0:
            raise ConfigError(
                "deployment.kv_transfer.link",
                f"{kind}: {gpu_p.name} or {gpu_d.name} has no {kind} ports",
                "pick another link kind (ib-ndr, roce-400 …) or give bandwidth_gbs",
            )
    if bandwidth_gbs is not None:
        gbs = bandwidth_gbs
    if latency_us is not None:
        lat = latency_us
    eff = DEFAULT_EFFICIENCY if efficiency is None else efficiency
    return LinkSpec(kind, float(gbs), float(eff), round(lat * 1e3))


def pool_links(
    link: LinkSpec, prefill: int, tp_p: int, decode: int, tp_d: int
) -> dict[str, float]:
    """TransferEngine capacities (bytes/s): ``tx:p{i}`` = tp_p ports, ``rx:d{j}`` = tp_d."""
    out = {f"tx:p{i}": tp_p * link.bytes_per_s for i in range(prefill)}
    out.update({f"rx:d{j}": tp_d * link.bytes_per_s for j in range(decode)})
    return out


def kv_transfer_bytes(kv_bytes_per_token_per_gpu: float, tp_d: int, tokens: int) -> float:
    """Bytes landing on the decode instance's ``tp_d`` GPUs for ``tokens`` prompt tokens."""
    return tokens * kv_bytes_per_token_per_gpu * tp_d
