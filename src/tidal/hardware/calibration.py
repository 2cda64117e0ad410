"""Measured step-cost constants and the choice of performance model for a deployment.

The EB paper's authors calibrated Qwen3-8B (fp16, TP=1, vLLM eager mode) on two GPUs; their
files are ``reproduce/calibration/pd_calibration_Qwen3-8B_{H200,RTXPRO6000}.json`` in the public
eb-vllm repository, quoted in ``shared/research/ebplus.md`` §1.1. Decode constants were measured
with a 512-token context per request.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import GPUSpec
from tidal.hardware.models import ModelSpec
from tidal.hardware.perf import LinearPerfModel, PerfModel, RooflinePerfModel


@dataclass(frozen=True)
class LinearCalibration:
    alpha_p: float
    beta_p: float
    alpha_d: float
    beta_d: float
    source: str


CALIBRATIONS: dict[tuple[str, str, int], LinearCalibration] = {
    ("qwen3-8b", "h200", 1): LinearCalibration(
        1.2786e-3,
        24.853e-6,
        8.9212e-3,
        45.865e-6,
        "eb-vllm pd_calibration_Qwen3-8B_H200.json (ebplus.md §1.1)",
    ),
    ("qwen3-8b", "rtx-pro-6000", 1): LinearCalibration(
        4.6912e-3,
        50.079e-6,
        10.3760e-3,
        103.881e-6,
        "eb-vllm pd_calibration_Qwen3-8B_RTXPRO6000.json (ebplus.md §1.1)",
    ),
}

PERF_MODELS = ("auto", "roofline", "linear")
PROFILE_PREFIX = "profile:"
"""``profile:PATH``: a step-time profile measured on the real engine (``tidal calibrate``)."""


def check_perf_model(kind: str) -> None:
    """Raise a ``ConfigError`` unless ``kind`` names a performance model (profiles are read)."""
    if kind.startswith(PROFILE_PREFIX):
        from tidal.hardware.profiled import ProfiledPerfModel

        ProfiledPerfModel.load(kind.removeprefix(PROFILE_PREFIX))
        return
    if kind not in PERF_MODELS:
        raise ConfigError(
            "perf_model",
            f"unknown value {kind!r}",
            f"valid: {', '.join(PERF_MODELS)}, {PROFILE_PREFIX}PATH",
        )


def build_perf_model(
    kind: str,
    model: ModelSpec,
    gpu: GPUSpec,
    tp: int = 1,
    eff_bw: float = 0.8,
    interference: bool = False,
    **roofline_kw: float,
) -> PerfModel:
    """``profile:PATH``: the profile measured on the real engine (``tidal calibrate``).
    ``auto``: the measured linear model where one exists for (model, GPU, TP), else the
    roofline. ``linear``: measured constants, or constants derived from the roofline (α from a
    one-token step, β from the marginal cost of a 512-token-context decode and of a prefill
    token) when none were measured. ``interference`` adds the mixed-step interference term of
    :mod:`tidal.hardware.interference` (EB paper §1.2) on top of either."""
    base = _build_base(kind, model, gpu, tp, eff_bw, **roofline_kw)
    if not interference:
        return base
    from tidal.hardware.interference import InterferencePerfModel, step_interference

    q, source = step_interference(model, gpu, tp)
    return InterferencePerfModel(base, q, source)


def _build_base(
    kind: str, model: ModelSpec, gpu: GPUSpec, tp: int, eff_bw: float, **roofline_kw: float
) -> PerfModel:
    check_perf_model(kind)
    if kind.startswith(PROFILE_PREFIX):
        from tidal.hardware.profiled import ProfiledPerfModel

        return ProfiledPerfModel.load(kind.removeprefix(PROFILE_PREFIX))
    cal = CALIBRATIONS.get((model.name, gpu.name, tp))
    kappa = model.kv_bytes_per_token_per_gpu(tp) * tp / (eff_bw * gpu.mem_bw * tp)
    if kind == "auto" and cal is None:
        kind = "roofline"
    if kind == "roofline":
        return RooflinePerfModel(model, gpu, tp, eff_bw=eff_bw, **roofline_kw)
    if cal is None:
        cal = derive_linear(RooflinePerfModel(model, gpu, tp, eff_bw=eff_bw, **roofline_kw))
    return LinearPerfModel(
        cal.alpha_p, cal.beta_p, cal.alpha_d, cal.beta_d, kappa, source=cal.source
    )


def derive_linear(roof: PerfModel, ctx_ref: int = 512) -> LinearCalibration:
    """Fit α/β to the roofline (or any step-time model, e.g. a measured profile) the way the
    paper fits its GPU measurements: prefill sizes 256…4096, decode batches 16…1024 at
    ``ctx_ref`` context (ebplus.md §1.1), least squares."""
    import numpy as np

    p = np.array([256, 512, 1024, 2048, 4096])
    tp_ = np.array([roof.step_ns(0, 0, int(x), int(x * x), int(x), 1) for x in p]) / 1e9
    d = np.array([16, 32, 64, 128, 256, 384, 512, 768, 1024])
    td = np.array([roof.step_ns(int(n), int(n * ctx_ref)) for n in d]) / 1e9
    beta_p, alpha_p = np.polyfit(p, tp_, 1)
    beta_d, alpha_d = np.polyfit(d, td, 1)
    return LinearCalibration(
        float(max(alpha_p, 1e-6)),
        float(beta_p),
        float(max(alpha_d, 1e-6, 0.01 * beta_d)),
        float(beta_d),
        f"derived from the roofline of {roof.model.name} on {roof.gpu.name}"
        if isinstance(roof, RooflinePerfModel)
        else f"derived from the {roof.name} model",
    )
