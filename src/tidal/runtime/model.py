"""A Llama-architecture decoder for the real engine: RMSNorm, rotary position embeddings, grouped-
query attention over a paged KV cache, SwiGLU MLP (Touvron et al. 2023, "Llama 2", §2.2 and
Hugging Face's ``LlamaForCausalLM``).

Per layer, for the step's flattened token rows x:
``h = x + W_o·Attn(RoPE(W_q·n₁), RoPE(W_k·n₁), W_v·n₁)`` with ``n₁ = RMSNorm(x)``;
``x' = h + W_down·(SiLU(W_gate·n₂) ⊙ W_up·n₂)`` with ``n₂ = RMSNorm(h)``;
``RMSNorm(x) = x / sqrt(mean(x²) + ε) ⊙ w``. RoPE uses the rotate-half convention of Hugging
Face checkpoints: ``x·cos θ + rotate_half(x)·sin θ`` with ``θ_i = p·base^(−2i/d)``.

Q/K/V and gate/up projections are fused into one matmul each (``qkv_proj``, ``gate_up_proj``);
:mod:`tidal.runtime.weights` maps Hugging Face tensor names onto them.

Weights are dummy by default (vLLM's ``--load-format dummy``): seeded normal draws with std
``1/sqrt(fan_in)`` so activations keep unit scale through the layers, and an LM head scaled so
that logits have std :data:`DUMMY_LOGIT_STD` — peaked enough that greedy choices are not decided
by float rounding (the batching-equivalence tests compare greedy tokens exactly).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from tidal.core.errors import ConfigError
from tidal.hardware.models import ModelSpec
from tidal.runtime.attention import (
    DecodeSegment,
    PrefillSegment,
    decode_attention,
    prefill_attention,
)

DUMMY_LOGIT_STD = 4.0


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position: int = 4096
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_embeddings: bool = False
    qkv_bias: bool = False
    """Biases on the Q, K and V projections (Qwen2)."""

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                "model", f"{self.name}: {self.num_heads} heads not divisible by KV heads"
            )

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> LlamaConfig:
        """The runtime shape of a catalog model (dense Llama-style models only)."""
        kinds = {
            "a mixture-of-experts": spec.is_moe,
            "a non-gated MLP": not spec.gated_mlp,
            "latent (MLA) attention": spec.is_mla,
            "linear-attention layers": spec.num_linear_layers > 0,
            "sliding-window layers": spec.num_sliding_layers > 0,
        }
        kind = next((k for k, v in kinds.items() if v), "")
        if kind:
            raise ConfigError(
                "model",
                f"{spec.name} has {kind}; the runtime implements dense Llama decoders",
                "choose a Llama/Mistral/Qwen-style dense model or tiny-llama",
            )
        return cls(
            spec.name,
            spec.num_layers,
            spec.hidden_size,
            spec.num_heads,
            spec.num_kv_heads,
            spec.d_head,
            spec.intermediate_size,
            spec.vocab_size,
            max_position=spec.max_context,
            tie_embeddings=spec.tie_embeddings,
        )


@dataclass(slots=True)
class ForwardBatch:
    """One step's inputs: prefill rows first, then one row per decode request."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    write_blocks: torch.Tensor
    """Block id receiving each row's key and value."""
    write_offsets: torch.Tensor
    prefills: list[PrefillSegment]
    decode: DecodeSegment | None
    sample_rows: torch.Tensor
    """Rows whose logits are computed (the last row of a completing chunk, every decode)."""


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return nn.functional.rms_norm(x, self.weight.shape, self.weight, self.eps)
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


class Rotary(nn.Module):
    """cos/sin tables for positions ``0 … max_position − 1`` (rotate-half convention)."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, head_dim: int, max_position: int, base: float) -> None:
        super().__init__()
        inv = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        ang = torch.arange(max_position, dtype=torch.float64)[:, None] * inv[None, :]
        ang = torch.cat([ang, ang], dim=-1)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)

    def tables(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin rows of ``positions`` as ``[tokens, 1, head_dim]`` (once per step)."""
        cos = self.cos.index_select(0, positions).unsqueeze(1).to(dtype)
        sin = self.sin.index_select(0, positions).unsqueeze(1).to(dtype)
        return cos, sin


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x·cos + rotate_half(x)·sin`` for ``x`` of shape ``[tokens, heads, head_dim]``."""
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_heads,
            cfg.num_kv_heads,
            cfg.head_dim,
        )
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim
        self.scale = 1.0 / math.sqrt(cfg.head_dim)
        self.qkv_proj = nn.Linear(
            cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=cfg.qkv_bias
        )
        self.o_proj = nn.Linear(self.q_size, cfg.hidden_size, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        batch: ForwardBatch,
        rope: tuple[torch.Tensor, torch.Tensor],
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        t = x.shape[0]
        qkv = self.qkv_proj(x)
        # q and k are adjacent columns: rotate them as one [tokens, heads + kv_heads, dim] view
        qk = apply_rotary(qkv[:, : self.q_size + self.kv_size].view(t, -1, self.head_dim), *rope)
        q, k = qk[:, : self.num_heads], qk[:, self.num_heads :]
        v = qkv[:, self.q_size + self.kv_size :].view(t, self.num_kv_heads, self.head_dim)
        k_cache[batch.write_blocks, :, batch.write_offsets] = k
        v_cache[batch.write_blocks, :, batch.write_offsets] = v
        parts = [
            prefill_attention(q[p.start : p.start + p.num_new], k_cache, v_cache, p, self.scale)
            for p in batch.prefills
        ]
        d = batch.decode
        if d is not None:
            parts.append(
                decode_attention(q[d.start : d.start + d.num], k_cache, v_cache, d, self.scale)
            )
        out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
        return self.o_proj(out.reshape(t, self.q_size))


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.inter = cfg.intermediate_size
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split([self.inter, self.inter], dim=-1)
        return self.down_proj(nn.functional.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaBody(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    """Module names follow Hugging Face (``model.layers.N.self_attn…``, ``lm_head``)."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = LlamaBody(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.rotary = Rotary(cfg.head_dim, cfg.max_position, cfg.rope_theta)
        self.output_mask: torch.Tensor | None = None
        """0 for the ids the model may emit, −∞ for the others (None: every id)."""

    def restrict_outputs(self, allowed: list[int]) -> None:
        """Let the model emit only ``allowed`` ids: the others' logits become −∞ (for dummy
        weights, whose random logits would otherwise spread over ids that are no text)."""
        w = self.lm_head.weight
        mask = torch.full((self.config.vocab_size,), float("-inf"), device=w.device)
        mask[torch.tensor(sorted(set(allowed)), dtype=torch.long)] = 0.0
        self.output_mask = mask

    def _apply(self, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        """``.to(device)`` moves the output mask too (it stays float32)."""
        out = super()._apply(fn, *args, **kwargs)
        if self.output_mask is not None:
            self.output_mask = self.output_mask.to(self.lm_head.weight.device)
        return out

    @torch.inference_mode()
    def forward(
        self, batch: ForwardBatch, kv_layers: list[tuple[torch.Tensor, ...]]
    ) -> torch.Tensor:
        """Logits of the rows in ``batch.sample_rows`` (``[rows, vocab]``, float32)."""
        x = self.model.embed_tokens(batch.input_ids)
        rope = self.rotary.tables(batch.positions, x.dtype)
        layers = cast("list[DecoderLayer]", self.model.layers)
        for layer, (k_cache, v_cache) in zip(layers, kv_layers, strict=True):
            x = x + layer.self_attn(layer.input_layernorm(x), batch, rope, k_cache, v_cache)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        x = self.model.norm(x.index_select(0, batch.sample_rows))
        logits = self.lm_head(x).float()
        return logits if self.output_mask is None else logits + self.output_mask

    @torch.no_grad()
    def init_dummy(self, seed: int = 0) -> None:
        """Seeded normal weights, drawn on the CPU so every device gets the same values."""
        gen = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
                continue
            if name.endswith(".bias"):
                p.zero_()
                continue
            if name == "model.embed_tokens.weight":
                std = 1.0
            elif name == "lm_head.weight":
                std = DUMMY_LOGIT_STD / math.sqrt(p.shape[1])
            else:
                std = 1.0 / math.sqrt(p.shape[1])
            w = torch.randn(p.shape, generator=gen, dtype=torch.float32) * std
            p.copy_(w.to(p.dtype))
