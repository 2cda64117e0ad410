"""vLLM v1's memory plan of one instance: device memory → weights, activation peak, non-torch
memory, CUDA graphs, and the KV blocks that are left (per GPU of a tensor-parallel group).

vLLM's ``Worker.determine_available_memory`` (v1 ``gpu_worker.py``; ``memory_profiling``) takes a
snapshot, runs ``profile_run`` — one dummy forward over ``max_num_batched_tokens`` tokens spread
over ``R = min(max_num_seqs, max_num_batched_tokens)`` requests, then the sampler on those R
rows — and sizes the KV cache as::

    requested  = gpu_memory_utilization · total_gpu_memory           (driver's total, GiB)
    available  = requested − weights − torch_peak_increase − non_torch_increase − cudagraph
    num_blocks = ⌊available / (block_size · KV bytes per token per GPU)⌋

(the CUDA-graph estimate is subtracted since vLLM v0.19, ``VLLM_MEMORY_PROFILER_ESTIMATE_
CUDAGRAPHS=1``; before, graphs came out of the ``1 − utilization`` headroom). The v1
``BlockPool`` keeps one block as its null block, so the scheduler holds ``num_blocks − 1``:
``kv_capacity_tokens = (num_blocks − 1) · block_size``. Each term here:

* **total** — ``GPUSpec.mem_bytes``: the CUDA-reported total in GiB (79.11 GiB on an H100).
* **weights** — ``ModelSpec.weight_bytes / tp``.
* **activation peak** ``A = max(F, S)``, bytes, from the shapes (T tokens, dtype b bytes,
  hidden h, intermediate I, heads n_q / n_kv of width d, vocab V, top-k experts k):

  - forward ``F = T·b·max(h + (2·n_q + 2·n_kv)·d/tp, h + 3·I/tp)``: the largest set of tensors
    alive at once in one layer under torch.compile (dead buffers are freed) — the residual
    stream beside the QKV projection and the attention output, or beside the fused gate/up
    projection (2I/tp) and its SiLU·mul product (I/tp). A plain 2-matrix MLP holds 2I/tp;
    an MoE layer holds k·(3I_e/tp + h) per token (fused-MoE caches, expert width I_e) plus a
    shared expert's 3I_s/tp; a MoE model's leading dense layers 3I/tp; a Gated DeltaNet layer
    its q/k/v/z projection. Attention itself is
    skipped in the profiling forward (no KV cache yet).
  - sampler ``S = R·V·28 + T·h·b + R·h·b``: the dummy sampler runs temperature 0.5, top-p 0.9,
    top-k V−1 on PyTorch's top-k/top-p path; at its peak it holds per logit the bf16 logits (2),
    their fp32 copy (4), the sorted values (4) and int64 indices (8), two bool masks (2), the
    cumulative softmax (4) and the scattered result (4) = 28 bytes, while the forward's hidden
    states [T, h] and the R sampled rows are still referenced.
* **non-torch** — memory outside PyTorch's allocator that grows during load and profiling
  (cuBLAS workspaces, NCCL and custom all-reduce buffers): 0.35 GiB at TP 1 (vLLM v1 logs of
  Llama-3.1-8B on H100 print 0.32–0.35 GiB) + 0.25 GiB per further rank (start-up logs of
  other models print 1.39 GiB at TP 4 and 2.10 GiB at TP 8).
* **CUDA graphs** — 0.40 GiB: what vLLM reports for 7–16B models with its default capture
  sizes ("Graph capturing finished …, took 0.41 / 0.47 GiB"; v0.2x "… 0.28 / 0.32 GiB for
  CUDAGraph memory"). 0 with ``cuda_graph_gib=0`` (``enforce_eager``).

Cross-check: published start-up logs of Llama-3.1-8B on one H100 at utilization 0.9 (vLLM
0.6–0.11, graphs not yet subtracted) read total 79.11–79.15 GiB, weights 14.99 GiB, non-torch
0.12–0.35 GiB, activation peak 1.19–1.24 GiB, KV 54.62–54.93 GiB; this plan at 8192 tokens and
256 sequences without the graph term gives 14.96, 0.35, 0.92 and 54.97 GiB (450 304 tokens);
with it, 54.57 GiB = 447 024 tokens — ``tests/hardware/test_memory.py`` works it by hand.

**Sliding-window and linear-attention layers** (gpt-oss; Qwen3.5's Gated DeltaNet) hold a
bounded amount per sequence, not per token. vLLM's hybrid KV-cache manager (v1
``kv_cache_utils``; the "Hybrid KV Cache Manager" design doc) groups layers by attention type
into groups of equal page size sharing one block pool: a request holds ⌈tokens/block⌉ blocks in
a full-attention group, the blocks covering its last ``sliding_window`` tokens in a
sliding-window group, and one state slot in a linear-attention (Mamba-style) group. Tidal's KV
manager counts full-attention tokens only (``kv_bytes_per_token_per_gpu`` covers the
full-attention layers), so the plan sets aside, for each of the ``max_seqs`` sequences that may
run, its bounded part — the window's KV over ⌈(window − 1)/block⌉ + 1 blocks and the linear
state (``ModelSpec.state_bytes_per_seq_per_gpu``) — before dividing the rest into blocks:

    available_kv = available − max_seqs · (window KV + linear state)   (per GPU)

Exact when ``max_seqs`` sequences of at least a window's length run; conservative with fewer.
(vLLM also enlarges a hybrid model's attention block so that its page matches the state's; the
plan keeps ``block_size``.) A model whose every attention layer is windowed is planned as if
they were full (conservative). MLA stores one latent per token and layer, replicated on every
TP rank; an FP8 KV cache stores one byte per element (``ModelSpec.kv_cache_dtype``).

``activation_reserve_gb`` (a number) replaces activation, non-torch and graphs by one flat
reserve of that many 10⁹ bytes (the previous method), e.g. to match a paper's stated reserve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import GIB, GPUSpec
from tidal.hardware.models import ModelSpec
from tidal.hardware.pipeline import binding_stage

SAMPLER_BYTES_PER_LOGIT = 28
"""Bytes per (request, vocab) entry alive at the dummy sampler's peak (module docstring)."""
NON_TORCH_GIB_TP1 = 0.35
NON_TORCH_GIB_PER_RANK = 0.25
CUDA_GRAPH_GIB = 0.40


def non_torch_gib(tp: int) -> float:
    """Non-torch memory per GPU, GiB: 0.35 at TP 1 plus 0.25 per further rank."""
    return NON_TORCH_GIB_TP1 + NON_TORCH_GIB_PER_RANK * (tp - 1)


def forward_peak_bytes(model: ModelSpec, tp: int, tokens: int) -> float:
    """Largest live tensors of one profiling forward over ``tokens`` tokens (per GPU)."""
    h, d = model.hidden_size, model.d_head
    attn = h + (2 * model.num_heads + 2 * model.num_kv_heads) * d / tp
    mats = 3 if model.gated_mlp else 2
    mlp = h + mats * model.intermediate_size / tp
    if model.is_moe:
        dense = mlp if model.num_dense_layers else 0.0
        mlp = h + model.num_active_experts * (mats * model.moe_inter / tp + h)
        mlp = max(mlp + mats * model.shared_intermediate_size / tp, dense)
    if model.num_linear_layers:  # Gated DeltaNet: the q/k/v/z projection beside the residual
        qk = 2 * model.linear_num_key_heads * model.linear_key_head_dim
        vz = 2 * model.linear_num_value_heads * model.linear_value_head_dim
        attn = max(attn, h + (qk + vz) / tp)
    return tokens * model.dtype_bytes * max(attn, mlp)


def sampler_peak_bytes(model: ModelSpec, tokens: int, reqs: int) -> float:
    """Dummy sampler over ``reqs`` rows of full-vocabulary logits, plus the live hidden states."""
    h, b = model.hidden_size, model.dtype_bytes
    return reqs * model.vocab_size * SAMPLER_BYTES_PER_LOGIT + (tokens + reqs) * h * b


def seq_reserve_bytes(model: ModelSpec, tp: int, block_size: int) -> float:
    """Per sequence, per GPU: the sliding-window KV (⌈(window − 1)/block⌉ + 1 blocks) and the
    linear-attention state — what the full-attention token count leaves out."""
    win = 0.0
    if model.num_sliding_layers and model.sliding_window and model.full_attention_layers:
        blocks = -(-(model.sliding_window - 1) // block_size) + 1
        win = model.window_kv_bytes_per_token_per_gpu(tp) * blocks * block_size
    return win + model.state_bytes_per_seq_per_gpu(tp)


def kv_bytes_per_token_planned(model: ModelSpec, tp: int) -> float:
    """Bytes per full-attention token on one GPU; all-windowed models count their windows as
    full (module docstring)."""
    per_tok = model.kv_bytes_per_token_per_gpu(tp)
    if per_tok == 0 and model.num_sliding_layers:
        return model.window_kv_bytes_per_token_per_gpu(tp)
    return per_tok


def activation_peak_bytes(model: ModelSpec, tp: int, token_budget: int, max_seqs: int) -> float:
    """``torch_peak_increase`` of vLLM's ``profile_run``: max(forward peak, sampler peak)."""
    reqs = min(max_seqs, token_budget)
    return max(
        forward_peak_bytes(model, tp, token_budget),
        sampler_peak_bytes(model, token_budget, reqs),
    )


@dataclass(frozen=True)
class MemoryPlan:
    weight_bytes_per_gpu: float
    reserve_bytes_per_gpu: float
    """Activation peak + non-torch + CUDA graphs (or the flat reserve)."""
    kv_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    block_size: int
    num_blocks: int
    """Blocks the scheduler can hand out (vLLM's ``num_gpu_blocks`` less the null block)."""
    total_bytes: float = 0.0
    requested_bytes: float = 0.0
    activation_bytes: float = 0.0
    non_torch_bytes: float = 0.0
    cuda_graph_bytes: float = 0.0
    token_budget: int = 0
    max_seqs: int = 0
    method: str = "vllm-profile"
    seq_state_bytes: float = 0.0
    """Sliding-window KV and linear-attention state set aside for ``max_seqs`` sequences."""

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s ``kv_capacity_tokens`` and ``kv_plan`` (bytes; GiB where named)."""
        plan = {
            "method": self.method,
            "total_gib": self.total_bytes / GIB,
            "requested_gib": self.requested_bytes / GIB,
            "weights_gib": self.weight_bytes_per_gpu / GIB,
            "activation_peak_gib": self.activation_bytes / GIB,
            "non_torch_gib": self.non_torch_bytes / GIB,
            "cuda_graph_gib": self.cuda_graph_bytes / GIB,
            "kv_gib": self.kv_bytes_per_gpu / GIB,
            "kv_bytes_per_token": self.kv_bytes_per_token_per_gpu,
            "block_size": self.block_size,
            "num_blocks": self.num_blocks,
            "token_budget": self.token_budget,
            "max_seqs": self.max_seqs,
        }
        if self.seq_state_bytes:
            plan["seq_state_gib"] = self.seq_state_bytes / GIB
        return {"kv_capacity_tokens": self.kv_capacity_tokens, "kv_plan": plan}


def sglang_static_terms(activation_reserve_gb: float | None) -> tuple[float, float, float, str]:
    """SGLang's plan (``ModelRunner.profile_max_num_token``): the pool is
    ``free_at_start · mem_fraction_static − weights``; activations, CUDA graphs and the
    allocator's slack come out of the other ``1 − mem_fraction_static`` (SGLang sizes that
    share from the chunked-prefill size and the CUDA-graph batch, ``sim/engine_defaults``), so
    no profile term is subtracted here. The free memory at start is taken as the whole
    (the CUDA context, ≈ 0.5 GiB, is not known per GPU: the pool is that much × the fraction
    larger). A flat reserve is another plan: both at once are refused."""
    if activation_reserve_gb is not None:
        raise ConfigError(
            "memory.activation_reserve_gb",
            "cannot be combined with memory.mem_fraction_static (SGLang's plan has no reserve)",
            "set one of them",
        )
    return 0.0, 0.0, 0.0, "sglang-static"


def plan_memory(
    model: ModelSpec,
    gpu: GPUSpec,
    tp: int = 1,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    activation_reserve_gb: float | None = None,
    min_tokens: int = 0,
    *,
    token_budget: int = 8192,
    max_seqs: int = 256,
    non_torch_gib_per_gpu: float | None = None,
    cuda_graph_gib: float | None = None,
    moe_gpus: int | None = None,
    pp: int = 1,
    mem_fraction_static: float | None = None,
) -> MemoryPlan:
    """vLLM's KV plan (module docstring). Raises a ``ConfigError`` stating every term when the
    weights do not fit or the cache cannot hold ``min_tokens`` (one request's tokens).
    ``moe_gpus``: the GPUs a MoE model's routed experts are spread over (data parallelism:
    dp·tp, while the other weights are split over ``tp``); default ``tp``. ``pp``: pipeline
    stages; the plan is the stage with the fewest blocks (:func:`~tidal.hardware.pipeline.
    binding_stage`: its layers' weights and KV, and the embedding or LM head).
    ``mem_fraction_static``: SGLang's static plan instead (:func:`sglang_static_terms`)."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ConfigError("gpu_memory_utilization", "must be in (0, 1]", "e.g. 0.9")
    total = gpu.mem_bytes
    requested = total * (mem_fraction_static or gpu_memory_utilization)
    weights = model.weight_bytes / tp
    if moe_gpus is not None and moe_gpus != tp and model.is_moe:
        weights = model.non_expert_weight_bytes / tp + model.expert_weight_bytes / moe_gpus
    if mem_fraction_static is not None:
        act, non_torch, graphs, method = sglang_static_terms(activation_reserve_gb)
    elif activation_reserve_gb is not None:
        act, non_torch, graphs, method = activation_reserve_gb * 1e9, 0.0, 0.0, "flat-reserve"
    else:
        act = activation_peak_bytes(model, tp, token_budget, max_seqs)
        nt = non_torch_gib(tp) if non_torch_gib_per_gpu is None else non_torch_gib_per_gpu
        non_torch = nt * GIB
        graphs = (CUDA_GRAPH_GIB if cuda_graph_gib is None else cuda_graph_gib) * GIB
        method = "vllm-profile"
    reserve = act + non_torch + graphs
    seq_state = seq_reserve_bytes(model, tp, block_size) * max_seqs
    per_tok = kv_bytes_per_token_planned(model, tp)
    if pp > 1:
        weights, per_tok, seq_state = binding_stage(
            model, tp, pp, weights, per_tok, seq_state, requested - reserve, block_size
        )
    kv = requested - weights - reserve - seq_state
    gpu_blocks = int(kv // (per_tok * block_size)) if kv > 0 else 0
    blocks = max(gpu_blocks - 1, 0)
    if blocks * block_size < max(min_tokens, block_size):
        terms = {
            "weights": weights, "activation peak": act, "non-torch": non_torch,
            "CUDA graphs": graphs, f"window/state of {max_seqs} sequences": seq_state,
        }  # fmt: skip
        profiled = method == "vllm-profile"  # the other plans have no profile terms
        shown = {k: v for k, v in terms.items() if v or (profiled and "window" not in k)}
        used = " − ".join(f"{k} {v / GIB:.2f} GiB" for k, v in shown.items())
        raise ConfigError(
            "model",
            f"{model.name} does not fit on {tp * pp}× {gpu.name}"
            + (f" (tp {tp} × pp {pp}; the fullest stage)" if pp > 1 else "")
            + f": {requested / total:g} × "
            f"{total / GIB:.2f} GiB = {requested / GIB:.2f} GiB per GPU − {used} leaves "
            f"{max(kv, 0) / GIB:.2f} GiB for KV = {blocks * block_size} tokens, but one request "
            f"needs {min_tokens} tokens",
            ("raise --mem-fraction-static, or " if mem_fraction_static is not None else "")
            + "use more tensor parallelism (--tp), a larger GPU, a smaller token budget, a "
            "quantized checkpoint or KV cache (--quantization, --kv-cache-dtype fp8), or cap "
            "the lengths",
        )
    return MemoryPlan(
        weights, reserve, kv, per_tok, block_size, blocks,
        total, requested, act, non_torch, graphs, token_budget, max_seqs, method, seq_state,
    )  # fmt: skip
