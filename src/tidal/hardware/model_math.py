"""Parameter and state arithmetic of the architectures a Hugging Face config may describe (the
parts of :class:`~tidal.hardware.models.ModelSpec` that are more than one line).

MLA (DeepSeek-V2/V3 "multi-head latent attention"): queries go through a ``q_lora_rank``
bottleneck, keys and values through one joint down projection to a ``kv_lora_rank`` latent plus
a shared rope key, which is what the KV cache stores; an up projection gives per-head nope keys
and values. DSA (DeepSeek-V3.2) adds an indexer that scores past tokens with its own small
heads and keeps the top ``index_topk``. Gated DeltaNet layers (Qwen3-Next, Qwen3.5) keep, per
sequence, a short causal-convolution window and a ``key_dim × value_dim`` state per value head.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tidal.hardware.precision import weight_bytes_per_param

if TYPE_CHECKING:
    from tidal.hardware.models import ModelSpec


def mla_params(m: ModelSpec) -> int:
    """One MLA layer: Q (through ``q_lora_rank`` when set), the joint KV down projection to
    ``kv_lora_rank`` + the rope key, its up projection to per-head nope keys and values, the
    output; DSA's indexer (its Q projection, key and per-head weight projections)."""
    h, n = m.hidden_size, m.num_heads
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    ql = m.q_lora_rank
    q = h * ql + ql * n * qk if ql else h * n * qk
    kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim)
    kv_b = m.kv_lora_rank * n * (m.qk_nope_head_dim + m.v_head_dim)
    o = n * m.v_head_dim * h
    idx = 0
    if m.index_n_heads:
        idx = (ql or h) * m.index_n_heads * m.index_head_dim + h * m.index_head_dim
        idx += h * m.index_n_heads
    return q + kv_a + kv_b + o + idx


def gdn_params(m: ModelSpec) -> int:
    """One Gated DeltaNet layer: q/k (key heads), v/z (value heads), the per-head gates β and
    α, the short causal convolution over q, k, v, and the output projection."""
    if not m.num_linear_layers:
        return 0
    h = m.hidden_size
    qk = 2 * m.linear_num_key_heads * m.linear_key_head_dim
    v = m.linear_num_value_heads * m.linear_value_head_dim
    proj = h * (qk + 2 * v) + h * 2 * m.linear_num_value_heads
    return proj + (qk + v) * m.linear_conv_kernel_dim + v * h


def linear_state_bytes_per_layer(m: ModelSpec) -> int:
    """State of one sequence in one Gated DeltaNet layer: the causal convolution's last
    ``kernel − 1`` rows of q, k, v (model dtype) and the recurrent state
    ``value_heads × key_dim × value_dim`` (``linear_state_dtype_bytes``, default model dtype)."""
    if not m.num_linear_layers:
        return 0
    conv_dim = 2 * m.linear_num_key_heads * m.linear_key_head_dim + (
        m.linear_num_value_heads * m.linear_value_head_dim
    )
    conv = (m.linear_conv_kernel_dim - 1) * conv_dim * m.dtype_bytes
    state_b = m.linear_state_dtype_bytes or m.dtype_bytes
    rec = m.linear_num_value_heads * m.linear_key_head_dim * m.linear_value_head_dim * state_b
    return conv + rec


def quantized_weight_bytes(m: ModelSpec) -> int:
    """Weight bytes under ``gemm_quant`` / ``moe_quant`` (:mod:`tidal.hardware.precision`):
    routed experts in ``moe_quant``; embeddings, LM head, norms and routers in the model dtype;
    every other weight (attention, dense and shared MLPs) in ``gemm_quant``."""
    head = 0 if m.tie_embeddings else m.embedding_params
    plain = m.embedding_params + head + (2 * m.num_layers + 1) * m.hidden_size
    plain += m.num_moe_layers * m.hidden_size * m.num_experts
    routed = m.routed_expert_params
    gemm = m.num_params - plain - routed
    total = (
        plain * m.dtype_bytes
        + gemm * weight_bytes_per_param(m.gemm_quant, m.dtype_bytes)
        + routed * weight_bytes_per_param(m.moe_quant, m.dtype_bytes)
    )
    return math.ceil(total)


def expert_weight_bytes(m: ModelSpec) -> int:
    """Weight bytes of all routed experts, in ``moe_quant``."""
    return math.ceil(m.routed_expert_params * weight_bytes_per_param(m.moe_quant, m.dtype_bytes))
