"""``ModelSpec``: one model architecture → parameter bytes, FLOPs per token, KV bytes per token
(the catalog of named models and the resolution of a name: :mod:`tidal.hardware.models`).

Counts follow the usual dense-transformer arithmetic: a matmul of an ``a×b`` weight costs
``2ab`` FLOPs per token; attention over a context of ``s`` tokens costs ``4·d_head·n_heads·s``
FLOPs per token per layer (QKᵀ and PV); the KV cache stores ``2·n_kv_heads·d_head`` values per
token per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidal.hardware.model_math import (
    expert_weight_bytes,
    gdn_params,
    linear_state_bytes_per_layer,
    mla_params,
    quantized_weight_bytes,
)
from tidal.hardware.precision import MODEL_DTYPE, kv_bytes_per_element


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    """Width of a dense MLP (the dense layers of a MoE model; the experts when
    ``moe_intermediate_size`` is 0)."""
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
    # ---- MoE (Hugging Face configs; every default keeps the catalog's models as they were)
    moe_intermediate_size: int = 0
    """Width of one routed expert (0: ``intermediate_size``)."""
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0
    """Total width of the always-active shared-expert MLP (0: none)."""
    num_dense_layers: int = 0
    """Layers with a dense MLP of ``intermediate_size`` in a MoE model (DeepSeek's
    ``first_k_dense_replace``, Qwen's ``mlp_only_layers``)."""
    # ---- sliding-window layers (gpt-oss)
    sliding_window: int = 0
    num_sliding_layers: int = 0
    """Layers of ``num_layers`` that attend to the last ``sliding_window`` tokens only."""
    # ---- multi-head latent attention (DeepSeek-V3/R1, Kimi-K2) and DSA sparse attention
    kv_lora_rank: int = 0
    """MLA: width of the compressed KV latent (0: not MLA)."""
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    index_topk: int = 0
    """DSA (DeepSeek-V3.2, GLM-5): context tokens each query attends to (0: dense)."""
    index_n_heads: int = 0
    index_head_dim: int = 0
    # ---- hybrid linear attention (Gated DeltaNet layers of Qwen3.5 / Qwen3-Next)
    num_linear_layers: int = 0
    """Layers of ``num_layers`` with a constant-size recurrent state instead of a KV cache."""
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    linear_state_dtype_bytes: int = 0
    """Bytes per element of the recurrent state (0: ``dtype_bytes``; Qwen3.5 keeps float32)."""
    attn_output_gate: bool = False
    """Full-attention layers project a sigmoid output gate beside Q (Qwen3.5, Qwen3-Next)."""
    qk_norm: bool = False
    """Attention layers RMS-normalise every query and key head before RoPE (Qwen3's
    ``q_norm`` / ``k_norm``: two per-head RMSNorms a layer in vLLM's ``Qwen3Attention``)."""
    # ---- precision (operator-table dtype names, :mod:`tidal.hardware.precision`)
    gemm_quant: str = "bfloat16"
    """Weights of every linear layer but the routed experts."""
    moe_quant: str = "bfloat16"
    """Weights of the routed experts."""
    kv_cache_dtype: str = "auto"
    """vLLM ``--kv-cache-dtype``: auto (the model dtype) | bfloat16 | fp8 | fp8_e4m3 | fp8_e5m2."""
    hf_id: str = ""
    architecture: str = ""
    """The config's ``architectures[0]`` (empty for the catalog's models)."""

    # ----------------------------------------------------------------- shapes
    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_inter(self) -> int:
        """Width of one routed expert."""
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def full_attention_layers(self) -> int:
        """Layers whose KV cache grows with the whole context."""
        return self.num_layers - self.num_sliding_layers - self.num_linear_layers

    @property
    def softmax_attention_layers(self) -> int:
        """Layers with softmax attention (full or sliding window)."""
        return self.num_layers - self.num_linear_layers

    @property
    def attn_params_per_layer(self) -> int:
        """Parameters of one softmax-attention layer (Q, K, V, O; MLA's down/up projections and
        DSA's indexer)."""
        h, d = self.hidden_size, self.d_head
        if self.is_mla:
            return mla_params(self)
        gate = 2 if self.attn_output_gate else 1
        q = h * self.num_heads * d * gate
        kv = 2 * h * self.num_kv_heads * d
        o = self.num_heads * d * h
        return q + kv + o

    @property
    def linear_attn_params_per_layer(self) -> int:
        """Parameters of one Gated DeltaNet layer (:func:`~tidal.hardware.model_math.
        gdn_params`)."""
        return gdn_params(self)

    @property
    def attn_params(self) -> int:
        """Attention parameters of all layers."""
        return (
            self.softmax_attention_layers * self.attn_params_per_layer
            + self.num_linear_layers * self.linear_attn_params_per_layer
        )

    @property
    def expert_params(self) -> int:
        """Parameters of one MLP (one routed expert for MoE)."""
        mats = 3 if self.gated_mlp else 2
        return mats * self.hidden_size * self.moe_inter

    @property
    def dense_mlp_params(self) -> int:
        """Parameters of the dense MLP of a dense layer."""
        mats = 3 if self.gated_mlp else 2
        return mats * self.hidden_size * self.intermediate_size

    @property
    def shared_expert_params(self) -> int:
        mats = 3 if self.gated_mlp else 2
        return mats * self.hidden_size * self.shared_intermediate_size

    @property
    def mlp_params_per_layer(self) -> int:
        """Parameters of one MoE layer's MLP (routed + shared experts, router), or of the dense
        MLP of a dense model."""
        if self.is_moe:
            return (
                self.num_experts * self.expert_params
                + self.hidden_size * self.num_experts
                + self.shared_expert_params
            )
        return self.expert_params

    @property
    def active_mlp_params_per_layer(self) -> int:
        """Parameters one token touches in one MoE layer (top-k routed + shared, router)."""
        if self.is_moe:
            return (
                self.num_active_experts * self.expert_params
                + self.hidden_size * self.num_experts
                + self.shared_expert_params
            )
        return self.expert_params

    @property
    def mlp_params(self) -> int:
        """MLP parameters of all layers (dense layers of a MoE model included)."""
        if not self.is_moe:
            return self.num_layers * self.mlp_params_per_layer
        return (
            self.num_dense_layers * self.dense_mlp_params
            + self.num_moe_layers * self.mlp_params_per_layer
        )

    @property
    def routed_expert_params(self) -> int:
        """Parameters of all routed experts of all layers (stored in ``moe_quant``)."""
        return self.num_moe_layers * self.num_experts * self.expert_params

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        norms = self.num_layers * 2 * self.hidden_size
        head = 0 if self.tie_embeddings else self.embedding_params
        return self.attn_params + self.mlp_params + norms + self.embedding_params + head + (
            self.hidden_size
        )

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights: routed experts in ``moe_quant``, the other linear layers in
        ``gemm_quant``, embeddings, LM head, norms and routers in the model dtype."""
        if self.gemm_quant == self.moe_quant == MODEL_DTYPE:
            return self.num_params * self.dtype_bytes
        return quantized_weight_bytes(self)

    # ----------------------------------------------------------------- per token
    @property
    def layer_matmul_params(self) -> int:
        """Matmul parameters touched per token in all layers (active experts only), no LM head."""
        if not self.is_moe:
            return self.attn_params + self.num_layers * self.active_mlp_params_per_layer
        return (
            self.attn_params
            + self.num_dense_layers * self.dense_mlp_params
            + self.num_moe_layers * self.active_mlp_params_per_layer
        )

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
        """Attention FLOPs of one query token per context token, all softmax-attention layers
        (QKᵀ + PV; MLA in its uncompressed form: QKᵀ over nope+rope dims, PV over v dims).
        Sliding layers pay it for at most ``sliding_window`` context tokens, DSA layers for at
        most ``index_topk``: :meth:`attn_flops_per_token`."""
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            return 2 * self.softmax_attention_layers * self.num_heads * (qk + self.v_head_dim)
        return 4 * self.softmax_attention_layers * self.num_heads * self.d_head

    def attn_flops_per_token(self, context: int) -> int:
        """Attention FLOPs of one query token over ``context`` tokens, every layer bounded by
        what it attends to (window, DSA top-k); DSA's indexer scores every context token with
        its own ``index_n_heads × index_head_dim`` (QKᵀ only)."""
        per_layer = self.attn_flops_per_ctx_token // max(self.softmax_attention_layers, 1)
        full = min(context, self.index_topk) if self.index_topk else context
        win = min(context, self.sliding_window)
        index = 2 * self.index_n_heads * self.index_head_dim * context if self.index_topk else 0
        return per_layer * (self.full_attention_layers * full + self.num_sliding_layers * win) + (
            self.full_attention_layers * index
        )

    # ----------------------------------------------------------------- KV cache and state
    @property
    def kv_elem_bytes(self) -> int:
        """Bytes of one KV element (``kv_cache_dtype``; auto = the model dtype)."""
        return kv_bytes_per_element(self.kv_cache_dtype, self.dtype_bytes)

    @property
    def index_kv_bytes_per_token_per_layer(self) -> int:
        """DSA indexer's key cache: FP8 keys plus one fp32 scale per 128 values (vLLM's
        ``DeepseekV32IndexerCache``), whatever the KV dtype."""
        d = self.index_head_dim
        return d + 4 * -(-d // 128) if self.index_topk and d else 0

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes of one context token in all full-attention layers (MLA: the latent plus the
        rope key; sliding and linear layers excluded: they are bounded per sequence)."""
        if self.is_mla:
            per = (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_elem_bytes
            return self.full_attention_layers * (per + self.index_kv_bytes_per_token_per_layer)
        return 2 * self.full_attention_layers * self.num_kv_heads * self.d_head * (
            self.kv_elem_bytes
        )

    def kv_bytes_per_token_per_gpu(self, tp: int) -> float:
        """KV heads are split over TP ranks; when tp > n_kv_heads, each rank keeps a replica.
        MLA's latent is one head: every rank keeps all of it."""
        if self.is_mla:
            return float(self.kv_bytes_per_token)
        heads = max(self.num_kv_heads / tp, 1.0)
        return 2 * self.full_attention_layers * heads * self.d_head * self.kv_elem_bytes

    def window_kv_bytes_per_token_per_gpu(self, tp: int) -> float:
        """KV bytes per token of the sliding-window layers (held for ≤ ``sliding_window``
        tokens of each sequence)."""
        heads = max(self.num_kv_heads / tp, 1.0)
        return 2 * self.num_sliding_layers * heads * self.d_head * self.kv_elem_bytes

    @property
    def state_bytes_per_seq(self) -> int:
        """Linear-attention state of one sequence, all linear layers
        (:func:`~tidal.hardware.model_math.linear_state_bytes_per_layer`)."""
        return self.num_linear_layers * linear_state_bytes_per_layer(self)

    def state_bytes_per_seq_per_gpu(self, tp: int) -> float:
        """``state_bytes_per_seq`` on one of ``tp`` ranks (every state splits by head)."""
        return self.state_bytes_per_seq / tp

    def kv_bytes_per_seq_per_gpu(self, tp: int, tokens: int) -> float:
        """KV and state of one sequence of ``tokens`` tokens on one rank: full-attention KV for
        every token, sliding-window KV for at most ``sliding_window``, the constant state."""
        win = min(tokens, self.sliding_window)
        return (
            self.kv_bytes_per_token_per_gpu(tp) * tokens
            + self.window_kv_bytes_per_token_per_gpu(tp) * win
            + self.state_bytes_per_seq_per_gpu(tp)
        )

    @property
    def non_expert_weight_bytes(self) -> int:
        """Weight bytes of everything but the routed experts."""
        return self.weight_bytes - self.expert_weight_bytes

    @property
    def expert_weight_bytes(self) -> int:
        """Weight bytes of the routed experts (``moe_quant``)."""
        return expert_weight_bytes(self)
