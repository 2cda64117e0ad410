"""Attention over the paged KV cache, for one step's flattened batch.

A step's tokens are laid out as one row each: every prefill chunk's new tokens, then one row
per decode request. Keys and values of the step's tokens are written into the cache first
(:meth:`tidal.runtime.kv_cache.PagedKVCache.write`), so every query then reads its whole
context, its own token included, from the cache.

* **Prefill chunk** (c new tokens after s cached ones): the chunk's blocks are gathered into a
  contiguous ``[kv_heads, s + c, head_dim]`` context and attended with causal masking offset by s
  (query i, at position s + i, sees keys 0 … s + i).
* **Decode** (one query per request, request r attending ``n_r`` tokens): the blocks of all
  decode requests are gathered at once (Σ⌈n_r / block_size⌉ blocks, no padding to the longest
  request), each query attends each of its blocks, and the per-block partial softmaxes are merged
  with the log-sum-exp rule of split-K "flash decoding":
  ``m = max_b m_b``, ``O = Σ_b e^{m_b − m}·o_b / Σ_b e^{m_b − m}·l_b``, where block b has score
  maximum ``m_b``, normaliser ``l_b = Σ e^{s − m_b}`` and unnormalised output
  ``o_b = Σ e^{s − m_b}·v``. Work and memory are proportional to Σ n_r, which is the
  ``decode_ctx`` feature of the performance model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F  # noqa: N812


@dataclass(slots=True)
class PrefillSegment:
    """One prefill chunk: rows ``start … start + num_new − 1`` of the batch."""

    start: int
    num_new: int
    num_ctx: int
    """Cached + new tokens: the chunk's last query sits at position ``num_ctx − 1``."""
    blocks: torch.Tensor
    """Block ids holding positions ``0 … num_ctx − 1`` (long, ``⌈num_ctx / block_size⌉``)."""


@dataclass(slots=True)
class DecodeSegment:
    """All decode requests: rows ``start … start + num − 1``, one per request."""

    start: int
    num: int
    flat_blocks: torch.Tensor
    """The requests' block tables concatenated (long, Σ blocks)."""
    owner: torch.Tensor
    """For each entry of ``flat_blocks``, the index of its request in ``0 … num − 1``."""
    invalid: torch.Tensor
    """``[Σ blocks, block_size]`` bool: slot beyond the request's context (masked out)."""


def prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seg: PrefillSegment,
    scale: float,
) -> torch.Tensor:
    """``q``: ``[num_new, heads, head_dim]`` → ``[num_new, heads, head_dim]``."""
    kvh, bs, hd = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    nb = seg.blocks.shape[0]
    k = k_cache[seg.blocks].transpose(0, 1).reshape(kvh, nb * bs, hd)[:, : seg.num_ctx]
    v = v_cache[seg.blocks].transpose(0, 1).reshape(kvh, nb * bs, hd)[:, : seg.num_ctx]
    qh = q.transpose(0, 1).unsqueeze(0)  # [1, heads, new, hd]
    cached = seg.num_ctx - seg.num_new
    if cached == 0:
        out = F.scaled_dot_product_attention(
            qh, k.unsqueeze(0), v.unsqueeze(0), is_causal=True, scale=scale, enable_gqa=True
        )
    else:
        rows = torch.arange(seg.num_new, device=q.device).unsqueeze(1) + cached
        mask = torch.arange(seg.num_ctx, device=q.device).unsqueeze(0) <= rows
        out = F.scaled_dot_product_attention(
            qh, k.unsqueeze(0), v.unsqueeze(0), attn_mask=mask, scale=scale, enable_gqa=True
        )
    return out.squeeze(0).transpose(0, 1)


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seg: DecodeSegment,
    scale: float,
) -> torch.Tensor:
    """``q``: ``[num, heads, head_dim]`` → ``[num, heads, head_dim]`` (split-K merge above)."""
    n, heads, hd = q.shape
    kvh = k_cache.shape[1]
    group = heads // kvh
    k = k_cache.index_select(0, seg.flat_blocks)  # [B, kvh, bs, hd]
    v = v_cache.index_select(0, seg.flat_blocks)
    qb = q.view(n, kvh, group, hd).index_select(0, seg.owner)  # [B, kvh, g, hd]
    s = torch.matmul(qb, k.transpose(-1, -2)).mul_(scale)  # [B, kvh, g, bs]
    s.masked_fill_(seg.invalid[:, None, None, :], float("-inf"))
    m_b = s.amax(-1)  # every block holds ≥ 1 valid slot, so m_b is finite
    p = torch.exp(s - m_b.unsqueeze(-1))
    l_b = p.sum(-1)
    o_b = torch.matmul(p, v)  # [B, kvh, g, hd]
    idx = seg.owner.view(-1, 1, 1).expand_as(m_b)
    m = torch.full((n, kvh, group), float("-inf"), dtype=s.dtype, device=s.device)
    m.scatter_reduce_(0, idx, m_b, reduce="amax")
    w = torch.exp(m_b - m.index_select(0, seg.owner))
    den = torch.zeros_like(m).index_add_(0, seg.owner, l_b * w)
    num = torch.zeros((n, kvh, group, hd), dtype=s.dtype, device=s.device)
    num.index_add_(0, seg.owner, o_b * w.unsqueeze(-1))
    return (num / den.unsqueeze(-1)).view(n, heads, hd)
