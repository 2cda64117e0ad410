"""Memory checked before the engine allocates (issue 32 §13): a 70B catalog model on a CPU
host, or ``--kv-cache-gb 1e6``, is a named error stating what is needed and what is free —
not an out-of-memory kill or a torch traceback minutes later."""

from __future__ import annotations

from typing import Any

from tidal.core.errors import ConfigError

GB = 1e9


def param_count(c: Any) -> int:
    """Parameters of a dense Llama decoder of :class:`tidal.runtime.model.LlamaConfig` ``c``."""
    h, hd = c.hidden_size, c.head_dim
    attn = h * c.num_heads * hd * 2 + h * c.num_kv_heads * hd * 2
    mlp = 3 * h * c.intermediate_size
    embed = c.vocab_size * h * (1 if c.tie_embeddings else 2)
    return int(c.num_layers * (attn + mlp + 2 * h) + embed + h)


def host_available_bytes() -> int | None:
    """``MemAvailable`` of /proc/meminfo (None: unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def device_available_bytes(device: Any) -> int | None:
    """Free memory of a CUDA device (None: not CUDA, or unknown)."""
    import torch  # lazy: optional dependency (torch)

    if getattr(device, "type", str(device)) != "cuda":
        return None
    try:
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    except (RuntimeError, AssertionError):
        return None


def check_fits(what: str, field: str, need: float, free: int | None, fix: str) -> None:
    """Refuse ``need`` bytes where ``free`` are available (unknown: no check)."""
    if free is not None and need > free:
        raise ConfigError(
            field,
            f"{what} needs {need / GB:,.1f} GB, and {free / GB:,.1f} GB are free",
            fix,
        )


def check_engine_memory(
    lcfg: Any, dtype_bytes: int, kv_bytes: float, device: Any, model_field: str = "model"
) -> None:
    """The weights (built in float32 on the host, then cast and moved) and the KV cache fit."""
    params = param_count(lcfg)
    on_cuda = getattr(device, "type", str(device)) == "cuda"
    host = host_available_bytes()
    fix = "choose a smaller model (e.g. tiny-llama), or a machine with more memory"
    check_fits(f"{lcfg.name} ({params / 1e9:.2f} B parameters, built in float32)", model_field,
               params * 4, host, fix)  # fmt: skip
    kv_fix = "lower --kv-cache-gb (or --num-kv-blocks)"
    if not on_cuda:
        free = None if host is None else host - params * dtype_bytes
        check_fits("the KV cache", "kv_cache_gb", kv_bytes, free, kv_fix)
        return
    free = device_available_bytes(device)
    check_fits(f"{lcfg.name}'s weights on {device}", model_field, params * dtype_bytes, free, fix)
    if free is not None:
        check_fits("the KV cache", "kv_cache_gb", kv_bytes, free - params * dtype_bytes, kv_fix)
