"""GPU memory budget of one instance: weights, activation reserve, and what is left for KV."""

from __future__ import annotations

from dataclasses import dataclass

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import GPUSpec
from tidal.hardware.models import ModelSpec


@dataclass(frozen=True)
class MemoryPlan:
    weight_bytes_per_gpu: float
    reserve_bytes_per_gpu: float
    kv_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    block_size: int
    num_blocks: int

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size


def plan_memory(
    model: ModelSpec,
    gpu: GPUSpec,
    tp: int = 1,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    activation_reserve_gb: float = 3.0,
    min_tokens: int = 0,
) -> MemoryPlan:
    """KV blocks = ⌊(util·HBM − weights/TP − reserve) / (block_size · KV bytes per token per GPU)⌋.

    The reserve stands for activations, CUDA graphs and the allocator's slack (vLLM profiles it;
    ebplus.md §7 Q12 suggests ≈3 GiB for an 8B model). Raises a ``ConfigError`` stating the
    numbers when the weights do not fit or the KV cache cannot hold ``min_tokens``.
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise ConfigError("gpu_memory_utilization", "must be in (0, 1]", "e.g. 0.9")
    weights = model.weight_bytes / tp
    reserve = activation_reserve_gb * 1e9
    usable = gpu.mem_bytes * gpu_memory_utilization
    kv = usable - weights - reserve
    per_tok = model.kv_bytes_per_token_per_gpu(tp)
    blocks = int(kv // (per_tok * block_size)) if kv > 0 else 0
    if blocks * block_size < max(min_tokens, block_size):
        raise ConfigError(
            "model",
            f"{model.name} does not fit on {tp}× {gpu.name}: usable {usable / 1e9:.1f} GB per GPU "
            f"({gpu_memory_utilization:g} × {gpu.mem_gb:g} GB) − weights {weights / 1e9:.1f} GB − "
            f"reserve {reserve / 1e9:.1f} GB leaves {max(kv, 0) / 1e9:.2f} GB for KV = "
            f"{blocks * block_size} tokens, but one request needs {min_tokens} tokens",
            "use more tensor parallelism (--tp), a larger GPU, or cap the lengths",
        )
    return MemoryPlan(weights, reserve, kv, per_tok, block_size, blocks)
