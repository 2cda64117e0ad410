"""Model catalog: architectures → parameter bytes, FLOPs per token, KV bytes per token.

Architectures are the published configs (Hugging Face ``config.json`` of each model). Counts
follow the usual dense-transformer arithmetic: a matmul of an ``a×b`` weight costs ``2ab`` FLOPs
per token; attention over a context of ``s`` tokens costs ``4·d_head·n_heads·s`` FLOPs per token
per layer (QKᵀ and PV); the KV cache stores ``2·n_kv_heads·d_head`` values per token per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidal.core.errors import ConfigError, unknown_name


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    head_dim: int = 0
    """0 means hidden_size / num_heads."""
    gated_mlp: bool = True
    """SwiGLU (3 matrices) vs a plain 2-matrix MLP (GPT-J)."""
    num_experts: int = 0
    """MoE routed experts per layer (0 = dense)."""
    num_active_experts: int = 0
    tie_embeddings: bool = False
    max_context: int = 4096
    dtype_bytes: int = 2

    # ----------------------------------------------------------------- shapes
    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def attn_params_per_layer(self) -> int:
        h, d = self.hidden_size, self.d_head
        q = h * self.num_heads * d
        kv = 2 * h * self.num_kv_heads * d
        o = self.num_heads * d * h
        return q + kv + o

    @property
    def expert_params(self) -> int:
        """Parameters of one MLP (one expert for MoE)."""
        mats = 3 if self.gated_mlp else 2
        return mats * self.hidden_size * self.intermediate_size

    @property
    def mlp_params_per_layer(self) -> int:
        if self.is_moe:
            return self.num_experts * self.expert_params + self.hidden_size * self.num_experts
        return self.expert_params

    @property
    def active_mlp_params_per_layer(self) -> int:
        if self.is_moe:
            return (
                self.num_active_experts * self.expert_params + self.hidden_size * self.num_experts
            )
        return self.expert_params

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        per_layer = self.attn_params_per_layer + self.mlp_params_per_layer + 2 * self.hidden_size
        head = 0 if self.tie_embeddings else self.embedding_params
        return self.num_layers * per_layer + self.embedding_params + head + self.hidden_size

    @property
    def weight_bytes(self) -> int:
        return self.num_params * self.dtype_bytes

    # ----------------------------------------------------------------- per token
    @property
    def layer_matmul_params(self) -> int:
        """Matmul parameters touched per token in all layers (active experts only), no LM head."""
        return self.num_layers * (self.attn_params_per_layer + self.active_mlp_params_per_layer)

    @property
    def linear_flops_per_token(self) -> int:
        return 2 * self.layer_matmul_params

    @property
    def head_flops_per_token(self) -> int:
        """LM-head FLOPs, paid only for positions whose logits are sampled."""
        return 2 * self.embedding_params

    @property
    def flops_per_token(self) -> int:
        """Dense FLOPs per generated token without attention (layers + LM head)."""
        return self.linear_flops_per_token + self.head_flops_per_token

    @property
    def attn_flops_per_ctx_token(self) -> int:
        """Attention FLOPs of one query token per context token, all layers (QKᵀ + PV)."""
        return 4 * self.num_layers * self.num_heads * self.d_head

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.d_head * self.dtype_bytes

    def kv_bytes_per_token_per_gpu(self, tp: int) -> float:
        """KV heads are split over TP ranks; when tp > n_kv_heads, each rank keeps a replica."""
        heads = max(self.num_kv_heads / tp, 1.0)
        return 2 * self.num_layers * heads * self.d_head * self.dtype_bytes

    @property
    def non_expert_weight_bytes(self) -> int:
        expert = self.num_layers * self.num_experts * self.expert_params if self.is_moe else 0
        return self.weight_bytes - expert * self.dtype_bytes


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, max_context=4096),
        ModelSpec("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, max_context=4096),
        ModelSpec("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, max_context=4096),
        ModelSpec("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, max_context=131072),
        ModelSpec("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, max_context=131072),
        ModelSpec("qwen3-8b", 36, 4096, 32, 8, 12288, 151936, head_dim=128, max_context=40960),
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
    ``tp % num_kv_heads == 0``. Raises :class:`ConfigError` naming the valid degrees."""
    h, kv = model.num_heads, model.num_kv_heads
    kv_ok = kv % tp == 0 if tp <= kv else tp % kv == 0
    if tp >= 1 and h % tp == 0 and kv_ok:
        return
    valid = [t for t in range(1, h + 1) if h % t == 0 and (kv % t == 0 if t <= kv else t % kv == 0)]
    raise ConfigError(
        field,
        f"tensor parallelism {tp} does not divide {model.name}'s {h} attention heads and "
        f"{kv} KV heads (vLLM splits heads evenly; KV heads replicate when tp > {kv})",
        "valid: " + ", ".join(map(str, valid)),
    )


def get_model(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise unknown_name("model", name, MODELS) from None
