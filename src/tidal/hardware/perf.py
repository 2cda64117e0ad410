"""Per-step latency models: batch shape → integer nanoseconds.

A step is described by six integers (``StepShape``), so one formula serves the scheduler's plans,
the simulator's vectorised fast-forward and calibration fits:

* ``num_decodes``, ``decode_ctx`` — decode requests and the sum of their attended contexts;
* ``prefill_tokens`` — new tokens of the prefill chunks;
* ``prefill_attn`` — Σ c·(2s + c) over chunks of c new tokens after s cached ones (causal
  attention FLOPs are ``attn_flops_per_ctx_token · prefill_attn / 2``);
* ``prefill_ctx`` — Σ (s + c), the context the chunks' attention reads;
* ``num_prefills`` — chunks in the step.

Exactness (docs/DESIGN.md §2): ``step_seconds`` uses only +, −, ×, ÷ and max on float64, written so
that evaluating it on a numpy array of decode contexts performs the same IEEE operations in the
same order as on Python scalars. ``decode_run_ns`` is therefore bit-identical to calling
``step_ns`` once per step, which the fast-forward property test asserts.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from tidal.hardware.gpus import GPUSpec
from tidal.hardware.models import ModelSpec


class StepShape(NamedTuple):
    num_decodes: int = 0
    decode_ctx: int = 0
    prefill_tokens: int = 0
    prefill_attn: int = 0
    prefill_ctx: int = 0
    num_prefills: int = 0


class PerfModel(ABC):
    """Step time of a batch. Subclasses implement :meth:`step_seconds`."""

    name = "base"
    schedules_ahead = False
    """Whether the engine plans step N + 1 while step N runs (vLLM's async scheduling,
    SGLang's overlap scheduler), so that a request arriving during a step is first scheduled
    one step later (:class:`tidal.engine.engine.Engine`). Wrappers: :func:`schedules_ahead`."""

    @abstractmethod
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
        """Seconds for one step; ``decode_ctx`` may be a numpy array (then pass ``np.maximum``)."""

    def step_ns(
        self,
        num_decodes: int,
        decode_ctx: int,
        prefill_tokens: int = 0,
        prefill_attn: int = 0,
        prefill_ctx: int = 0,
        num_prefills: int = 0,
    ) -> int:
        s = self.step_seconds(
            num_decodes, decode_ctx, prefill_tokens, prefill_attn, prefill_ctx, num_prefills
        )
        return max(1, math.floor(s * 1e9 + 0.5))

    def shape_ns(self, shape: StepShape) -> int:
        return self.step_ns(*shape)

    def idle_penalty_ns(self, idle_ns: int) -> int:
        """Extra time of the first step after the instance sat idle for ``idle_ns`` (caches
        and memory cool down meanwhile). 0 unless a measured model says otherwise."""
        return 0

    def decode_run_ns(self, num_decodes: int, decode_ctx: int, num_steps: int) -> np.ndarray:
        """Durations of ``num_steps`` pure-decode steps whose total context grows by
        ``num_decodes`` tokens per step (each request attends one more token each step)."""
        ctx = decode_ctx + num_decodes * np.arange(num_steps, dtype=np.int64)
        s = self.step_seconds(num_decodes, ctx, 0, 0, 0, 0, np.maximum)
        ns = np.floor(s * 1e9 + 0.5).astype(np.int64)
        return np.maximum(ns, 1)

    def decode_affine(self, num_decodes: int) -> tuple[float, float] | None:
        """``(c, a)`` such that a pure-decode step of ``num_decodes`` requests with total
        context ``x`` takes exactly ``c + a * x`` seconds — the same float operations, in the
        same order, as :meth:`step_seconds` — or None when the model is not affine in the
        context. Lets the simulator time long decode runs without calling the model per step."""
        return None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


def schedules_ahead(perf: PerfModel) -> bool:
    """:attr:`PerfModel.schedules_ahead` of ``perf`` or of the model it wraps (``base``:
    SM sharing, interference, pipeline stages, speculation)."""
    p: object = perf
    while isinstance(p, PerfModel):
        if p.schedules_ahead:
            return True
        p = getattr(p, "base", None)
    return False


class WrappedPerfModel(PerfModel):
    """A perf model that adjusts another's step time (SM sharing, mixed-step interference).

    ``adjust`` receives the base model's seconds (a float, or an array of a decode run) and
    must keep the exactness contract: the same IEEE operations on scalars and arrays."""

    def __init__(self, base: PerfModel) -> None:
        self.base = base

    @abstractmethod
    def adjust(self, seconds: Any, num_decodes: int, prefill_tokens: int) -> Any: ...

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
        s = self.base.step_seconds(
            num_decodes, decode_ctx, prefill_tokens, prefill_attn, prefill_ctx, num_prefills, mx
        )
        return self.adjust(s, num_decodes, prefill_tokens)

    def idle_penalty_ns(self, idle_ns: int) -> int:
        return self.base.idle_penalty_ns(idle_ns)


class RooflinePerfModel(PerfModel):
    """Roofline: per layer group, time = max(FLOPs / (η_F·F), bytes / (η_B·BW)).

    Groups (``docs/research/ebplus.md`` §1.4): linear layers (compute vs weight read; the LM head
    only for sampled positions), prefill attention (compute vs KV read), decode attention (compute
    vs KV read, in practice bandwidth-bound), KV writes, a TP all-reduce term (two ring all-reduces
    of ``tokens × hidden`` activations per layer) and a host overhead per step and per sequence
    (scheduling, input preparation, sampling; CUDA-graph mode). Defaults η_F = 0.6 and η_B = 0.8
    reproduce the measured Qwen3-8B β_p and β_d on H200 and RTX PRO 6000 within a few percent
    (docs/research/ebplus.md §1.4). MoE layers read only the experts the step's tokens touch: E·(1 −
    (1 − k/E)^tokens) per layer in expectation under uniform routing.
    """

    name = "roofline"

    def __init__(
        self,
        model: ModelSpec,
        gpu: GPUSpec,
        tp: int = 1,
        eff_flops: float = 0.6,
        eff_bw: float = 0.8,
        step_overhead_s: float = 5e-4,
        seq_overhead_s: float = 5e-6,
        allreduce_latency_s: float = 1e-5,
    ) -> None:
        self.model, self.gpu, self.tp = model, gpu, tp
        self.eff_flops, self.eff_bw = eff_flops, eff_bw
        self.step_overhead_s, self.seq_overhead_s = step_overhead_s, seq_overhead_s
        flops = eff_flops * gpu.flops * tp
        bw = eff_bw * gpu.mem_bw * tp
        kvb = model.kv_bytes_per_token_per_gpu(tp) * tp
        self._lin = model.linear_flops_per_token / flops
        self._head = model.head_flops_per_token / flops
        self._attn_p = model.attn_flops_per_ctx_token / 2 / flops
        self._kv_read = kvb / bw
        self._attn_d = max(model.attn_flops_per_ctx_token / flops, self._kv_read)
        self._kv_write = kvb / (gpu.mem_bw * tp)
        dt = model.dtype_bytes
        head_bytes = model.embedding_params * dt
        if model.is_moe:
            expert_bytes = model.num_layers * model.expert_params * dt
            self._dense_w = (model.non_expert_weight_bytes - model.embedding_params * dt) / bw
            self._dense_w += head_bytes / bw if not model.tie_embeddings else 0.0
            self._expert_w = expert_bytes / bw
            self._miss = 1.0 - model.num_active_experts / model.num_experts
        else:
            layer_bytes = (
                model.num_layers * (model.attn_params_per_layer + model.mlp_params_per_layer) * dt
            )
            self._dense_w = (layer_bytes + head_bytes) / bw
            self._expert_w = 0.0
            self._miss = 0.0
        if tp > 1:
            ring = 2 * (tp - 1) / tp
            self._comm0 = 2 * model.num_layers * allreduce_latency_s
            self._comm = 2 * model.num_layers * ring * model.hidden_size * dt / gpu.peer_bw
        else:
            self._comm0 = 0.0
            self._comm = 0.0

    def _weights(self, tokens: int) -> float:
        if self._expert_w == 0.0:
            return self._dense_w
        touched = self.model.num_experts * (1.0 - self._miss**tokens)
        return self._dense_w + self._expert_w * touched

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
        seqs = num_decodes + num_prefills
        fixed = self.step_overhead_s + self.seq_overhead_s * seqs
        lin = max(self._lin * tokens + self._head * seqs, self._weights(tokens))
        attn_p = max(self._attn_p * prefill_attn, self._kv_read * prefill_ctx)
        rest = self._kv_write * tokens + (self._comm0 + self._comm * tokens if self.tp > 1 else 0.0)
        return fixed + lin + attn_p + rest + self._attn_d * decode_ctx

    def decode_affine(self, num_decodes: int) -> tuple[float, float] | None:
        # step_seconds ends with "+ self._attn_d * decode_ctx"; with a context of 0 the sum
        # before it is returned unchanged (x + 0.0 == x), so c + a·x repeats it exactly.
        return self.step_seconds(num_decodes, 0, 0, 0, 0, 0), self._attn_d

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "eff_flops": self.eff_flops,
            "eff_bw": self.eff_bw,
            "step_overhead_s": self.step_overhead_s,
            "seq_overhead_s": self.seq_overhead_s,
        }


class LinearPerfModel(PerfModel):
    """Calibrated linear step costs (EB paper, docs/research/ebplus.md §1.1 and §1.5).

    Prefill-only: α_p + β_p·P. Decode-only: α_d + β_d0·n + κ·Σctx, where β_d was measured at
    a ``ctx_ref``-token context (512 in the EB paper) and is split as β_d = β_d0 + κ·ctx_ref
    with κ = KV bytes/(η_B·BW) (§7 Q4), so decode cost grows with context. Mixed steps:
    α_p + β_p·P + β_d0·n + κ·Σctx (α_MB = α_p, the paper's approximation), plus an optional
    interference term added by subclasses.

    ``floor_s_per_token`` (default 0: none) bounds a step below by ``floor·(n + P)``: the
    compute time of its tokens at the GEMM efficiency of the measuring testbed, for fits whose
    slope is only valid over the batch sizes they were measured at (a line extrapolated far
    beyond them would outrun the GPU's peak FLOP rate; :mod:`tidal.hardware.calibration`).
    """

    name = "linear"

    def __init__(
        self,
        alpha_p: float,
        beta_p: float,
        alpha_d: float,
        beta_d: float,
        kappa: float,
        ctx_ref: int = 512,
        source: str = "",
        floor_s_per_token: float = 0.0,
    ) -> None:
        self.alpha_p, self.beta_p, self.alpha_d, self.beta_d = alpha_p, beta_p, alpha_d, beta_d
        self.kappa, self.ctx_ref, self.source = kappa, ctx_ref, source
        self.floor_s_per_token = floor_s_per_token
        self.beta_d0 = beta_d - kappa * ctx_ref
        if self.beta_d0 < 0:
            raise ValueError("kappa·ctx_ref exceeds beta_d: the context slope is too steep")

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
        s = self._linear(num_decodes, decode_ctx, prefill_tokens)
        if self.floor_s_per_token:
            return mx(s, self.floor_s_per_token * (num_decodes + prefill_tokens))
        return s

    def _linear(self, num_decodes: int, decode_ctx: Any, prefill_tokens: int) -> Any:
        if prefill_tokens == 0:
            if num_decodes == 0:
                return 0.0
            return self.alpha_d + self.beta_d0 * num_decodes + self.kappa * decode_ctx
        base = self.alpha_p + self.beta_p * prefill_tokens
        if num_decodes == 0:
            return base
        return base + self.beta_d0 * num_decodes + self.kappa * decode_ctx

    def decode_affine(self, num_decodes: int) -> tuple[float, float] | None:
        if num_decodes == 0:
            return None
        c = self.alpha_d + self.beta_d0 * num_decodes
        if self.floor_s_per_token and self.floor_s_per_token * num_decodes > c:
            return None  # the floor may bind: not affine in the context
        return c, self.kappa

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "alpha_p": self.alpha_p,
            "beta_p": self.beta_p,
            "alpha_d": self.alpha_d,
            "beta_d": self.beta_d,
            "kappa": self.kappa,
            "ctx_ref": self.ctx_ref,
            "floor_s_per_token": self.floor_s_per_token,
            "source": self.source,
        }
