"""SGLang's eager prefill: a launch-bound floor under a prefill step of MLA / DSA / GDN models.

SGLang 0.5.x runs decode steps under CUDA graphs but prefill (``extend``) steps eagerly, one
Python call and kernel launch after another, unless a prefill CUDA graph is captured (the
piecewise CUDA graph, ``--enable-piecewise-cuda-graph``, SGLang pull request 10062, whose
motivation is exactly this: "SGLang's current native prefilling can incur kernel launch
overhead ... especially for the short length input"). For DeepSeek-V2/V3-class models
(MLA) the piecewise graph was still listed as incompatible when its default was discussed
(SGLang issue 18130, 2026-02), and the hybrid Gated DeltaNet models keep recurrent-state
kernels outside it; their prefill stays eager in the 0.5.x releases the tables measure.

A step whose GPU work is shorter than the host's launch time takes the launch time: the
step is ``max(gpu, floor)``, for a step with a prompt chunk of more than one token (a step
whose chunks are all single tokens is the disaggregated decode pool's hand-over of loaded KV,
which SGLang's decode side runs as a ``PREBUILT`` batch, no extend forward; an aggregated
engine's one-token chunk — a prefix hit leaving one token, a one-token prompt — is rare in
these benchmarks and is not floored either, although the measurement below is of one).

The floor is a public measurement, not a fit to the silicon
rows: SGLang pull request 12160 logs ``forward cost 82.64 ms`` for a DeepSeek-V3 prefill of
one new token (eager; 23.1 ms with a prefill CUDA graph) and states that the prefill latency
"is similar when new_tokens < 100" — the launch-bound floor of its 61 layers. Tidal scales it
per layer (1.355 ms a layer) to the model's layer count. Dense and GQA MoE models are not
floored here: no measurement of their eager prefill was found, and SGLang's piecewise graph
covers them in the newer releases.
"""

from __future__ import annotations

from typing import Any

from tidal.hardware.models import ModelSpec

EAGER_PREFILL_FLOOR_S = 82.6406e-3
"""SGLang pull request 12160: eager DeepSeek-V3 prefill of one new token, ``forward cost``."""
EAGER_PREFILL_FLOOR_LAYERS = 61
"""DeepSeek-V3's layer count (the model of that measurement)."""
EAGER_PREFILL_ENGINES = frozenset({"sglang"})
"""Engines whose prefill runs eagerly by default (vLLM captures piecewise CUDA graphs for
prefill too, under ``torch.compile``, since its V1 engine)."""


def eager_prefill_applies(engine: str, model: ModelSpec) -> bool:
    """Whether the floor prices this deployment: SGLang, and an MLA / DSA or Gated DeltaNet
    model (the architectures whose prefill SGLang 0.5.x keeps eager)."""
    return engine in EAGER_PREFILL_ENGINES and (model.is_mla or model.num_linear_layers > 0)


def eager_prefill_floor_s(engine: str, model: ModelSpec) -> float:
    """Seconds under which no prefill step of this deployment can finish (0.0: no floor).
    Invariant: proportional to the model's layers, 82.64 ms for DeepSeek-V3's 61."""
    if not eager_prefill_applies(engine, model):
        return 0.0
    return EAGER_PREFILL_FLOOR_S * model.num_layers / EAGER_PREFILL_FLOOR_LAYERS


def describe_floor(floor_s: float) -> dict[str, Any]:
    """The ``summary.json`` record of the floor (empty when there is none)."""
    if floor_s <= 0.0:
        return {}
    return {
        "eager_prefill_floor_ms": round(floor_s * 1e3, 3),
        "eager_prefill_source": "SGLang pull request 12160 (DeepSeek-V3, 61 layers, "
        "82.64 ms), per layer",
    }
