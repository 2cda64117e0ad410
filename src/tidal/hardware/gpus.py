"""GPU catalog. Dense (non-sparse) tensor throughput, HBM/GDDR bandwidth and size, links.

Sources: ``docs/research/ebplus.md`` §6 (vendor pages; dense = half the sparse marketing
figure). Link bandwidths are per direction. ``price_per_hour`` is an indicative on-demand cloud
price in USD (mid-2026 list prices, rounded); it only feeds the planner's optional $ column.

Memory is counted as the CUDA driver reports it, ``torch.cuda.mem_get_info()[1]`` — the
``total_gpu_memory`` that vLLM multiplies by ``gpu_memory_utilization`` — in GiB (2³⁰ bytes),
not the marketing ``mem_gb``: an "80 GB" H100 reports 79.11 GiB (= 84.9·10⁹ bytes), not 80·10⁹.
Values (``cuda_total_gib``) are read off public vLLM start-up logs ("total_gpu_memory (X GiB)"
/ "Free memory on device (…/X GiB)"): H100 79.11, A100-80GB 79.15, H200 139.81, L40S 44.39,
RTX PRO 6000 94.97. The driver keeps ≈ 0.55–0.62 GiB below ``nvidia-smi``'s MiB total on each
of those; B200 (no log at hand) is nvidia-smi's 183 359 MiB (179.06 GiB) less 0.58 GiB, and the
A40 (46 068 MiB, as the L40S) is taken as the L40S.

B300, GB200 and GB300 are read off ``aiconfigurator_core/systems/<id>.yaml`` of the pinned
``aiconfigurator-core`` package (NVIDIA's Blackwell / Blackwell Ultra datasheets, Apache-2.0):
dense bf16 and FP8 tensor FLOP/s, HBM bandwidth, NVLink (``intra_node_bw``) and PCIe per
direction, and memory as nvidia-smi reports it (275 040 / 189 471 / 284 208 MiB) less the
driver's 0.58 GiB, as for the B200. Their prices are estimates (the B200's $6.0 scaled by
memory, rounded); only the planner's $ column uses them.

``aic_system`` names each GPU's system in those operator tables (``systems/data/<id>``); the
ids are accepted as aliases (``--gpu h100_sxm``). The A40 has no tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidal.core.errors import ConfigError, unknown_name

MAX_BW_TBS = 1000.0
"""Largest what-if bandwidth accepted (TB/s): 100× today's HBM, far past any sweep."""

GIB = float(1 << 30)


@dataclass(frozen=True, slots=True)
class GPUSpec:
    name: str
    bf16_tflops: float
    fp8_tflops: float | None
    mem_bw_tbs: float
    """Peak memory bandwidth, TB/s (1e12 bytes/s)."""
    mem_gb: float
    """Marketing memory capacity, GB (1e9 bytes); the plan uses ``mem_bytes``."""
    pcie_gbs: float
    """Host link bandwidth per direction, GB/s."""
    nvlink_gbs: float
    """GPU-to-GPU bandwidth per direction, GB/s (0: none, peers talk over PCIe)."""
    price_per_hour: float
    cuda_total_gib: float = 0.0
    """Device memory as the CUDA driver reports it, GiB (0: unknown, ``mem_gb``·10⁹ bytes)."""
    aic_system: str = ""
    """The system id of the measured operator tables (``aiconfigurator-core``; "" = none)."""

    @property
    def flops(self) -> float:
        return self.bf16_tflops * 1e12

    @property
    def mem_bw(self) -> float:
        return self.mem_bw_tbs * 1e12

    @property
    def mem_bytes(self) -> float:
        """Bytes the driver reports (``cuda_total_gib`` · 2³⁰): what vLLM's plan starts from."""
        if self.cuda_total_gib > 0:
            return self.cuda_total_gib * GIB
        return self.mem_gb * 1e9

    @property
    def peer_bw(self) -> float:
        """Bytes/s between two GPUs of a node (NVLink when present, else PCIe)."""
        return (self.nvlink_gbs or self.pcie_gbs) * 1e9

    def with_bandwidth(self, mem_bw_tbs: float) -> GPUSpec:
        """A what-if GPU differing only in memory bandwidth (bandwidth sweeps)."""
        from dataclasses import replace

        return replace(self, name=f"{self.name}@{mem_bw_tbs:g}TBs", mem_bw_tbs=mem_bw_tbs)


GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec("h100", 989.0, 1979.0, 3.35, 80.0, 64.0, 450.0, 3.0, 79.11, "h100_sxm"),
        GPUSpec("h200", 989.0, 1979.0, 4.8, 141.0, 64.0, 450.0, 3.8, 139.81, "h200_sxm"),
        GPUSpec("a100-80gb", 312.0, None, 2.039, 80.0, 32.0, 300.0, 1.8, 79.15, "a100_sxm"),
        GPUSpec("l40s", 362.0, 733.0, 0.864, 48.0, 32.0, 0.0, 1.0, 44.39, "l40s"),
        # A40 (Vidur's third profiled GPU): 149.7 TFLOP/s dense bf16, 696 GB/s GDDR6, NVLink
        # bridge 112.5 GB/s for a pair (56.25 per direction).
        GPUSpec("a40", 149.7, None, 0.696, 48.0, 32.0, 56.25, 0.8, 44.39),
        GPUSpec(
            "rtx-pro-6000", 504.0, 1008.0, 1.792, 96.0, 64.0, 0.0, 1.6, 94.97,
            "rtx_pro_6000_server",
        ),
        GPUSpec("b200", 2250.0, 4500.0, 8.0, 180.0, 64.0, 900.0, 6.0, 178.48, "b200_sxm"),
        # systems/b300_sxm.yaml, gb200.yaml, gb300.yaml (module docstring)
        GPUSpec("b300", 2250.0, 4500.0, 7.75, 288.0, 128.0, 900.0, 9.6, 268.01, "b300_sxm"),
        GPUSpec("gb200", 2500.0, 5000.0, 8.0, 186.0, 64.0, 900.0, 6.2, 184.45, "gb200"),
        GPUSpec("gb300", 2500.0, 5000.0, 8.0, 288.0, 64.0, 900.0, 9.6, 276.97, "gb300"),
    )
}  # fmt: skip

GPU_ALIASES: dict[str, str] = {g.aic_system: g.name for g in GPUS.values() if g.aic_system}
"""Operator-table system id → catalog id (``h100_sxm`` → ``h100``)."""


def get_gpu(name: str) -> GPUSpec:
    """Look up a GPU by id; ``name@X`` gives the same GPU with X TB/s of memory bandwidth."""
    base, _, bw = name.partition("@")
    try:
        gpu = GPUS[GPU_ALIASES.get(base, base)]
    except KeyError:
        err = unknown_name("gpu", name, GPUS)
        aliases = ", ".join(sorted(a for a in GPU_ALIASES if a not in GPUS))
        raise ConfigError("gpu", f"unknown value {name!r}", f"{err.fix}; or the tables' ids "
                          f"{aliases}") from None  # fmt: skip
    if bw:
        gpu = gpu.with_bandwidth(_bandwidth(name, bw))
    return gpu


def _bandwidth(name: str, text: str) -> float:
    """The X of ``gpu@XTBs``: a finite number of TB/s in (0, 1000]."""
    fix = f"write GPU@XTBs with X a bandwidth in TB/s in (0, {MAX_BW_TBS:g}], e.g. h100@2TBs"
    try:
        value = float(text.removesuffix("TBs").removesuffix("tbs"))
    except ValueError:
        raise ConfigError("gpu", f"{name!r}: {text!r} is not a bandwidth", fix) from None
    if not 0 < value <= MAX_BW_TBS:  # also refuses nan
        raise ConfigError("gpu", f"{name!r}: memory bandwidth must be > 0 and finite", fix)
    return value
