"""Corrected roofline: a step-time model for any (GPU, model, TP), fitted on measured kernels.

Per layer and GPU shard (M = step tokens, F = peak FLOP/s, BW = memory bytes/s):

* each GEMM (QKV, O, gate+up, down; an M×K by K×N product) takes
  ``t0 + (t_c^p + t_m^p)^(1/p)`` with ``t_c = 2·N·K·(M' + M_½)/(η_F·F)``, M' = M rounded up
  to whole tiles of ``m_tile`` rows (a kernel computes whole tiles) — compute at the
  efficiency ``η_F·M/(M' + M_½)`` that grows with M (small-M GEMMs leave the tensor cores
  idle) — and ``t_m = dtype·(MK + KN + MN)/(η_B·BW)`` (weights and activations read once); the
  p-norm rounds the roofline's corner, where neither bound is reached, less for larger weight
  matrices (``p + p_k·log2(N·K/2²⁶)``: many tiles and long K loops overlap loads with math);
* each elementwise op (two RMSNorms, RoPE, SiLU·mul, residual add)
  ``t0_op + r_op·b_op + k_op·M·b_op/BW`` with ``b_op`` its bytes read and written per token
  (``r``: at small M one thread block walks a whole row); the embedding gather likewise;
* two all-reduces of ``M·hidden·dtype`` bytes (TP > 1), as NCCL runs them: per (GPU, link
  kind, TP) up to three lower size regimes (low-latency, middle, a staircase step) below the
  p-norm of a latency and ``2(tp−1)/tp·bytes/(η_link·link_bw)`` (:func:`allreduce_time`); a
  GPU without its own sweep borrows its family's — fitted on that sweep with each sample
  capped at the larger TP group's time at the same size (rule R1: a smaller group of one
  node is never slower; samples above it are the profiler's wait) — with every latency
  scaled by the ratio of the link bandwidths (the latency-bound regimes move NCCL's minimum
  slices over each hop);
* decode attention ``t0_d + t1_d·n + kv_bytes·Σctx/(η_A·BW)`` for n decode requests (the
  per-layer floor the roofline lacked); prefill attention ``m·t0_p + 2·q_heads·d·A/(η_P·F)
  + kv_bytes·C/(η_B·BW)`` for m chunks with A = Σ c(2s + c), C = Σ(s + c);

plus per step the LM head (a GEMM with M = sequences, N = vocab/TP) and a host term
``h0 + h1·sequences`` (scheduling, input preparation, sampling, output processing) of the
engine named by ``host`` (:data:`HOST_MODES`: vLLM v1 by default, or Vidur's older vLLM).
Constants are per GPU (η_F, η_B; GPUs without data borrow a family member's), per link kind
and global; ``bench/roofline_fit.py`` fits them on the Vidur profiles (``data/profiles``) and
reports held-out errors only. Exactness: only the ``κ·Σctx`` term touches ``decode_ctx``, added
last, so the model is affine in the context (:meth:`decode_affine`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tidal.hardware.allreduce import LinkConst, allreduce_time
from tidal.hardware.gpus import GPUS, GPUSpec
from tidal.hardware.models import ModelSpec
from tidal.hardware.perf import PerfModel
from tidal.hardware.roofline_constants import (
    CONSTANTS_PATH,
    DEFAULT_HOST,
    HOST_MODES,
    AttentionConst,
    GemmConst,
    GPUConst,
    HostConst,
    RooflineConstants,
    bundled_constants,
    check_host,
)

__all__ = [  # the constants are re-exported from tidal.hardware.roofline_constants
    "CONSTANTS_PATH",
    "DEFAULT_HOST",
    "ELEMENTWISE",
    "HOST_MODES",
    "AttentionConst",
    "CorrectedRooflinePerfModel",
    "GPUConst",
    "GemmConst",
    "HostConst",
    "LinkConst",
    "RooflineConstants",
    "allreduce_time",
    "bundled_constants",
    "check_host",
    "elementwise_bytes",
    "gemm_time",
    "layer_gemms",
    "link_kind",
    "ridge_tokens",
    "weight_read_floor_s",
]

ELEMENTWISE = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")


def link_kind(gpu: GPUSpec) -> str:
    """NVSwitch node for SXM-class NVLink (≥ 300 GB/s), bridged pairs below, else PCIe."""
    if gpu.nvlink_gbs >= 300:
        return "dgx"
    return "pairwise_nvlink" if gpu.nvlink_gbs > 0 else "pcie"


def layer_gemms(model: ModelSpec, tp: int) -> list[tuple[str, int, int]]:
    """(op, K, N) of one layer's GEMMs on one TP shard (Megatron split; KV heads replicated
    when tp exceeds them). MoE layers report one expert's matrices."""
    h, d = model.hidden_size, model.d_head
    q, kv = model.num_heads // tp, max(model.num_kv_heads // tp, 1)
    inter = model.intermediate_size // tp if not model.is_moe else model.moe_inter
    up = 2 * inter if model.gated_mlp else inter
    return [
        ("attn_pre_proj", h, (q + 2 * kv) * d),
        ("attn_post_proj", q * d, h),
        ("mlp_up_proj", h, up),
        ("mlp_down_proj", inter, h),
    ]


def elementwise_bytes(model: ModelSpec, tp: int) -> dict[str, float]:
    """Bytes read + written per token and layer by each elementwise op on one shard."""
    h, d, dt = model.hidden_size, model.d_head, model.dtype_bytes
    q, kv = model.num_heads // tp, max(model.num_kv_heads // tp, 1)
    inter = model.moe_inter // tp
    act = (3 if model.gated_mlp else 2) * inter
    return {
        "input_layernorm": 2.0 * h * dt,
        "post_attention_layernorm": 2.0 * h * dt,
        "attn_rope": 2.0 * (q + kv) * d * dt,
        "mlp_act": float(act * dt),
        "add": 3.0 * h * dt,
        "emb": 2.0 * h * dt,
    }


def ridge_tokens(gpu: GPUSpec, dtype_bytes: int) -> float:
    """M at which an M×K·K×N GEMM with K, N ≫ M has equal FLOP and weight-read time."""
    return gpu.flops * dtype_bytes / (2.0 * gpu.mem_bw)


def weight_read_floor_s(model: ModelSpec, gpu: GPUSpec, tp: int) -> float:
    """Seconds to read one shard's dense weights (all layers' non-expert matrices and the LM
    head; not the input embedding, which is gathered) at the GPU's peak bandwidth: no step
    can be faster (the floor every perf model's context-independent part is held above)."""
    dt = model.dtype_bytes
    gathered = 0 if model.tie_embeddings else model.embedding_params * dt
    return max(model.non_expert_weight_bytes - gathered, 0) / tp / gpu.mem_bw


def gemm_time(
    m: Any, k: Any, n: Any, dtype: float, flops: Any, bw: Any,
    eta_f: Any, eta_b: Any, m_half: float, t0_us: float, p: Any, m_tile: int = 0,
    p_k: float = 0.0, p_by: str = "k",
) -> Any:  # fmt: skip
    """Seconds of an (m×k)·(k×n) GEMM (module docstring; ``p_k``: the corner exponent
    ``max(p + p_k·log2(S/2²⁶), 1)``, S = N·K for ``p_by`` ``nk``, else 2¹⁴·K); works on numpy
    arrays too."""
    if p_k:
        size = n * k if p_by == "nk" else k * 16384.0
        if isinstance(size, np.ndarray):
            p = np.maximum(p + p_k * np.log2(size / 2.0**26), 1.0)
        else:
            p = max(p + p_k * math.log2(size / 2.0**26), 1.0)
    if m_tile <= 0:
        mq = m
    elif isinstance(m, np.ndarray):
        mq = np.ceil(m / m_tile) * m_tile
    else:
        mq = float(math.ceil(m / m_tile) * m_tile)
    tc = 2.0 * n * k * (mq + m_half) / (eta_f * flops)
    tm = dtype * (m * k + k * n + m * n) / (eta_b * bw)
    return t0_us * 1e-6 + (tc**p + tm**p) ** (1.0 / p)


class CorrectedRooflinePerfModel(PerfModel):
    name = "corrected-roofline"

    def __init__(
        self,
        model: ModelSpec,
        gpu: GPUSpec,
        tp: int = 1,
        consts: RooflineConstants | None = None,
        link: str | None = None,
        host: str = DEFAULT_HOST,
    ) -> None:
        self.model, self.gpu, self.tp = model, gpu, tp
        self.c = consts if consts is not None else bundled_constants()
        self.host = check_host(host)
        self._host_c = self.c.host_const(host)
        self.link = link or link_kind(gpu)
        g = self.c.gpu_const(gpu.name)
        self._eta_f, self._eta_b = g.eta_flops, g.eta_bw
        self._gemms = layer_gemms(model, tp)
        self._ridge = ridge_tokens(gpu, model.dtype_bytes)
        self._elem = elementwise_bytes(model, tp)
        kvb = 2.0 * max(model.num_kv_heads // tp, 1) * model.d_head * model.dtype_bytes
        a = self.c.attention
        L = model.num_layers
        self._kv_layer = kvb
        self.ctx_slope = L * kvb / (a.decode_eta_bw * gpu.mem_bw)
        # attn_prefill_s's per-deployment factors, grouped as its formula groups them
        self._pre_c = (2.0 * (model.num_heads // tp) * model.d_head, a.prefill_eta_flops
                       * gpu.flops, self._eta_b * gpu.mem_bw, a.prefill_t0_us)  # fmt: skip
        self._floor = weight_read_floor_s(model, gpu, tp)
        self._link_bw, self._link_c = self._link(gpu)
        self._tok_cache: dict[int, float] = {}
        self._seq_cache: dict[int, float] = {}
        self._dec_cache: dict[int, float] = {}
        # elementwise time is affine in the tokens: e0 + e1·T per layer (and per step for emb)
        self._e0 = self.elementwise_s(0)
        self._e1 = self.elementwise_s(1) - self._e0
        self._emb0 = self.elementwise_s(0, ("emb",))
        self._emb1 = self.elementwise_s(1, ("emb",)) - self._emb0

    # ---------------------------------------------------------------- components (seconds)
    def gemm_s(self, m: float, k: int, n: int) -> float:
        g = self.c.gemm
        return gemm_time(
            m, k, n, self.model.dtype_bytes, self.gpu.flops, self.gpu.mem_bw,
            self._eta_f, self._eta_b, g.m_half_ridge * self._ridge, g.t0_us, g.p, g.m_tile,
            g.p_k, g.p_by,
        )  # fmt: skip

    def layer_linear_s(self, tokens: int) -> float:
        """One layer's GEMMs (MoE: the experts the tokens touch) on one shard."""
        m = self.model
        if not m.is_moe or tokens == 0:
            return sum(self.gemm_s(tokens, k, n) for _, k, n in self._gemms)
        attn = sum(self.gemm_s(tokens, k, n) for _, k, n in self._gemms[:2])
        e, act = m.num_experts, m.num_active_experts
        touched = e * (1.0 - (1.0 - act / e) ** tokens)
        per = tokens * act / touched
        mlp = sum(self.gemm_s(per, k, n) for _, k, n in self._gemms[2:])
        return attn + touched * mlp / self.tp

    def elementwise_s(self, tokens: int, ops: tuple[str, ...] = ELEMENTWISE) -> float:
        bw = self.gpu.mem_bw
        t = 0.0
        for op in ops:
            t0, k, r = self.c.elementwise.get(op, (2.0, 1.0, 0.0))
            b = self._elem[op]
            t += t0 * 1e-6 + r * 1e-9 * b + k * tokens * b / bw
        return t

    def qk_norm_s(self, tokens: int) -> float:
        """One layer's per-head RMSNorms of the queries and keys (``ModelSpec.qk_norm``; 0
        without): vLLM's ``q_norm`` and ``k_norm``, two RMSNorm kernels over the shard's q
        and kv heads. Each is priced as the fitted RMSNorm (``input_layernorm``'s t0, k, r):
        ``t0 + r·b_row + k·M·b/BW`` with b = 2·heads·d·dtype bytes a token (read and write)
        and b_row = 2·d·dtype (a thread block normalises one head's row), on the share of
        layers that have softmax attention. Not part of :data:`ELEMENTWISE` (the Vidur
        profiles' op list): the engine-table model adds it (``EngineDeployment``)."""
        m = self.model
        if not m.qk_norm or tokens < 0:
            return 0.0
        t0, k, r = self.c.elementwise.get("input_layernorm", (2.0, 1.0, 0.0))
        row = 2.0 * m.d_head * m.dtype_bytes
        q, kv = m.num_heads // self.tp, max(m.num_kv_heads // self.tp, 1)
        t = sum(t0 * 1e-6 + r * 1e-9 * row + k * tokens * n * row / self.gpu.mem_bw
                for n in (q, kv))  # fmt: skip
        return t * m.softmax_attention_layers / m.num_layers

    def _link(self, gpu: GPUSpec) -> tuple[float, LinkConst]:
        """(link bytes/s, constants). Borrowed constants (another GPU's sweep, through the
        family map) have their latencies scaled by that GPU's link bandwidth over this one's."""

        def bw_of(g: GPUSpec) -> float:
            return g.pcie_gbs * 1e9 if self.link == "pcie" else g.peer_bw

        lc = self.c.link_const(gpu.name, self.link, self.tp)
        src = self.c.link_source(gpu.name, self.link, self.tp)
        if src is not None and src != gpu.name.partition("@")[0] and src in GPUS:
            lc = lc.scaled(bw_of(GPUS[src]) / bw_of(gpu))
        return bw_of(gpu), lc

    def allreduce_s(self, nbytes: float) -> float:
        """One all-reduce of ``nbytes`` across the TP group (:func:`allreduce_time`)."""
        if self.tp == 1:
            return 0.0
        return allreduce_time(nbytes, self.tp, self._link_bw, self._link_c)

    def tokens_s(self, tokens: int) -> float:
        """Everything that depends only on the step's token count: layers' GEMMs and
        elementwise ops, two all-reduces per layer, the embedding gather."""
        t = self._tok_cache.get(tokens)
        if t is None:
            m = self.model
            ar = 2.0 * self.allreduce_s(tokens * m.hidden_size * m.dtype_bytes)
            layer = self.layer_linear_s(tokens) + self._e0 + self._e1 * tokens + ar
            t = m.num_layers * layer + self._emb0 + self._emb1 * tokens
            if len(self._tok_cache) < 65536:
                self._tok_cache[tokens] = t
        return t

    def head_s(self, seqs: int) -> float:
        m = self.model
        return self.gemm_s(seqs, m.hidden_size, m.vocab_size // self.tp) if seqs else 0.0

    def host_s(self, seqs: int) -> float:
        h = self._host_c
        return (h.step_us + h.per_seq_us * seqs) * 1e-6

    def seqs_s(self, seqs: int) -> float:
        t = self._seq_cache.get(seqs)
        if t is None:
            t = self.head_s(seqs) + self.host_s(seqs)
            self._seq_cache[seqs] = t
        return t

    def _dec_fixed(self, num_decodes: int) -> float:
        t = self._dec_cache.get(num_decodes)
        if t is None:
            t = self._dec_cache[num_decodes] = self.attn_decode_fixed_s(num_decodes)
        return t

    def attn_decode_fixed_s(self, num_decodes: int) -> float:
        if num_decodes == 0:
            return 0.0
        a = self.c.attention
        per = (a.decode_t0_us + a.decode_per_seq_us * num_decodes) * 1e-6
        return self.model.num_layers * per

    def attn_prefill_s(self, prefill_attn: int, prefill_ctx: int, num_prefills: int) -> float:
        if num_prefills == 0:
            return 0.0
        # L·(m·t0 + 2·q·d·P_attn / (η_F·F) + kv_layer·C / (η_B·BW)), q = heads / TP
        flop, comp_den, read_den, t0 = self._pre_c
        comp = flop * prefill_attn / comp_den
        read = self._kv_layer * prefill_ctx / read_den
        return self.model.num_layers * (num_prefills * t0 * 1e-6 + comp + read)

    # ---------------------------------------------------------------- the step
    def step_seconds(
        self,
        num_decodes: int,
        decode_ctx: Any,
        prefill_tokens: int,
        prefill_attn: int,
        prefill_ctx: int,
        num_prefills: int,
        mx: Callable[[Any, Any], Any] = max,
    ) -> Any:
        tokens = num_decodes + prefill_tokens
        if tokens == 0:
            return 0.0
        seqs = num_decodes + num_prefills
        tok = self._tok_cache.get(tokens)
        sq = self._seq_cache.get(seqs)
        const = (
            (self.tokens_s(tokens) if tok is None else tok)
            + (self.seqs_s(seqs) if sq is None else sq)
            + (self.attn_prefill_s(prefill_attn, prefill_ctx, num_prefills) if num_prefills
               else 0.0)
            + (self._dec_fixed(num_decodes) if num_decodes else 0.0)
        )  # fmt: skip
        if const < self._floor:
            const = self._floor
        return const + self.ctx_slope * decode_ctx

    def kernel_seconds(
        self, num_decodes: int, decode_ctx: int, prefill_tokens: int, prefill_ctx: int = 0,
        num_prefills: int = 0, prefill_attn: int = 0, attention: bool = True,
    ) -> float:  # fmt: skip
        """GPU kernel time of the layers (no LM head, no host): what the profiles measure."""
        t = self.tokens_s(num_decodes + prefill_tokens)
        if attention:
            t += self.attn_prefill_s(prefill_attn, prefill_ctx, num_prefills)
            t += self.attn_decode_fixed_s(num_decodes) + self.ctx_slope * decode_ctx
        return t

    def decode_affine(self, num_decodes: int) -> tuple[float, float] | None:
        if num_decodes == 0:
            return None
        return self.step_seconds(num_decodes, 0, 0, 0, 0, 0), self.ctx_slope

    def describe(self) -> dict[str, Any]:
        g = self.c.gpu_const(self.gpu.name)
        return {
            "name": self.name,
            "eta_flops": g.eta_flops,
            "eta_bw": g.eta_bw,
            "link": self.link,
            "host": self.host,
            "constants": self.c.format,
        }
