"""One deployment's per-operator curves cut from the engine's measured tables (``--perf-model
engine``): GEMMs, the MoE layer, attention grids and all-reduce, in the profile format of
:class:`~tidal.hardware.opprofile.Deployment`, with the corrected roofline where a table lacks
a part. :class:`tidal.hardware.engine_perf.EnginePerfModel` sums the step from them (its module
docstring lists the operators and their shapes).
"""

from __future__ import annotations

from tidal.core.errors import ConfigError
from tidal.hardware import engine_attention
from tidal.hardware.corrected import CorrectedRooflinePerfModel
from tidal.hardware.engine_data import TableSet, fallbacks
from tidal.hardware.engine_moe_deepgemm import deepgemm_moe, padding_s
from tidal.hardware.engine_tables import (
    Grid,
    Points,
    allreduce_us,
    attention_grids,
    gemm_us,
    moe_us,
    nccl_us,
)
from tidal.hardware.interp import Curve
from tidal.hardware.models import ModelSpec
from tidal.hardware.opprofile import (
    AllReduceOps,
    AttentionOps,
    Grid2D,
    LinearOps,
    ModelShape,
)

SHARED_EXPERTS_STREAM_TOKENS = {"vllm": 256, "sglang": 1024}
"""Largest MoE input (tokens) whose shared experts run on a second CUDA stream beside the
router and routed experts, by engine: vLLM's ``VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD``
(default 256; ``FusedMoE``'s shared-experts stream) and SGLang's ``DUAL_STREAM_TOKEN_THRESHOLD``
(1024; ``DeepseekV2MoE.forward_normal_dual_stream``). Up to it a MoE layer with shared experts
costs max(router + routed experts, shared experts), as AIConfigurator's decode step prices it
(``generation_moe_overlap``); above it, their sum. (SGLang may instead fuse DeepSeek-V3's
shared expert into the routed kernel as a 257th expert: one more expert's weights in a
memory-bound step, also far below the serial sum.)"""


GEMM_ROWS = {"fp8_block": "fp8"}
"""Checkpoint dtype → the GEMM rows that time it. The tables' ``fp8_block`` rows (DeepGEMM,
FlashInfer) cost 55–90 µs on H100/H200 and 170–260 µs on B200 whatever the shape, from m = 1
to m = 4096: a per-call overhead of the eager measurement that vLLM's CUDA graphs do not pay
(BENCHMARKS.md, issue 28: with them MiniMax-M2.5 decodes 2–3× slower than measured), so
block-scaled FP8 layers read the per-tensor FP8 kernel's rows."""


TP_QK_NORM_ARCHITECTURES = frozenset({"MiniMaxM2ForCausalLM"})
"""Architectures whose q/k RMSNorm spans the whole projected q (all heads) and k, not one head:
under TP a GPU holds 1/TP of the heads, so the mean of squares is summed over the TP group.
vLLM's MiniMax-M2 (``models/minimax_m2.py``: ``MiniMaxM2Attention.forward`` →
``MiniMaxText01RMSNormTP.forward_qk``, ``layers/mamba/linear_attn.py``) all-reduces the
per-token ``[q_var, k_var]`` (fp32, 8 bytes a token) across the TP group once a layer at
TP > 1, between the QKV projection and RoPE; the config says ``use_qk_norm`` with
``qk_norm_type: per_layer``. A per-head qk-norm (Qwen3) needs no collective."""


ENGINE_MOE_KERNELS = {
    ("vllm", "fp8_block", "sm100"): "flashinfer_trtllm",
}
"""(engine, MoE dtype, GPU family) → the fused-MoE kernel the engine runs, where a version's
table may hold rows of another one. vLLM picks the FP8 MoE backend in priority order, the first
that supports the layer (``select_fp8_moe_backend``,
``vllm/model_executor/layers/fused_moe/oracle/fp8.py``: FlashInfer TRT-LLM, FlashInfer CUTLASS,
DeepGEMM, …, Triton); on Blackwell (SM100) block-scaled FP8 experts run FlashInfer's TRT-LLM
kernel, which is what the 0.24 tables record (``kernel_source``
``vllm_fp8moe_flashinfer_trtllm_…``: the collector goes through that selection). The B200
0.19/0.22 ``fp8_block`` rows time ``vllm_fused_moe``, the Triton kernel called directly, whose
cost steps up ~1.7× above 64 tokens (0.27 → 0.46 ms for MiniMax-M2.5 at MoE TP 2), a step the
engine does not show (MiniMax-M2.5 FP8 on 2 B200s, vLLM 0.19: TPOT 22.3 ms at C = 64, 28.0 ms
at C = 128). So those layers read the rows of the kernel named here, from the nearest version
that has them; Hopper's block-FP8 experts under TP run Triton (H200 0.24: ``…_tritonexperts``),
as the older rows do."""

SM100_SYSTEMS = frozenset({"b200_sxm", "b300_sxm", "gb200", "gb300"})
"""The tables' systems with Blackwell (SM100-family) GPUs."""


def engine_moe_kernel(engine: str, dtype: str, system: str) -> str | None:
    """The ``kernel_source`` fragment of the MoE kernel the engine runs
    (:data:`ENGINE_MOE_KERNELS`), None where any measured kernel stands for it."""
    family = "sm100" if system in SM100_SYSTEMS else ""
    return ENGINE_MOE_KERNELS.get((engine, dtype, family))


class _Parts(dict[str, str]):
    """Where each step component came from (``engine:<family>`` or the fallback's name)."""


def _curve_on(points: Points, grid: list[float]) -> list[float]:
    c = Curve(points[0], points[1])
    return [c.at(x) for x in grid]


class EngineDeployment:
    """The per-operator curves of (model, GPU tables, TP, EP) in the profile format."""

    def __init__(
        self, ts: TableSet, model: ModelSpec, tp: int, ep: bool, distribution: str,
        fb: CorrectedRooflinePerfModel, dp: int = 1, moe_tp: int | None = None,
    ) -> None:  # fmt: skip
        self.ts, self.model, self.tp, self.ep, self.fb, self.dp = ts, model, tp, ep, fb, dp
        self.moe_tp = moe_tp
        self.parts = _Parts()
        self.distribution = distribution
        self.tokens = self._token_grid()
        """Tokens of one data-parallel rank (the tables' m); the step's are ``dp`` times."""
        self.notes: list[str] = []

    # ------------------------------------------------------------------ GEMMs
    def _gemm(self, dtype: str, n: int, k: int, part: str) -> list[float] | None:
        dtype = GEMM_ROWS.get(dtype, dtype)
        pts = gemm_us(self.ts, dtype, n, k)
        if pts is None and dtype != "bfloat16":
            pts = gemm_us(self.ts, "bfloat16", n, k)
            if pts is not None:
                self.notes.append(f"{part}: no {dtype} GEMM table on {self.ts.system}; bf16 used")
                self.parts.setdefault(part, "engine:gemm/bfloat16")  # the rows actually read
        if pts is None:
            return None
        return _curve_on(pts, [float(t) for t in self.tokens])

    def _token_grid(self) -> list[int]:
        pts = gemm_us(self.ts, "bfloat16", 4096, 4096)
        if pts is None:
            raise ConfigError("perf_model", f"no bf16 GEMM table for {self.ts.system}")
        return [int(m) for m in pts[0]]

    def _fallback_gemm(self, n: int, k: int) -> list[float]:
        return [1e6 * self.fb.gemm_s(t, k, n) for t in self.tokens]

    def gemm(self, dtype: str, n: int, k: int, part: str) -> list[float]:
        got = self._gemm(dtype, n, k, part)
        if got is None:
            self.parts[part] = self.fb.name
            return self._fallback_gemm(n, k)
        self.parts.setdefault(part, f"engine:gemm/{dtype}")
        return got

    def mlp(self, inter: int, dtype: str, part: str) -> list[float]:
        m, tp = self.model, self.tp
        up = (2 if m.gated_mlp else 1) * inter // tp
        a = self.gemm(dtype, up, m.hidden_size, part)
        b = self.gemm(dtype, m.hidden_size, inter // tp, part)
        return [x + y for x, y in zip(a, b, strict=True)]

    # ------------------------------------------------------------------ layers
    def attention_proj(self) -> list[float]:
        special = engine_attention.projection_us(self)  # MLA, DSA, Gated DeltaNet, gated Q
        if special is not None:
            return special
        m, tp = self.model, self.tp
        q, kv, d = m.num_heads // tp, max(m.num_kv_heads // tp, 1), m.d_head
        qkv = self.gemm(m.gemm_quant, (q + 2 * kv) * d, m.hidden_size, "attention_proj")
        o = self.gemm(m.gemm_quant, m.hidden_size, q * d, "attention_proj")
        return [x + y for x, y in zip(qkv, o, strict=True)]

    def moe_layer(self) -> list[float]:
        """One MoE layer against a rank's tokens t: the fused-MoE rows of the MoE group (the
        dp·tp GPUs, experts split over them (TP) or sharded (EP)) at the dp·t tokens the
        group routes, the router GEMM, the shared experts (on a second stream, overlapped with
        the router and routed experts, up to :data:`SHARED_EXPERTS_STREAM_TOKENS`), and with
        data parallelism the tokens' all-gather and reduce-scatter across the group (vLLM's
        default all2all)."""
        m, group = self.model, self.tp * self.dp
        inter = m.moe_intermediate_size or m.intermediate_size
        moe_tp, moe_ep = (1, group) if self.ep else (group, 1)
        if self.moe_tp is not None:  # a hybrid split: experts over moe_ep groups of moe_tp
            moe_tp, moe_ep = self.moe_tp, group // self.moe_tp
        routed = [float(self.dp * t) for t in self.tokens]
        want = engine_moe_kernel(self.ts.engine, m.moe_quant, self.ts.system)
        got = None
        for kernel in dict.fromkeys([want, None]):  # the engine's kernel, else any measured
            for ts in fallbacks(self.ts, "moe"):
                got = moe_us(
                    ts, m.moe_quant, m.hidden_size, inter, m.num_active_experts, m.num_experts,
                    moe_tp, moe_ep, self.distribution, kernel,
                )  # fmt: skip
                if got is not None:
                    break
            if got is not None:
                break
        if got is not None:
            (xs, ys), dist = got
            v, k = ts.family_version("moe"), f"/{kernel}" if kernel else ""
            self.parts["moe"] = f"engine:moe/{v}/{m.moe_quant}{k}/{dist}/tp{moe_tp}ep{moe_ep}"
            experts = _curve_on((xs, ys), routed)
        else:
            self.parts["moe"] = self.fb.name
            experts = [1e6 * self.fb.layer_linear_s(int(t)) for t in routed]
        pad = self.deepgemm_padding(moe_tp, moe_ep, routed)
        if pad is not None:
            experts = [a + b for a, b in zip(experts, pad, strict=True)]
        router = self.gemm("bfloat16", m.num_experts, m.hidden_size, "moe_router")
        out = [a + b for a, b in zip(experts, router, strict=True)]
        if m.shared_intermediate_size:
            shared = self.mlp(m.shared_intermediate_size, m.gemm_quant, "moe_shared")
            two = SHARED_EXPERTS_STREAM_TOKENS.get(self.ts.engine, 0)  # tokens on two streams
            out = [max(a, b) if r <= two else a + b
                   for a, b, r in zip(out, shared, routed, strict=True)]  # fmt: skip
        if self.dp > 1:
            comm = self.dispatch_combine(routed)
            out = [a + b for a, b in zip(out, comm, strict=True)]
        return out

    def deepgemm_padding(self, moe_tp: int, moe_ep: int, routed: list[float]) -> list[float] | None:
        """µs a MoE layer adds where the engine runs DeepGEMM's contiguous grouped GEMM, not
        the Triton kernel the tables time (vLLM 0.11.1–0.17 on Hopper, block FP8; module
        :mod:`tidal.hardware.engine_moe_deepgemm`): the padding rows' traffic; None elsewhere."""
        m, ts = self.model, self.ts
        if not deepgemm_moe(ts.engine, ts.version, ts.system, m.moe_quant, self.tp):
            return None
        inter = (m.moe_intermediate_size or m.intermediate_size) // moe_tp
        bw = self.fb.gpu.mem_bw * self.fb.c.gpu_const(self.fb.gpu.name).eta_bw
        experts = m.num_experts // moe_ep
        self.parts["moe_kernel"] = f"deepgemm-contiguous (vllm {ts.version}, padding rows)"
        k, h = m.num_active_experts, m.hidden_size
        return [1e6 * padding_s(t, k, experts, h, inter, bw) for t in routed]

    def dispatch_combine(self, routed: list[float]) -> list[float]:
        """All-gather plus reduce-scatter of the group's hidden states (2 bytes a value)
        across dp·tp GPUs, from the NCCL tables (8 GPUs' rows beyond one node)."""
        n = min(self.tp * self.dp, 8)
        h = self.model.hidden_size * 2
        ag, rs = nccl_us(self.ts.system, "all_gather", n), nccl_us(self.ts.system,
                                                                   "reduce_scatter", n)
        if ag is None or rs is None:
            self.parts["moe_dispatch"] = self.fb.name
            return [2e6 * self.fb.allreduce_s(t * h) for t in routed]
        self.parts["moe_dispatch"] = f"engine:nccl/{n}gpu"
        a, r = Curve(*ag), Curve(*rs)
        return [a.at(t * h) + r.at(t * h) for t in routed]

    def mlp_layer(self) -> list[float]:
        m = self.model
        if not m.is_moe:
            return self.mlp(m.intermediate_size, m.gemm_quant, "mlp")
        moe = self.moe_layer()
        dense = m.num_dense_layers
        if not dense:
            return moe
        d = self.mlp(m.intermediate_size, m.gemm_quant, "mlp")
        L = m.num_layers
        return [((L - dense) * a + dense * b) / L for a, b in zip(moe, d, strict=True)]

    def elementwise(self) -> list[float]:
        """A layer's elementwise ops from the corrected roofline (no table holds them): the
        two RMSNorms, RoPE, SiLU·mul and the residual add, plus the per-head q/k RMSNorms of
        a ``qk_norm`` model (Qwen3: ``Qwen3Attention.forward`` in vLLM's ``qwen3.py``
        normalises ``q_by_head`` and ``k_by_head`` between the QKV GEMM and RoPE)."""
        fb = self.fb
        self.parts["elementwise"] = fb.name
        return [1e6 * (fb._e0 + fb._e1 * t + fb.qk_norm_s(t)) for t in self.tokens]

    def embedding(self) -> list[float]:
        """The embedding of a rank's t tokens: the gather (corrected roofline) and, at TP > 1,
        the all-reduce of its T × H output. vLLM's ``VocabParallelEmbedding`` (SGLang's
        too) holds 1/TP of the vocabulary a GPU, zeroes the rows of tokens outside its shard
        and sums the result over the TP group (``tensor_model_parallel_all_reduce``): one
        all-reduce a step beside the layers' 2L, as AIConfigurator's ``embedding_ar``."""
        fb, m = self.fb, self.model
        out = [1e6 * (fb._emb0 + fb._emb1 * t) for t in self.tokens]
        if self.tp == 1:
            return out
        h = m.hidden_size * m.dtype_bytes
        pts = allreduce_us(self.ts, self.tp)
        if pts is None:
            return [e + 1e6 * fb.allreduce_s(t * h) for e, t in zip(out, self.tokens, strict=True)]
        ar = Curve(*pts)
        return [e + ar.at(t * h) for e, t in zip(out, self.tokens, strict=True)]

    def logits_gather(self) -> list[float]:
        """The all-gather of the vocabulary-sharded logits at TP > 1, against the step's
        sampled rows s: vLLM's ``LogitsProcessor._gather_logits`` runs
        ``tensor_model_parallel_all_gather`` on the ``ParallelLMHead`` output (each GPU holds
        V/TP columns) before the sampler, outside the CUDA graph (NCCL); s·V·2 bytes are
        gathered (bf16 logits), priced from the NCCL all-gather table (0 at TP 1; the
        corrected roofline's all-reduce time where the GPU has no NCCL table)."""
        if self.tp == 1:
            return [0.0] * len(self.tokens)
        v = self.model.vocab_size * self.model.dtype_bytes
        pts = nccl_us(self.ts.system, "all_gather", min(self.tp, 8))
        if pts is None:
            self.parts["logits_gather"] = self.fb.name
            return [1e6 * self.fb.allreduce_s(s * v) for s in self.tokens]
        self.parts["logits_gather"] = f"engine:nccl/{min(self.tp, 8)}gpu"
        ag = Curve(*pts)
        return [ag.at(s * v) for s in self.tokens]

    def qk_norm_allreduce(self) -> list[float] | None:
        """The TP-wide qk-norm's all-reduce of a rank's t tokens (8·t bytes: fp32 q and k
        variances, :data:`TP_QK_NORM_ARCHITECTURES`), µs a layer; None where the model has
        none, at TP 1, or without an all-reduce table (then the corrected roofline's)."""
        if self.tp == 1 or self.model.architecture not in TP_QK_NORM_ARCHITECTURES:
            return None
        pts = allreduce_us(self.ts, self.tp)
        self.parts["qk_norm_allreduce"] = "engine:allreduce" if pts else self.fb.name
        if pts is None:
            return [1e6 * self.fb.allreduce_s(8 * t) for t in self.tokens]
        ar = Curve(*pts)
        return [ar.at(8 * t) for t in self.tokens]

    def linear(self) -> LinearOps:
        m = self.model
        layer = {
            "attention_proj": self.attention_proj(),
            "mlp": self.mlp_layer(),
            "elementwise": self.elementwise(),
        }
        qk = self.qk_norm_allreduce()
        if qk is not None:
            layer["qk_norm_allreduce"] = qk
        head = self.gemm("bfloat16", m.vocab_size // self.tp, m.hidden_size, "lm_head")
        head = [a + b for a, b in zip(head, self.logits_gather(), strict=True)]
        emb = self.embedding()
        shape = ModelShape(
            hidden=m.hidden_size, q_heads=m.num_heads, kv_heads=m.num_kv_heads,
            intermediate=m.intermediate_size, vocab=m.vocab_size, gated_mlp=m.gated_mlp,
        )  # fmt: skip
        return LinearOps(
            model=m.name, tp=self.tp, shape=shape, tokens=[self.dp * t for t in self.tokens],
            layer_us=layer, step_us={"emb": emb, "lm_head": head},
        )  # fmt: skip

    # ------------------------------------------------------------------ attention
    def _kv_dtype(self) -> str:
        return "fp8" if self.model.kv_cache_dtype.startswith("fp8") else "bfloat16"

    def attention(self) -> tuple[AttentionOps | None, Grid2D | None]:
        """The decode grid in the profile format and the prefill (batch × length) grid."""
        m, tp = self.model, self.tp
        q, kv, d = m.num_heads // tp, max(m.num_kv_heads // tp, 1), m.d_head
        special = engine_attention.grids(self)  # MLA, DSA, hybrid linear attention
        if special is not None:
            dec, pre = special
        else:
            dec, pre = attention_grids(self.ts, q, kv, d, self._kv_dtype())
        if special is None and m.sliding_window and m.num_sliding_layers:
            wdec, wpre = attention_grids(self.ts, q, kv, d, self._kv_dtype(), m.sliding_window)
            share = m.num_sliding_layers / m.num_layers
            dec = _blend(dec, wdec, share)
            pre = _blend(pre, wpre, share)
        if dec is None:
            self.parts["attention_decode"] = self.fb.name
        if pre is None:
            self.parts["attention_prefill"] = self.fb.name
        dp = self.dp  # rows: the step's requests, dp ranks of the table's batch each
        grid = None if dec is None else Grid2D(rows=[dp * r for r in dec[0]], cols=dec[1],
                                               us=dec[2])  # fmt: skip
        ops = AttentionOps(q_heads=q, kv_heads=kv, head_dim=d, decode=grid)
        pgrid = None if pre is None else Grid2D(rows=[dp * r for r in pre[0]], cols=pre[1],
                                                us=pre[2])  # fmt: skip
        return ops, pgrid

    def all_reduce(self) -> AllReduceOps | None:
        if self.tp == 1:
            return None
        pts = allreduce_us(self.ts, self.tp)
        if pts is None:
            self.parts["all_reduce"] = self.fb.name
            return None
        # MeasuredPerfModel prices the step's T·H·2 bytes; a rank all-reduces T/dp of them
        return AllReduceOps(link="dgx", tp=self.tp, bytes=[int(self.dp * x) for x in pts[0]],
                            us=pts[1])  # fmt: skip


def _blend(full: Grid | None, win: Grid | None, share: float) -> Grid | None:
    """(1 − share)·full + share·window on the cells both grids hold (None: neither usable)."""
    if full is None or win is None:
        return full if win is None else None
    rows = [r for r in full[0] if r in win[0]]
    cols = [c for c in full[1] if c in win[1]]
    fi = {(r, c): full[2][i][j] for i, r in enumerate(full[0]) for j, c in enumerate(full[1])}
    wi = {(r, c): win[2][i][j] for i, r in enumerate(win[0]) for j, c in enumerate(win[1])}
    def mix(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else (1.0 - share) * a + share * b

    us = [[mix(fi[r, c], wi[r, c]) for c in cols] for r in rows]
    return rows, cols, us
