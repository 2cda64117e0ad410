"""vLLM's DeepGEMM fused-MoE path on Hopper: the padded rows it moves (issue 28).

Which vLLM versions run it (docs/design/moe_vllm_deepgemm.md §4 cites each source):

* From vLLM 0.11.1 (pull request 26197, "Enable E8M0 by Default on Hopper for DeepGEMM")
  ``is_deep_gemm_e8m0_used()`` is true on Hopper, and ``TritonOrDeepGemmExperts`` (the
  block-FP8 experts where DeepGEMM is installed) takes DeepGEMM whenever
  ``is_deep_gemm_e8m0_used() or _valid_deep_gemm(...)``: the first term short-circuits the
  M ≥ 128 and N > 512 checks, so decode batches of any size run DeepGEMM's contiguous grouped
  GEMM (``fused_moe/triton_deep_gemm_moe.py``).
* From vLLM 0.12.0 a deployment at TP 8 runs Triton instead (pull request 29346, "Disable
  DeepGEMM MoE by default when TP=8 is used").
* The newest FP8 MoE oracle puts Triton first on Hopper for block FP8 under TP and FlashInfer
  CUTLASS under EP (``fused_moe/oracle/fp8.py``, ``_get_priority_backends``), which is what the
  0.24 tables time. Its release is not dated here; the sample's 0.18 Hopper rows are priced
  within 4 % without this path, so it ends before 0.18.0 (:data:`DEEPGEMM_MOE_VLLM`).

What the path costs beyond the Triton kernel the tables time: vLLM sizes the permuted
activations as M_sum = round_up(T·k + E·(128 − 1), 128) rows (``compute_aligned_M`` without the
experts' token counts on the CPU; 128 is DeepGEMM's M alignment on SM90), one 128-row-aligned
segment per expert; rows of no expert carry index −1. DeepGEMM's SM90 kernel
(``sm90_fp8_gemm_1d2d``) schedules every 128-row block of M_sum: its TMA producer loads A (and
B, from expert max(0, −1) = 0) for every block, the math warps skip the MMA of a padding block
(``is_computation_valid``) but still store its output tile, and vLLM's activation-and-quantise
kernel runs over all M_sum rows. So each padding row moves, beyond what Triton moves:
GEMM 1's A (H bytes, FP8) and output (2·N₁, bf16, N₁ = 2·I gate and up), the activation's read
of it (2·N₁) and its FP8 output (I), GEMM 2's A (I) and output (2·H): 3H + 10I bytes, I the
rank's expert width (:func:`padding_bytes_per_row`). Priced at the GPU's bandwidth with the
corrected roofline's GEMM efficiency; no constant is fitted.
"""

from __future__ import annotations

from tidal.hardware.engine_data import version_key

DEEPGEMM_MOE_VLLM = ("0.11.1", "0.18.0")
"""vLLM versions [first, end) whose block-FP8 MoE runs DeepGEMM on Hopper at every batch size."""

DEEPGEMM_TRITON_AT_TP8_FROM = "0.12.0"
"""First vLLM version that runs Triton instead at TP 8 (pull request 29346)."""

HOPPER_SYSTEMS = frozenset({"h100_sxm", "h100_pcie", "h200_sxm"})
"""The tables' systems with SM90 GPUs (the kernel read above is DeepGEMM's SM90 one)."""

M_ALIGN = 128
"""DeepGEMM's M alignment of the contiguous layout on SM90
(``get_mk_alignment_for_contiguous_layout()[0]``)."""


def _release(version: str | None) -> str | None:
    """A release version's number, None for no version or a nightly build (the newest)."""
    if version is None or version.startswith("nightly"):
        return None
    return version


def deepgemm_moe(engine: str, version: str | None, system: str, dtype: str, tp: int) -> bool:
    """True where vLLM runs block-FP8 experts on DeepGEMM's contiguous grouped GEMM at every
    batch size: Hopper, vLLM in :data:`DEEPGEMM_MOE_VLLM`, not TP 8 from 0.12.0."""
    v = _release(version)
    if engine != "vllm" or v is None or dtype != "fp8_block" or system not in HOPPER_SYSTEMS:
        return False
    first, end = DEEPGEMM_MOE_VLLM
    if not version_key(first) <= version_key(v) < version_key(end):
        return False
    return not (tp == 8 and version_key(v) >= version_key(DEEPGEMM_TRITON_AT_TP8_FROM))


def aligned_rows(tokens: int, topk: int, experts: int) -> int:
    """vLLM's M_sum for ``tokens`` routed to ``topk`` of a rank's ``experts``: the rows of the
    permuted activations, T·k + E·(128 − 1) rounded up to 128."""
    rows = tokens * topk + experts * (M_ALIGN - 1)
    return -(-rows // M_ALIGN) * M_ALIGN


def padding_bytes_per_row(hidden: int, inter: int) -> int:
    """Bytes one padding row moves through the two GEMMs and the activation kernel, ``inter``
    the rank's expert width: 3·H + 10·I (module docstring)."""
    return 3 * hidden + 10 * inter


def padding_s(
    tokens: float, topk: int, experts: int, hidden: int, inter: int, bandwidth: float
) -> float:
    """Seconds a layer spends on the padding rows of ``tokens`` routed tokens (a rank's)."""
    t = round(tokens)
    rows = aligned_rows(t, topk, experts) - t * topk
    return rows * padding_bytes_per_row(hidden, inter) / bandwidth
