"""Model catalog: architectures → parameter bytes, FLOPs per token, KV bytes per token.

Architectures are the published configs (Hugging Face ``config.json`` of each model). Counts
follow the usual dense-transformer arithmetic: a matmul of an ``a×b`` weight costs ``2ab`` FLOPs
per token; attention over a context of ``s`` tokens costs ``4·d_head·n_heads·s`` FLOPs per token
per layer (QKᵀ and PV); the KV cache stores ``2·n_kv_heads·d_head`` values per token per layer.

Beyond the catalog, :func:`get_model` reads any Hugging Face config of the supported
architectures (:mod:`tidal.hardware.hf_config`): MoE with shared experts and leading dense
layers, sliding-window layers, MLA and DSA attention, Gated DeltaNet linear-attention layers
(their arithmetic: :mod:`tidal.hardware.model_math`), and quantized weights and KV
(:mod:`tidal.hardware.precision`). Every field they add defaults to what the catalog's models
were before, so those are unchanged to the byte.
"""

from __future__ import annotations

from tidal.core.errors import ConfigError, unknown_name
from tidal.hardware.hf_config import is_model_ref, load_hf_model
from tidal.hardware.model_spec import ModelSpec
from tidal.hardware.precision import apply_precision

__all__ = ["MODELS", "ModelSpec", "check_tp", "get_model"]


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, max_context=4096),
        ModelSpec("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, max_context=4096),
        ModelSpec("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, max_context=4096),
        ModelSpec("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, max_context=131072),
        ModelSpec("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, max_context=131072),
        ModelSpec(
            "qwen3-8b", 36, 4096, 32, 8, 12288, 151936, head_dim=128, max_context=40960,
            qk_norm=True,
        ),
        ModelSpec(
            "qwen3-30b-a3b",
            48,
            2048,
            32,
            4,
            768,
            151936,
            head_dim=128,
            num_experts=128,
            num_active_experts=8,
            max_context=40960,
            qk_norm=True,
        ),
        ModelSpec("mistral-7b", 32, 4096, 32, 8, 14336, 32000, max_context=32768),
        # Models of the augmented-request papers (InferCept / AugServe evaluations).
        ModelSpec("gpt-j-6b", 28, 4096, 16, 16, 16384, 50400, gated_mlp=False, max_context=2048),
        ModelSpec("vicuna-13b", 40, 5120, 40, 40, 13824, 32000, max_context=4096),
        # Models of Vidur's public GPU profiles (data/profiles, HF config.json of each).
        ModelSpec("codellama-34b", 48, 8192, 64, 8, 22016, 32000, max_context=16384),
        ModelSpec("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, max_context=8192),
        ModelSpec("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, max_context=8192),
        ModelSpec("qwen-72b", 80, 8192, 64, 64, 24576, 152064, max_context=32768),
        ModelSpec("internlm-20b", 60, 5120, 40, 40, 13824, 103168, max_context=4096),
        ModelSpec("phi-2", 32, 2560, 32, 32, 10240, 51200, gated_mlp=False, max_context=2048),
        # The real engine's test and CPU model (``tidal serve --model tiny-llama``): a 4-layer
        # Llama (GQA 8/2 heads, SwiGLU) that runs in milliseconds on a CPU, float32.
        ModelSpec("tiny-llama", 4, 256, 8, 2, 768, 512, max_context=4096, dtype_bytes=4),
    )
}


def check_tp(model: ModelSpec, tp: int, field: str = "tp") -> None:
    """vLLM's tensor-parallel rule (``QKVParallelLinear``): the attention heads split evenly,
    ``num_heads % tp == 0``; KV heads split evenly when ``tp ≤ num_kv_heads``
    (``num_kv_heads % tp == 0``), else each is replicated on ``tp / num_kv_heads`` ranks, so
    ``tp % num_kv_heads == 0``; Gated DeltaNet key and value heads split evenly. Raises
    :class:`ConfigError` naming the valid degrees."""
    h, kv = model.num_heads, model.num_kv_heads
    lin = (model.linear_num_key_heads, model.linear_num_value_heads)

    def ok(t: int) -> bool:
        kv_ok = kv % t == 0 if t <= kv else t % kv == 0
        return h % t == 0 and kv_ok and all(n % t == 0 for n in lin if n)

    if tp >= 1 and ok(tp):
        return
    linear = f" and {lin[0]}/{lin[1]} linear-attention key/value heads" if any(lin) else ""
    raise ConfigError(
        field,
        f"tensor parallelism {tp} does not divide {model.name}'s {h} attention heads and "
        f"{kv} KV heads{linear} (vLLM splits heads evenly; KV heads replicate when tp > {kv})",
        "valid: " + ", ".join(str(t) for t in range(1, h + 1) if ok(t)),
    )


def get_model(
    name: str,
    *,
    quantization: str | None = None,
    kv_cache_dtype: str | None = None,
    gemm_quant: str | None = None,
    moe_quant: str | None = None,
) -> ModelSpec:
    """The one place a model name is resolved: a catalog id, a Hugging Face repo id whose
    config ``aiconfigurator-core`` ships, or a path to a ``config.json`` / model directory
    (:mod:`tidal.hardware.hf_config`); then the precision flags, vLLM's ``--quantization`` and
    ``--kv-cache-dtype`` and Tidal's per-part ``gemm_quant`` / ``moe_quant``, over the
    checkpoint's own (:func:`tidal.hardware.precision.apply_precision`)."""
    spec = MODELS.get(name)
    if spec is None:
        if not is_model_ref(name):
            raise unknown_name("model", name, [*MODELS, "<org/name>", "<path/to/config.json>"])
        spec = load_hf_model(name)
    if quantization is kv_cache_dtype is gemm_quant is moe_quant is None:
        return spec
    return apply_precision(spec, quantization, kv_cache_dtype, gemm_quant, moe_quant)
