"""Eager-mode step overhead by tensor-parallel degree (a sensitivity setting,
``cluster.eager_overhead``).

The roofline step model (:class:`tidal.hardware.perf.RooflinePerfModel`) assumes CUDA-graph
launches and a 10 µs all-reduce, so a decode step gets much faster on more GPUs. The engines of
the WarmServe evaluation run eagerly (vLLM 0.6.3 ``--enforce-eager``, MuxServe's runtime), where
kernel launches and small all-reduces add a per-step cost that grows with the degree. MuxServe's
measured A100 profile (``examples/placement/llama.json`` of hao-ai-lab/MuxServe @2249cfa, 100%
MPS) shows it: a LLaMA-7B decode step takes 11.9 / 12.4 / 12.8 / 14.7 ms on 1 / 2 / 4 / 8 GPUs
(batch 8, 128 tokens) where the roofline on A100 gives 9.0 / 5.4 / 3.3 / 2.3 ms.

:data:`EAGER_OVERHEAD_MS` is, per model family and degree, the median over the profiled decode
points (batch ≤ 64, context ≤ 1024) of measured minus roofline-on-A100 step time — tight per cell
(interquartile range ≤ 1 ms except 65B on 4 GPUs, 10–16 ms). :class:`EagerPerfModel` adds it to
every step. With it an H100 decode step of 7B/TP1, 13B/TP2, 70B/TP4 takes about 9, 13 and 27 ms,
still below the artifact's measured 15, 20 and 30 ms (docs/research/warmserve.md §2.1), so the
setting is a conservative estimate of eager-mode cost.
"""

from __future__ import annotations

from typing import Any

from tidal.hardware.models import ModelSpec
from tidal.hardware.perf import PerfModel, WrappedPerfModel

EAGER_OVERHEAD_MS: dict[str, dict[int, float]] = {
    "7b": {1: 3.3, 2: 7.2, 4: 9.5, 8: 11.4},
    "13b": {1: 4.6, 2: 6.7, 4: 10.4, 8: 12.8},
    "65b": {4: 11.8, 8: 19.0},
}
"""Per-step eager overhead (ms) by model family and tensor-parallel degree."""


def family(spec: ModelSpec) -> str:
    """The profiled LLaMA size closest in kind: < 10B → 7b, < 40B → 13b, larger → 65b."""
    b = spec.num_params / 1e9
    return "7b" if b < 10 else "13b" if b < 40 else "65b"


def eager_overhead_s(spec: ModelSpec, tp: int) -> float:
    """The table's value for the family at ``tp`` (the nearest profiled degree otherwise)."""
    row = EAGER_OVERHEAD_MS[family(spec)]
    key = min(row, key=lambda k: (abs(k - tp), k))
    return row[key] / 1000.0


class EagerPerfModel(WrappedPerfModel):
    """``base`` plus a constant per step (one IEEE addition: exact on decode-run arrays)."""

    name = "eager"

    def __init__(self, base: PerfModel, extra_s: float) -> None:
        if extra_s < 0:
            raise ValueError("eager overhead must be ≥ 0")
        super().__init__(base)
        self.extra_s = extra_s

    def adjust(self, seconds: Any, num_decodes: int, prefill_tokens: int) -> Any:
        return seconds + self.extra_s

    def describe(self) -> dict[str, Any]:
        return {**self.base.describe(), "eager_overhead_s": self.extra_s}
