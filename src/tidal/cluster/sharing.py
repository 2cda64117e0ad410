"""MuxServe-style spatial sharing: the slowdown of an engine whose CUDA MPS thread percentage (SM
share) is ``p`` (docs/research/warmserve.md §4.1 item 8; the WarmServe artifact's
``muxserve_utils.py`` launches each colocated engine with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = p``,
a hard cap that holds whether or not the other engines on the mesh are busy).

Two slowdown models:

* ``profile`` (default): MuxServe's own measured cost table (``examples/placement/llama.json`` of
  hao-ai-lab/MuxServe @2249cfa, LLaMA-7B/13B/30B/65B on A100-80GB, 1–8 GPUs, MPS 30–100%): the
  step latency at ``p`` divided by the latency at 100%, the median over every profiled
  (model, batch size, sequence length) point of a mesh size, per phase. Prefill is compute-bound
  and slows down nearly in proportion (×2.0–2.7 at 30%); decode is bound by memory bandwidth and
  hardly slows (×1.0–1.5 at 30%, ≤ ×1.13 from 50%). Between levels the factor is interpolated
  linearly in ``p``; below 30% (not profiled) it grows as 30/p from the 30% value (time ∝ 1/SMs,
  the compute-bound limit); mesh sizes above 8 use the 8-GPU row.
* ``k``: the spec's illustrative closed form, ``1 / min(1, p · k)`` with ``k_prefill`` for steps
  that prefill and ``k_decode`` for pure-decode steps [ASSUMED, docs/research/warmserve.md §4.1 item
  8].

Not modelled: colocated engines also contend for HBM bandwidth when they run at the same time
(the profile was measured with one engine); this favours MuxServe.

The factor multiplies the wrapped model's seconds with one IEEE operation, on scalars and on
numpy arrays alike, so vectorised decode runs stay bit-identical (docs/DESIGN.md §2).
"""

from __future__ import annotations

from typing import Any

from tidal.hardware.perf import PerfModel, WrappedPerfModel

PROFILE_MPS = (30, 40, 50, 60, 70, 80, 90, 100)
"""MPS thread percentages profiled by MuxServe."""

PROFILE_PREFILL: dict[int, tuple[float, ...]] = {
    1: (2.65, 2.02, 1.65, 1.41, 1.26, 1.13, 1.07, 1.0),
    2: (2.44, 1.92, 1.57, 1.38, 1.24, 1.13, 1.07, 1.0),
    4: (2.30, 1.85, 1.53, 1.34, 1.23, 1.12, 1.06, 1.0),
    8: (2.02, 1.63, 1.42, 1.28, 1.18, 1.09, 1.04, 1.0),
}
"""Prefill latency at MPS p / latency at 100%, per mesh size (medians of MuxServe's table)."""

PROFILE_DECODE: dict[int, tuple[float, ...]] = {
    1: (1.51, 1.27, 1.13, 1.09, 1.05, 1.03, 1.02, 1.0),
    2: (1.34, 1.16, 1.05, 1.04, 1.03, 1.01, 1.01, 1.0),
    4: (1.19, 1.13, 1.05, 1.02, 1.02, 1.01, 1.00, 1.0),
    8: (1.04, 1.04, 1.04, 1.04, 1.04, 1.01, 1.01, 1.0),
}
"""Decode-step latency at MPS p / latency at 100%, per mesh size (same source). The 8-GPU medians
(1.03, 1.04, 1.01, 1.01, 1.04, 1.01, 1.01) are noise around 1; each row is stored as its running
maximum from 100% down, so that a smaller share is never faster."""


def profile_slowdown(num_gpus: int, percent: float, prefill: bool) -> float:
    """Latency factor of a step at MPS ``percent`` on a mesh of ``num_gpus`` GPUs (≥ 1)."""
    if not 0 < percent <= 100:
        raise ValueError("MPS percentage must be in (0, 100]")
    row_key = max(k for k in PROFILE_PREFILL if k <= max(1, num_gpus))
    row = (PROFILE_PREFILL if prefill else PROFILE_DECODE)[row_key]
    lo = PROFILE_MPS[0]
    if percent <= lo:
        return row[0] * lo / percent
    for i in range(len(PROFILE_MPS) - 1):
        a, b = PROFILE_MPS[i], PROFILE_MPS[i + 1]
        if percent <= b:
            w = (percent - a) / (b - a)
            return row[i] + w * (row[i + 1] - row[i])
    return 1.0


def k_slowdown(share: float, k: float) -> float:
    """``1 / min(1, share · k)`` [ASSUMED form of docs/research/warmserve.md §4.1 item 8]."""
    return 1.0 / min(1.0, share * k)


class SharedPerfModel(WrappedPerfModel):
    """Steps that prefill run ``f_prefill`` times slower, pure-decode steps ``f_decode``."""

    name = "sm-share"

    def __init__(self, base: PerfModel, share: float, f_prefill: float, f_decode: float) -> None:
        if not 0 < share <= 1:
            raise ValueError("SM share must be in (0, 1]")
        if f_prefill < 1 or f_decode < 1:
            raise ValueError("a smaller SM share cannot speed a step up")
        super().__init__(base)
        self.share = share
        self.f_prefill = f_prefill
        self.f_decode = f_decode

    def adjust(self, seconds: Any, num_decodes: int, prefill_tokens: int) -> Any:
        return seconds * (self.f_prefill if prefill_tokens else self.f_decode)

    def describe(self) -> dict[str, Any]:
        return {
            **self.base.describe(),
            "sm_share": self.share,
            "f_prefill": self.f_prefill,
            "f_decode": self.f_decode,
        }
