"""Speculative decoding in the controller's capacity estimates
(docs/design/disagg-cluster-composition.md §C, "Capacity").

The controller sizes a model by its expected in-flight load: the workload's arrivals times each
request's service time, ``prefill ms + output tokens × decode ms/token`` (the artifact's
constants, :func:`tidal.cluster.models.service_ms`) — the dedicated placement's ``demand`` and
WarmServe's seasonal priors — against B request slots per engine. A speculating engine emits
E[tokens/step] = (1 − α^(k+1)) / (1 − α) tokens per request per step (one α; with one α per
position, 1 + Σᵢ Πⱼ≤ᵢ αⱼ: :func:`tidal.engine.spec_config.expected_tokens`) and each step is a
verification of k + 1 rows per request plus the drafting
(:class:`tidal.hardware.spec_perf.SpecPerfModel`). So a request holds its slot for

    decode ms/token × f,   f = t_verify(B, ctx) / (E · t_step(B, ctx)),

with both step times at B decoding requests (an engine at capacity) of mean context ctx (the
model's mean prompt plus half its mean output: the middle of an average request's decode).
``f`` < 1 where speculation pays (n-gram at α = 0.7, k = 3: E = 2.53), > 1 where verification
costs more than it gains (large batches on a compute-bound GPU). Load the controller measures
from live requests needs no factor: those requests already finish sooner.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidal.cluster.config import ClusterConfig
from tidal.cluster.eager import EagerPerfModel, eager_overhead_s
from tidal.hardware.calibration import build_perf_model, engine_choice
from tidal.hardware.gpus import GPUSpec
from tidal.hardware.models import ModelSpec
from tidal.hardware.perf import PerfModel


def engine_perf(cfg: ClusterConfig, spec: ModelSpec, gpu: GPUSpec, tp: int) -> PerfModel:
    """Step-time model of an unshared engine of ``spec`` on ``tp`` GPUs of the cluster (plus
    the eager-mode overhead with ``cluster.eager_overhead``)."""
    perf = build_perf_model(
        cfg.perf_model, spec, gpu, tp, host=cfg.perf_host, engine=engine_choice(cfg)
    )
    if cfg.eager_overhead:
        perf = EagerPerfModel(perf, eager_overhead_s(spec, tp))
    return perf


@dataclass(frozen=True)
class DecodeCapacity:
    """A speculating model's decode capacity at B requests of context ctx (module docstring)."""

    batch: int
    ctx: int
    tokens_per_step: float
    """E[tokens per request per verification step]."""
    step_s: float
    """The target's own decode step (no speculation)."""
    verify_step_s: float
    """The speculative step: verification of k + 1 rows per request plus drafting."""

    @property
    def factor(self) -> float:
        """Decode time per output token with speculation over that without it."""
        return self.verify_step_s / (self.tokens_per_step * self.step_s)

    def tokens_per_s(self) -> float:
        """Output tokens per second of one engine at B requests, with speculation."""
        return self.batch * self.tokens_per_step / self.verify_step_s

    def summary(self) -> dict[str, float]:
        return {
            "batch": self.batch,
            "ctx": self.ctx,
            "tokens_per_step": self.tokens_per_step,
            "step_s": self.step_s,
            "verify_step_s": self.verify_step_s,
            "decode_time_factor": self.factor,
        }


def decode_capacity(
    plain: PerfModel, speculative: PerfModel, tokens_per_step: float, batch: int, ctx: int
) -> DecodeCapacity:
    """Both pure-decode steps of ``batch`` requests of context ``ctx`` (Σ context batch·ctx)."""
    b = max(1, batch)
    step = float(plain.step_seconds(b, b * ctx, 0, 0, 0, 0))
    verify = float(speculative.step_seconds(b, b * ctx, 0, 0, 0, 0))
    return DecodeCapacity(b, ctx, tokens_per_step, step, verify)


def speculative_service(
    service: tuple[float, float], capacity: DecodeCapacity | None
) -> tuple[float, float]:
    """(prefill ms, decode ms/token) of a request, the decode term × the factor (unchanged,
    the same tuple, for a model that does not speculate)."""
    if capacity is None:
        return service
    return service[0], service[1] * capacity.factor
