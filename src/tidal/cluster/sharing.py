"""MuxServe-style spatial sharing: a step of an engine holding an SM share ``f`` (CUDA MPS
thread percentage) runs ``1 / min(1, f · k)`` times slower, with ``k_prefill`` for steps that
prefill and ``k_decode`` (> k_prefill: decode is bound by memory bandwidth, so losing SMs hurts
less) for pure-decode steps [ASSUMED, warmserve.md §4.1 item 8].

The factor multiplies the wrapped model's seconds with one IEEE operation, on scalars and on
numpy arrays alike, so vectorised decode runs stay bit-identical (DESIGN.md §2).
"""

from __future__ import annotations

from typing import Any

from tidal.hardware.perf import PerfModel, WrappedPerfModel


class SharedPerfModel(WrappedPerfModel):
    name = "sm-share"

    def __init__(self, base: PerfModel, share: float, k_prefill: float, k_decode: float) -> None:
        if not 0 < share <= 1:
            raise ValueError("SM share must be in (0, 1]")
        super().__init__(base)
        self.share = share
        self.f_prefill = 1.0 / min(1.0, share * k_prefill)
        self.f_decode = 1.0 / min(1.0, share * k_decode)

    def adjust(self, seconds: Any, num_decodes: int, prefill_tokens: int) -> Any:
        return seconds * (self.f_prefill if prefill_tokens else self.f_decode)

    def describe(self) -> dict[str, Any]:
        return {**self.base.describe(), "sm_share": self.share}
