"""Time a model's operators on this device with torch and write them as a ``tidal-gpu-profile/1``
profile (``docs/PROFILE_FORMAT.md``), the format of the bundled Vidur data.

Per layer, on one tensor-parallel shard (weights ``[out/tp, in]`` or ``[out, in/tp]``), against
the step's token count T: RMSNorm (``input_layernorm``, ``post_attention_layernorm``), the QKV
GEMM (``attn_pre_proj``), RoPE on q and k (``attn_rope``), the O GEMM (``attn_post_proj``), the
gate+up GEMM (``mlp_up_proj``), SiLU·mul (``mlp_act``; GELU for a 2-matrix MLP), the down GEMM
(``mlp_down_proj``) and the residual add (``add``); per step, the embedding gather (``emb``, by
T) and the LM head (``lm_head``, by sampled rows on the same grid). Attention per layer on the
per-GPU head shape, with the real engine's kernels (:mod:`tidal.runtime.attention`): decode over
a paged cache (batch × context per request, blocks scattered by a seeded permutation) and
prefill with ``scaled_dot_product_attention`` (chunk × cached context, one chunk).

Each time is the median of ``reps`` runs after ``warmup`` runs: on CUDA, ``torch.cuda.Event``
pairs around each run (device time); on CPU, ``time.perf_counter_ns`` around each run. The
all-reduce and host sections are left empty (one device; the host loop is measured by
``tidal calibrate``).
"""

from __future__ import annotations

import math
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch.nn import functional as F  # noqa: N812

from tidal.core.errors import ConfigError
from tidal.hardware.models import ModelSpec
from tidal.hardware.opprofile import (
    AttentionOps,
    GPUProfile,
    Grid2D,
    LinearOps,
    ModelShape,
)
from tidal.runtime.attention import (
    DecodeSegment,
    PrefillSegment,
    decode_attention,
    prefill_attention,
)
from tidal.runtime.model import RMSNorm, Rotary, apply_rotary

SOURCE = "tidal profile-gpu"


@dataclass(frozen=True)
class Grids:
    """Token, decode (batch × context) and prefill (chunk × cached context) grids."""

    tokens: tuple[int, ...]
    decode_batch: tuple[int, ...]
    decode_ctx: tuple[int, ...]
    prefill_chunk: tuple[int, ...]
    prefill_ctx: tuple[int, ...]
    max_decode_tokens: int
    """Decode cells holding more context tokens (batch · context) are not measured (null)."""


GPU_GRIDS = Grids(
    tokens=(1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
            2048, 3072, 4096, 6144, 8192),
    decode_batch=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    decode_ctx=(128, 256, 512, 1024, 2048, 4096, 8192),
    prefill_chunk=(16, 64, 128, 256, 512, 1024, 2048, 4096),
    prefill_ctx=(0, 512, 1024, 2048, 4096, 8192),
    max_decode_tokens=1 << 19,
)  # fmt: skip
TINY_GRIDS = Grids(
    tokens=(1, 4, 16, 64),
    decode_batch=(1, 4),
    decode_ctx=(16, 64),
    prefill_chunk=(8, 32),
    prefill_ctx=(0, 32),
    max_decode_tokens=256,
)
GRIDS = {"full": GPU_GRIDS, "tiny": TINY_GRIDS}


class OpTimer:
    """Median time of a callable, µs: CUDA events on a CUDA device, ``perf_counter_ns`` else."""

    def __init__(self, device: torch.device, warmup: int, reps: int) -> None:
        self.device, self.warmup, self.reps = device, warmup, reps
        self.cuda = device.type == "cuda"

    def __call__(self, fn: Callable[[], object]) -> float:
        for _ in range(self.warmup):
            fn()
        if not self.cuda:
            times = []
            for _ in range(self.reps):
                t0 = time.perf_counter_ns()
                fn()
                times.append((time.perf_counter_ns() - t0) / 1e3)
            return round(statistics.median(times), 3)
        torch.cuda.synchronize(self.device)
        pairs = []
        for _ in range(self.reps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize(self.device)
        return round(statistics.median(s.elapsed_time(e) * 1e3 for s, e in pairs), 3)


def _shard(n: int, tp: int, what: str) -> int:
    if n % tp:
        raise ConfigError("tp", f"{what} ({n}) is not divisible by tp={tp}", "pick a divisor")
    return n // tp


@dataclass(frozen=True)
class Shard:
    """One TP rank's operator shapes (heads, KV heads replicated when tp exceeds them)."""

    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    inter: int
    vocab: int
    gated: bool

    @classmethod
    def of(cls, m: ModelSpec, tp: int) -> Shard:
        if m.is_moe:
            raise ConfigError("model", f"{m.name} is a mixture of experts", "profile a dense model")
        kv = 1 if m.num_kv_heads < tp else _shard(m.num_kv_heads, tp, "KV heads")
        return cls(
            m.hidden_size,
            _shard(m.num_heads, tp, "attention heads"),
            kv,
            m.d_head,
            _shard(m.intermediate_size, tp, "intermediate size"),
            math.ceil(m.vocab_size / tp),
            m.gated_mlp,
        )


def _weights(s: Shard, dev: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device="cpu").manual_seed(0)

    def w(o: int, i: int) -> torch.Tensor:
        return (torch.randn(o, i, generator=gen) / math.sqrt(i)).to(dev, dtype)

    up = (2 if s.gated else 1) * s.inter
    return {
        "qkv": w((s.q_heads + 2 * s.kv_heads) * s.head_dim, s.hidden),
        "o": w(s.hidden, s.q_heads * s.head_dim),
        "up": w(up, s.hidden),
        "down": w(s.hidden, s.inter),
        "emb": w(s.vocab, s.hidden),
    }


def _layer_ops(
    s: Shard, t: int, wt: dict[str, torch.Tensor], rot: Rotary, dtype: torch.dtype
) -> dict[str, Callable[[], object]]:
    """The layer's operators on ``t`` token rows, inputs allocated once."""
    dev = wt["qkv"].device
    x = torch.randn(t, s.hidden, device=dev, dtype=dtype)
    res = torch.randn(t, s.hidden, device=dev, dtype=dtype)
    norm = RMSNorm(s.hidden, 1e-5).to(dev, dtype)
    qk = torch.randn(t, s.q_heads + s.kv_heads, s.head_dim, device=dev, dtype=dtype)
    cos, sin = rot.tables(torch.arange(t, device=dev), dtype)
    attn_out = torch.randn(t, s.q_heads * s.head_dim, device=dev, dtype=dtype)
    up = torch.randn(t, wt["up"].shape[0], device=dev, dtype=dtype)
    act = torch.randn(t, s.inter, device=dev, dtype=dtype)
    return {
        "input_layernorm": lambda: norm(x),
        "attn_pre_proj": lambda: F.linear(x, wt["qkv"]),
        "attn_rope": lambda: apply_rotary(qk, cos, sin),
        "attn_post_proj": lambda: F.linear(attn_out, wt["o"]),
        "post_attention_layernorm": lambda: norm(res),
        "mlp_up_proj": lambda: F.linear(x, wt["up"]),
        "mlp_act": (lambda: _silu_mul(up, s.inter)) if s.gated else (lambda: F.gelu(up)),
        "mlp_down_proj": lambda: F.linear(act, wt["down"]),
        "add": lambda: x + res,
    }


def linear_times(
    s: Shard, tokens: tuple[int, ...], timer: OpTimer, dtype: torch.dtype
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``layer_us`` and ``step_us`` columns on the token grid."""
    dev = timer.device
    wt = _weights(s, dev, dtype)
    rot = Rotary(s.head_dim, max(tokens), 10000.0).to(dev)
    layer: dict[str, list[float]] = {}
    step: dict[str, list[float]] = {"emb": [], "lm_head": []}
    with torch.inference_mode():
        for t in tokens:
            for name, fn in _layer_ops(s, t, wt, rot, dtype).items():
                layer.setdefault(name, []).append(timer(fn))
            ids = torch.randint(0, s.vocab, (t,), device=dev)
            rows = torch.randn(t, s.hidden, device=dev, dtype=dtype)
            step["emb"].append(timer(partial(F.embedding, ids, wt["emb"])))
            step["lm_head"].append(timer(partial(F.linear, rows, wt["emb"])))
    return layer, step


def _silu_mul(gate_up: torch.Tensor, inter: int) -> torch.Tensor:
    gate, up = gate_up.split([inter, inter], dim=-1)
    return F.silu(gate) * up


def _kv_cache(
    s: Shard, blocks: int, block_size: int, dev: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (blocks, s.kv_heads, block_size, s.head_dim)
    return torch.randn(shape, device=dev, dtype=dtype), torch.randn(shape, device=dev, dtype=dtype)


def decode_grid(s: Shard, g: Grids, block_size: int, timer: OpTimer, dtype: torch.dtype) -> Grid2D:
    """One layer's paged decode attention, batch × context per request (own token included)."""
    dev = timer.device
    cap = max(b * c for b in g.decode_batch for c in g.decode_ctx if b * c <= g.max_decode_tokens)
    nblocks = math.ceil(cap / block_size) + max(g.decode_batch)
    k_cache, v_cache = _kv_cache(s, nblocks, block_size, dev, dtype)
    perm = torch.randperm(nblocks, generator=torch.Generator().manual_seed(1)).to(dev)
    scale = 1.0 / math.sqrt(s.head_dim)
    rows: list[list[float | None]] = []
    with torch.inference_mode():
        for b in g.decode_batch:
            row: list[float | None] = []
            for c in g.decode_ctx:
                if b * c > g.max_decode_tokens:
                    row.append(None)
                    continue
                seg = _decode_segment(b, c, block_size, perm, dev)
                q = torch.randn(b, s.q_heads, s.head_dim, device=dev, dtype=dtype)
                row.append(timer(partial(decode_attention, q, k_cache, v_cache, seg, scale)))
            rows.append(row)
    return Grid2D(rows=list(g.decode_batch), cols=list(g.decode_ctx), us=rows)


def _decode_segment(
    b: int, ctx: int, block_size: int, perm: torch.Tensor, dev: torch.device
) -> DecodeSegment:
    per = math.ceil(ctx / block_size)
    flat = perm[: b * per]
    owner = torch.arange(b, device=dev).repeat_interleave(per)
    slot = torch.arange(per * block_size, device=dev).view(per, block_size)
    invalid = (slot >= ctx).repeat(b, 1)
    return DecodeSegment(0, b, flat, owner, invalid)


def prefill_grid(s: Shard, g: Grids, block_size: int, timer: OpTimer, dtype: torch.dtype) -> Grid2D:
    """One layer's prefill attention of one chunk after ``ctx`` cached tokens (causal SDPA)."""
    dev = timer.device
    nblocks = math.ceil((max(g.prefill_chunk) + max(g.prefill_ctx)) / block_size)
    k_cache, v_cache = _kv_cache(s, nblocks, block_size, dev, dtype)
    perm = torch.randperm(nblocks, generator=torch.Generator().manual_seed(2)).to(dev)
    scale = 1.0 / math.sqrt(s.head_dim)
    rows: list[list[float | None]] = []
    with torch.inference_mode():
        for n in g.prefill_chunk:
            row: list[float | None] = []
            for c in g.prefill_ctx:
                seg = PrefillSegment(0, n, c + n, perm[: math.ceil((c + n) / block_size)])
                q = torch.randn(n, s.q_heads, s.head_dim, device=dev, dtype=dtype)
                row.append(timer(partial(prefill_attention, q, k_cache, v_cache, seg, scale)))
            rows.append(row)
    return Grid2D(rows=list(g.prefill_chunk), cols=list(g.prefill_ctx), us=rows)


def device_notes(dev: torch.device, dtype: torch.dtype, timer: OpTimer) -> str:
    what = torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor()
    cuda = f", CUDA {torch.version.cuda}" if dev.type == "cuda" else ""
    return (
        f"{what or platform.machine()}; torch {torch.__version__}{cuda}; {dtype}; median of "
        f"{timer.reps} after {timer.warmup} warm-up runs "
        f"({'torch.cuda.Event' if timer.cuda else 'time.perf_counter_ns'}); "
        f"{time.strftime('%Y-%m-%d')}"
    )


def profile_model(
    model: ModelSpec,
    tp: int,
    gpu: str,
    grids: Grids,
    timer: OpTimer,
    dtype: torch.dtype,
    block_size: int = 16,
) -> GPUProfile:
    """One (model, tp) profile: linear ops on the token grid and its attention tables."""
    s = Shard.of(model, tp)
    layer, step = linear_times(s, grids.tokens, timer, dtype)
    shape = ModelShape(
        hidden=model.hidden_size,
        q_heads=model.num_heads,
        kv_heads=model.num_kv_heads,
        intermediate=model.intermediate_size,
        vocab=model.vocab_size,
        gated_mlp=model.gated_mlp,
    )
    lin = LinearOps(
        model=model.name, tp=tp, shape=shape, tokens=list(grids.tokens), layer_us=layer,
        step_us=step,
    )  # fmt: skip
    attn = AttentionOps(
        q_heads=s.q_heads,
        kv_heads=s.kv_heads,
        head_dim=s.head_dim,
        block_size=block_size,
        decode=decode_grid(s, grids, block_size, timer, dtype),
        prefill=prefill_grid(s, grids, block_size, timer, dtype),
    )
    notes = device_notes(timer.device, dtype, timer)
    return GPUProfile(gpu=gpu, source=SOURCE, notes=notes, linear=[lin], attention=[attn])


def merge_profiles(old: GPUProfile, new: GPUProfile) -> GPUProfile:
    """``new``'s tables replace those of ``old`` with the same key; the rest of ``old`` stays."""
    if old.gpu != new.gpu:
        raise ConfigError(
            "out", f"the file profiles {old.gpu}, not {new.gpu}", "write to another file"
        )
    keys = {(x.model, x.tp) for x in new.linear}
    heads = {(a.q_heads, a.kv_heads, a.head_dim, a.block_size) for a in new.attention}
    linear = [x for x in old.linear if (x.model, x.tp) not in keys] + list(new.linear)
    attention = [
        a for a in old.attention if (a.q_heads, a.kv_heads, a.head_dim, a.block_size) not in heads
    ] + list(new.attention)
    return old.model_copy(update={"linear": linear, "attention": attention, "notes": new.notes})
