"""Step times from the serving engine's measured operator tables (``--perf-model engine``).

The engine's tables (:mod:`engine_data`, :mod:`engine_tables`) are cut, once per deployment,
into the same per-operator curves as a ``tidal-gpu-profile/1`` profile
(:class:`~tidal.hardware.opprofile.Deployment`), and the step is summed as
:class:`~tidal.hardware.measured.MeasuredPerfModel` sums it, so the exactness contract
(fast-forward bit-identical to per-step evaluation) carries over unchanged. Per layer, one GPU:

* GEMMs of the layer's dtype (``ModelSpec.gemm_quant``): QKV (N = (q + 2·kv)·d / TP, K = H),
  O (N = H, K = q·d / TP), and for a dense MLP gate+up (N = 2I / TP) and down (K = I / TP);
* a MoE layer (``moe_quant``): the fused-MoE table at the deployment's (MoE TP, EP) and routing
  distribution, plus the router GEMM (N = experts) and the shared experts' GEMMs (on a second
  stream up to the engine's :data:`SHARED_EXPERTS_STREAM_TOKENS`: their max); the leading
  ``num_dense_layers`` of a MoE model run the dense MLP (the per-layer curve is the mean);
* attention: decode from the generation table at (batch, context per request), prefill from the
  context table at (chunks in the step, length): c new tokens after s cached cost T(c) plus
  what the rows s…s + c cost more than rows 0…c (for a convex T: T(s + c) − T(s) plus the fixed
  cost), floored at the decode table's read of the s + c keys
  (:mod:`tidal.hardware.engine_prefill`), plus for vLLM's MLA the up-projection of the cached
  latents (:func:`mla_context_up`); sliding-window layers read the table of their
  window, and the per-layer grid is the mean over layers;
* two all-reduces of T·H·2 bytes per layer from the engine's custom all-reduce (TP > 1);
* data-parallel attention (``dp`` ranks of TP each, vLLM's ``--data-parallel-size``): the
  step's requests are shared evenly by the ranks, which run attention, its projections and
  the host work concurrently (every per-rank curve is read at 1/dp of the step's tokens,
  requests or chunks), while a MoE layer routes the whole step's tokens over the dp·tp GPUs
  of its group, plus their all-gather and reduce-scatter (NCCL tables);
* per step: the LM head GEMM over the sampled rows (bf16), the embedding gather (at TP > 1
  plus the all-reduce of its output, :meth:`EngineDeployment.embedding`) and the layers'
  elementwise ops (norms, RoPE, activation, residual) and the host time from the corrected
  roofline (:mod:`tidal.hardware.corrected`), which the tables do not hold.

What a table lacks falls back to the corrected roofline; :attr:`EnginePerfModel.parts` names
the source of every part and ``summary.json`` records it with the engine, version and tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tidal.core.errors import ConfigError
from tidal.hardware.corrected import DEFAULT_HOST, CorrectedRooflinePerfModel
from tidal.hardware.engine_data import resolve_versions
from tidal.hardware.engine_deployment import (
    GEMM_ROWS,
    SHARED_EXPERTS_STREAM_TOKENS,
    EngineDeployment,
)
from tidal.hardware.engine_eager import describe_floor, eager_prefill_floor_s
from tidal.hardware.engine_host import engine_host, first_at_least, schedules_ahead
from tidal.hardware.engine_prefill import RowCost, chunk_attention_us
from tidal.hardware.engine_tables import (
    MOE_DISTRIBUTIONS,
)
from tidal.hardware.gpus import GPUSpec
from tidal.hardware.interp import Curve
from tidal.hardware.measured import MeasuredPerfModel, _Table2D
from tidal.hardware.models import ModelSpec
from tidal.hardware.opprofile import (
    Deployment,
)

__all__ = [  # the deployment's curves are re-exported from tidal.hardware.engine_deployment
    "GEMM_ROWS",
    "SHARED_EXPERTS_STREAM_TOKENS",
    "SYSTEMS",
    "EngineDeployment",
    "EnginePerfModel",
    "system_of",
]

SYSTEMS = {
    "h100": "h100_sxm",
    "h200": "h200_sxm",
    "a100-80gb": "a100_sxm",
    "l40s": "l40s",
    "rtx-pro-6000": "rtx_pro_6000_server",
    "b200": "b200_sxm",
    "b300": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
}
"""Tidal GPU name → the package's system id (GPUs without one have no engine tables)."""


def system_of(gpu: GPUSpec) -> str | None:
    return SYSTEMS.get(gpu.name.partition("@")[0])


def mla_context_up(ed: EngineDeployment, engine: str, dp: int = 1) -> Curve | None:
    """Seconds per layer, against the step's cached tokens, of vLLM's MLA prefix path
    (``MLACommonImpl._compute_prefill_context``): a prefill chunk after cached context gathers
    the context's cached latents and up-projects them (``kv_b_proj``: kv rank → per-GPU heads ×
    (nope + v)) to attend them; the module tables time fresh prompts only. None for other
    attention and engines (DSA's sparse backend attends the latents absorbed)."""
    m = ed.model
    if engine != "vllm" or not m.is_mla or m.index_topk:
        return None
    n = m.num_heads // ed.tp * (m.qk_nope_head_dim + m.v_head_dim)
    us = ed.gemm(m.gemm_quant, n, m.kv_lora_rank, "attention_prefill_context_up")
    return Curve([float(dp * t) for t in ed.tokens], [v * 1e-6 for v in us])


class EnginePerfModel(MeasuredPerfModel):
    """Step time of one deployment from the engine's measured operator tables."""

    name = "engine"

    def __init__(
        self,
        model: ModelSpec,
        gpu: GPUSpec,
        tp: int = 1,
        engine: str = "vllm",
        version: str | None = None,
        host: str = DEFAULT_HOST,
        expert_parallel: bool = False,
        moe_distribution: str = MOE_DISTRIBUTIONS[0],
        data_parallel: int = 1,
        moe_tp: int | None = None,
        async_scheduling: bool | None = None,
    ) -> None:
        system = system_of(gpu)
        if system is None:
            raise ConfigError(
                "perf_model", f"no measured engine tables for GPU {gpu.name}",
                "use --perf-model corrected-roofline (GPUs with tables: "
                + ", ".join(SYSTEMS) + ")",
            )  # fmt: skip
        self.tables = resolve_versions(system, engine, version)
        self.prefill_floor_s = eager_prefill_floor_s(engine, model)
        """A prefill step's launch-bound floor (:mod:`tidal.hardware.engine_eager`; 0: none)."""
        self.engine_host = engine_host(engine, self.tables.version, async_scheduling)
        self.schedules_ahead = schedules_ahead(engine, self.tables.version, async_scheduling)
        self._sync_host = self.engine_host is not None and not self.engine_host.overlapped
        self._async_host = (  # an overlapped CPU time that can show: max(gpu, cpu)
            self.engine_host is not None and self.engine_host.overlapped
            and self.engine_host.cpu_s(1) > 0
        )
        fb = CorrectedRooflinePerfModel(model, gpu, tp, host=host)
        self.dp = data_parallel
        if moe_tp is not None and (moe_tp < 1 or (tp * data_parallel) % moe_tp):
            raise ConfigError(
                "moe_tp_size", f"{moe_tp} does not divide the {tp * data_parallel} GPUs of the "
                "MoE group (tp × data_parallel_size)", "a divisor of tp × data_parallel_size",
            )  # fmt: skip
        ed = EngineDeployment(self.tables, model, tp, expert_parallel, moe_distribution, fb,
                              data_parallel, moe_tp)  # fmt: skip
        attn, pre = ed.attention()
        src = f"{engine}-{self.tables.version}" + (f"-dp{data_parallel}" if data_parallel > 1
                                                     else "")  # fmt: skip
        dep = Deployment(system, src, ed.linear(), attn, ed.all_reduce(), None)
        self.engine_parts, self.notes = ed.parts, ed.notes
        super().__init__(dep, model, gpu, tp, fallback=fb, host=host)
        self._ctx_up = mla_context_up(ed, engine, data_parallel)
        self._batch_pre = None if pre is None else _Table2D(pre)
        growing = 1.0 - model.num_linear_layers / model.num_layers  # GDN scans: constant
        self._row_cost = (None if pre is None or self._batch_pre is None
                          else RowCost(self._batch_pre, len(pre.cols), growing))  # fmt: skip
        if self._batch_pre is not None:
            self._pre = self._batch_pre  # step_seconds then calls attn_prefill_s

    @property
    def source(self) -> str:
        return f"engine:{self.dep.key}"

    @property
    def parts(self) -> dict[str, str]:
        out = dict(super().parts)
        src = f"engine:{self.tables.engine}-{self.tables.version}"
        for k, v in out.items():
            if v.startswith("measured:"):
                out[k] = src
        if self._batch_pre is not None:
            out["attention_prefill"] = src
        out.update(self.engine_parts)
        out["host"] = f"{self.fb.name} ({self.host})"
        return out

    def seqs_s(self, seqs: int) -> float:
        """LM head and host time of the step's sequences; with data parallelism each rank
        samples and schedules its own share, concurrently. With synchronous scheduling the
        engine core's CPU time (:mod:`tidal.hardware.engine_host`) is added."""
        t = self._seq_cache.get(seqs)
        if t is None:
            share = -(-seqs // self.dp)
            if self.dp == 1:
                t = super().seqs_s(seqs)
            else:
                head = self._head.at(seqs) if self._head is not None else self.fb.head_s(share)
                t = head + self.fb.host_s(share)
            if self._sync_host:
                assert self.engine_host is not None
                t += self.engine_host.cpu_s(share)
            self._seq_cache[seqs] = t
        return t

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
        """The step; with async scheduling ``max(gpu, cpu)``: the engine core's CPU time of
        the step runs while the GPU does, and shows only where it is the longer. A step with
        prefill tokens takes at least the eager-prefill floor (:mod:`engine_eager`; SGLang's
        MLA / GDN models); a pure-decode step (the fast-forwarded ones) is not floored, nor one
        whose chunks are all single tokens (a disaggregated decode pool's hand-over of loaded
        KV: SGLang's ``PREBUILT`` batch runs no extend forward)."""
        s = super().step_seconds(
            num_decodes, decode_ctx, prefill_tokens, prefill_attn, prefill_ctx, num_prefills, mx
        )
        if prefill_tokens > num_prefills and self.prefill_floor_s:
            s = mx(s, self.prefill_floor_s)
        if not self._async_host:
            return s
        assert self.engine_host is not None
        return mx(s, self.engine_host.cpu_s(-(-(num_decodes + num_prefills) // self.dp)))

    def decode_segment(self, num_decodes: int, decode_ctx: int) -> tuple[float, float, float]:
        """The GPU step's affine segment, cut where the overlapped CPU time stops showing
        (async scheduling: ``max(c + a·x, cpu)`` is ``cpu`` below the crossing, the GPU's
        segment from it on; the GPU step increases with the context)."""
        if not self._async_host:
            return super().decode_segment(num_decodes, decode_ctx)
        if self._dec is None:  # the fallback's affine decode, without the max
            c = MeasuredPerfModel.step_seconds(self, num_decodes, 0, 0, 0, 0, 0)
            a, end = self.fb.ctx_slope, math.inf
        else:
            c, a, end = super().decode_segment(num_decodes, decode_ctx)
        assert self.engine_host is not None
        cpu = self.engine_host.cpu_s(-(-num_decodes // self.dp))
        if c + a * decode_ctx >= cpu:
            return c, a, end
        if a <= 0.0:
            return cpu, 0.0, end
        return cpu, 0.0, first_at_least(c, a, decode_ctx, end, cpu)

    def decode_affine(self, num_decodes: int) -> tuple[float, float] | None:
        """Not affine where an overlapped CPU time can show: :meth:`decode_segment` cuts."""
        return None if self._async_host else super().decode_affine(num_decodes)

    def attn_prefill_s(
        self, prefill_tokens: int, prefill_ctx: int, num_prefills: int, prefill_attn: int = -1
    ) -> float:
        """The context-attention table read for chunks after cached context
        (:func:`~tidal.hardware.engine_prefill.chunk_attention_us`): T(k, c̄) plus what the
        chunk's rows cost more after p̄ cached tokens, scaled by the step's causal work
        ``prefill_attn`` over k equal chunks', floored at the decode table's read of the KV
        when a prefix is cached."""
        if num_prefills == 0:
            return 0.0
        pre, rc = self._batch_pre, self._row_cost
        assert pre is not None
        assert rc is not None
        cached = prefill_ctx - prefill_tokens
        us = chunk_attention_us(pre, rc, self._dec, num_prefills, prefill_tokens, cached,
                                prefill_attn)  # fmt: skip
        t = self.model.num_layers * us * 1e-6
        if cached > 0 and self._ctx_up is not None:
            t += self.model.num_layers * self._ctx_up.at(cached)
        return t

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(self.tables.describe())
        if self.engine_host is not None:
            out["engine_host"] = self.engine_host.describe()
        out.update(describe_floor(self.prefill_floor_s))
        if self.notes:
            out["notes"] = list(self.notes)
        return out
