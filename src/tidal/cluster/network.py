"""The links between a cluster's nodes, for the KV transfers of disaggregated units whose pools
sit on different nodes (``cluster.network``; docs/design/disagg-cluster-nodes.md).

Each node has ``nics_per_node`` NICs (default: one per GPU, as an H100/H200 HGX node's eight
ConnectX-7 400 Gb/s NICs, one per GPU through a PCIe switch); GPU ``g``'s local index ``l``
sends and receives through NIC ``⌊l · nics / gpus_per_node⌋`` of its node, full duplex: a
NIC's send and receive directions are separate links of the kind's per-NIC rate
(:data:`tidal.cluster.links.LINK_KINDS` × efficiency). GPUs that share a NIC share its rate.

A transfer of ``nbytes`` from a prefill engine's GPUs ``src`` to a decode engine's GPUs ``dst``
(:class:`NicFabric`) is ``k = max(|src|, |dst|)`` flows of ``nbytes / k`` — flow ``s`` from
``src[s mod |src|]`` to ``dst[s mod |dst|]`` over (its sender's NIC out, its receiver's NIC in)
— as each GPU of a NIXL / Mooncake transfer moves its own KV shard over its own NIC. All flows
of the cluster share the NICs max-min fairly (:class:`tidal.cluster.transfer.TransferEngine`:
transfers of different units through one NIC queue behind each other's bytes). The transfer
ends ``latency`` after its last flow's last byte. On an idle fabric with one NIC per GPU and
equal TPs that is ``⌈nbytes / k / rate⌉ ns + latency`` (the hand-checked test).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import Field, model_validator

from tidal.cluster.links import LINK_KINDS, LinkSpec, resolve_link
from tidal.cluster.topology import Topology
from tidal.cluster.transfer import TransferEngine
from tidal.core.strict import StrictModel

CallAt = Callable[[int, Callable[[int], None]], None]


class NetworkConfig(StrictModel):
    """``cluster.network``: the link kind between nodes and its constants."""

    link: str = "ib-ndr"
    """Kind of the links between nodes (:data:`tidal.cluster.links.LINK_KINDS`; ``ib-ndr``:
    InfiniBand NDR 400 Gb/s, 50 GB/s and 5 µs per NIC)."""
    bandwidth_gbs: float | None = Field(default=None, gt=0)
    """Line rate per NIC in GB/s (default: the kind's)."""
    latency_us: float | None = Field(default=None, ge=0)
    """One-way latency in µs (default: the kind's)."""
    efficiency: float | None = Field(default=None, gt=0, le=1)
    """Achieved share of the line rate (default 0.8, as ``deployment.kv_transfer``)."""
    nics_per_node: int | None = Field(default=None, ge=1)
    """NICs per node (default: one per GPU)."""

    @model_validator(mode="after")
    def _kind(self) -> NetworkConfig:
        if self.link not in LINK_KINDS:
            raise ValueError(
                f"cluster.network.link: unknown link kind {self.link!r}; valid: "
                + ", ".join(LINK_KINDS)
            )
        return self

    def resolve(self, topo: Topology) -> LinkSpec:
        """The per-NIC link between nodes of ``topo``."""
        return resolve_link(
            self.link, topo.gpu, topo.gpu, topo.num_gpus, self.bandwidth_gbs, self.latency_us,
            self.efficiency, topo.gpus_per_node,
        )  # fmt: skip


class NicFabric:
    """The cluster's NICs as links of one shared :class:`TransferEngine` (module docstring)."""

    def __init__(self, topo: Topology, net: NetworkConfig, call_at: CallAt) -> None:
        self.topo = topo
        self.link = net.resolve(topo)
        per = topo.gpus_per_node
        self.nics = min(net.nics_per_node or per, per)
        rate = self.link.bytes_per_s
        caps: dict[str, float] = {}
        for node in range(topo.num_nodes):
            for n in range(self.nics):
                caps[f"out:{node}:{n}"] = rate
                caps[f"in:{node}:{n}"] = rate
        self.engine = TransferEngine(caps, call_at)

    def nic(self, g: int) -> tuple[int, int]:
        """(node, NIC) of GPU ``g``."""
        per = self.topo.gpus_per_node
        return g // per, (g % per) * self.nics // per

    def send(
        self,
        now_ns: int,
        nbytes: float,
        src: tuple[int, ...],
        dst: tuple[int, ...],
        on_done: Callable[[int], None],
        latency_ns: int,
    ) -> None:
        """Move ``nbytes`` from ``src`` to ``dst`` GPUs; ``on_done(t)`` when the last flow
        lands (its last byte + ``latency_ns``)."""
        k = max(len(src), len(dst))
        left = [k]

        def flow_done(t: int) -> None:
            left[0] -= 1
            if left[0] == 0:
                on_done(t)

        for s in range(k):
            (ns, a), (nd, b) = self.nic(src[s % len(src)]), self.nic(dst[s % len(dst)])
            path = (f"out:{ns}:{a}", f"in:{nd}:{b}")
            self.engine.start(now_ns, nbytes / k, path, flow_done, latency_ns=latency_ns)

    def ideal_rate(self, src: tuple[int, ...], dst: tuple[int, ...]) -> float:
        """Bytes/s of one transfer alone on the fabric: its distinct NICs on the narrower side."""
        nics = min(len({self.nic(g) for g in src}), len({self.nic(g) for g in dst}))
        return nics * self.link.bytes_per_s


class UnitNics:
    """A unit's view of the fabric with the ``start`` of a :class:`TransferEngine` its
    :class:`~tidal.sim.disagg_wiring.DisaggWiring` calls: path ``(tx:p{i}, rx:d{j})`` is
    prefill engine i's GPUs to decode engine j's."""

    def __init__(self, fabric: NicFabric, ports: dict[str, tuple[int, ...]]) -> None:
        self.fabric = fabric
        self.ports = ports
        """``tx:p{i}`` / ``rx:d{j}`` → that engine's GPUs."""

    def start(
        self,
        now_ns: int,
        nbytes: float,
        links: tuple[str, ...],
        on_done: Callable[[int], None],
        max_rate: float = math.inf,
        latency_ns: int = 0,
    ) -> None:
        tx, rx = links
        self.fabric.send(now_ns, nbytes, self.ports[tx], self.ports[rx], on_done, latency_ns)


def engine_gpus(gpus: tuple[int, ...], engines: int, tp: int) -> list[tuple[int, ...]]:
    """``engines`` consecutive groups of ``tp`` GPUs of ``gpus`` (a pool's engines)."""
    return [gpus[i * tp : (i + 1) * tp] for i in range(engines)]
