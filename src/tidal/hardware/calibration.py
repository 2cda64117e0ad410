"""The choice of performance model for a deployment (:func:`build_perf_model`, ``--perf-model``).

The measured step-cost constants it draws on live in :mod:`tidal.hardware.linear_calibration`
(re-exported here: :data:`CALIBRATIONS`, :class:`LinearCalibration`, :func:`derive_linear`).
"""

from __future__ import annotations

from typing import Any

from tidal.core.errors import ConfigError
from tidal.hardware.api_server import client_metrics, overhead_for
from tidal.hardware.auto_perf import EngineChoice, refuse_engine_only, resolve_auto
from tidal.hardware.corrected import CorrectedRooflinePerfModel, check_host
from tidal.hardware.engine_perf import EnginePerfModel, system_of
from tidal.hardware.gpus import GPUSpec
from tidal.hardware.interference import InterferencePerfModel, step_interference
from tidal.hardware.linear_calibration import (
    CALIBRATIONS,
    INFERCEPT_GEMM_EFFICIENCY,
    INFERCEPT_PROFILES,
    InferceptProfile,
    LinearCalibration,
    derive_linear,
    infercept_calibration,
    line_fit,
    measured_host_link,
)
from tidal.hardware.measured import MeasuredPerfModel
from tidal.hardware.models import ModelSpec
from tidal.hardware.opprofile import bundled_profiles, deployment, load_profile
from tidal.hardware.perf import LinearPerfModel, PerfModel, RooflinePerfModel, WrappedPerfModel
from tidal.hardware.pipeline import PipelinePerfModel, pipeline_model, unwrap_pipeline
from tidal.hardware.profiled import ProfiledPerfModel

__all__ = [  # moved to :mod:`tidal.hardware.linear_calibration`, still importable from here
    "CALIBRATIONS",
    "INFERCEPT_GEMM_EFFICIENCY",
    "INFERCEPT_PROFILES",
    "InferceptProfile",
    "LinearCalibration",
    "derive_linear",
    "infercept_calibration",
    "line_fit",
    "measured_host_link",
]


PERF_MODELS = (
    "auto", "roofline", "linear", "measured", "vidur", "corrected-roofline", "corrected", "engine",
    "auto-vidur",
)  # fmt: skip
"""``auto``: :mod:`tidal.hardware.auto_perf` (the engine tables > a paper's calibration > the
Vidur profiles > the corrected roofline); ``auto-vidur``: the ``auto`` of before issue 28
(without the tables); ``roofline``: the plain roofline (:class:`RooflinePerfModel`);
``corrected-roofline`` (alias ``corrected``): the roofline fitted on measured kernels
(:mod:`tidal.hardware.corrected`);
``measured`` (alias ``vidur``): the bundled GPU operator profiles of Vidur's older engine
(:mod:`tidal.hardware.measured`); ``engine``: the measured operator tables of the serving
engine and version (:mod:`tidal.hardware.engine_perf`)."""


PROFILE_PREFIX = "profile:"
"""``profile:PATH``: a step-time profile measured on the real engine (``tidal calibrate``)."""
MEASURED_PREFIX = "measured:"
"""``measured:PATH``: a ``tidal-gpu-profile/1`` file (``tidal profile-gpu``; PROFILE_FORMAT.md)."""


def check_perf_model(kind: str) -> None:
    """Raise a ``ConfigError`` unless ``kind`` names a performance model (profiles are read)."""
    if kind.startswith(PROFILE_PREFIX):
        ProfiledPerfModel.load(kind.removeprefix(PROFILE_PREFIX))
        return
    if kind.startswith(MEASURED_PREFIX):
        load_profile(kind.removeprefix(MEASURED_PREFIX))
        return
    if kind not in PERF_MODELS:
        raise ConfigError(
            "perf_model",
            f"unknown value {kind!r}",
            f"valid: {', '.join(PERF_MODELS)}, {PROFILE_PREFIX}PATH, {MEASURED_PREFIX}PATH",
        )


def measured_model(
    model: ModelSpec, gpu: GPUSpec, tp: int, path: str | None = None, host: str = "vllm-v1"
) -> PerfModel | None:
    """The :class:`~tidal.hardware.measured.MeasuredPerfModel` of (model, GPU, TP) from the
    bundled profiles (or the profile file ``path``), None when they have no data for it."""
    profiles = (load_profile(path),) if path is not None else None
    heads = (model.num_heads, model.num_kv_heads, model.d_head)
    dep = deployment(gpu.name, model.name, tp, profiles, heads)
    return None if dep is None else MeasuredPerfModel(dep, model, gpu, tp, host=host)


def perf_model_source(perf: PerfModel) -> str:
    """Where a model's step times come from, for ``summary.json``'s ``perf_model_source``:
    ``measured:<source>/<gpu>/<model>/tp<N>``, ``corrected-roofline``, ``roofline``,
    ``calibrated:<citation>``, ``profile:<source>``; ``+interference`` when wrapped;
    ``+pp<N>`` over ``N`` pipeline stages."""
    if isinstance(perf, PipelinePerfModel):
        return perf_model_source(perf.base) + f"+pp{perf.pp}"
    if isinstance(perf, WrappedPerfModel):
        return perf_model_source(perf.base) + "+interference"
    if isinstance(perf, MeasuredPerfModel):
        return perf.source
    if isinstance(perf, CorrectedRooflinePerfModel):
        return "corrected-roofline"
    if isinstance(perf, LinearPerfModel):
        return f"calibrated:{perf.source}" if perf.source else "linear"
    src = getattr(perf, "source", "")
    return f"{perf.name}:{src}" if isinstance(src, str) and src else perf.name


def engine_choice(cfg: Any, data_parallel: int = 1, moe_tp: int | None = None) -> EngineChoice:
    """The :class:`EngineChoice` of a config holding ``engine``, ``engine_version``,
    ``enable_expert_parallel`` and ``moe_distribution`` (the simulation or cluster config)."""
    return EngineChoice(
        cfg.engine, cfg.engine_version, cfg.enable_expert_parallel, cfg.moe_distribution,
        data_parallel, moe_tp, getattr(cfg, "pipeline_parallel_size", 1),
        getattr(cfg, "async_scheduling", None),
    )  # fmt: skip


def perf_model_tables(perf: PerfModel) -> dict[str, Any]:
    """``summary.json``'s record of the engine tables a step model read (``perf_model:
    engine``: data source and its version, engine, engine version, GPU tables, the version of
    each operator family, and which parts fell back); empty for the other models."""
    perf = unwrap_pipeline(perf)
    base = perf.base if isinstance(perf, WrappedPerfModel) else perf
    if not isinstance(base, EnginePerfModel):
        return {}
    out = {**base.tables.describe(), "parts": base.parts}
    if base.engine_host is not None:  # scheduling mode and the engine core's CPU time
        out["engine_host"] = base.engine_host.describe()
    return {"perf_model_tables": out}


def client_side_metrics(perf: PerfModel, cols: Any) -> dict[str, Any]:
    """``summary.json``'s client-side TTFT / E2E family (:mod:`tidal.hardware.api_server`)
    with ``perf_model: engine``, whose engine is known; empty for the other models."""
    perf = unwrap_pipeline(perf)
    base = perf.base if isinstance(perf, WrappedPerfModel) else perf
    if not isinstance(base, EnginePerfModel):
        return {}
    over = overhead_for(base.tables.engine)
    return {} if over is None else client_metrics(over, cols)


def build_perf_model(
    kind: str,
    model: ModelSpec,
    gpu: GPUSpec,
    tp: int = 1,
    eff_bw: float = 0.8,
    interference: bool = False,
    host: str = "vllm-v1",
    engine: EngineChoice | None = None,
    **roofline_kw: float,
) -> PerfModel:
    """``engine``: the serving engine's measured operator tables (``engine`` names the
    engine, version and expert parallelism; vLLM's newest tables by default).
    ``profile:PATH``: the profile measured on the real engine (``tidal calibrate``).
    ``auto``: in this order, the papers' calibrated linear model where one exists for (model,
    GPU, TP) (EB paper, INFERCEPT), the engine's tables where the GPU has them for the
    engine, the bundled measured operator profiles (``measured``), else the corrected
    roofline (:mod:`tidal.hardware.auto_perf`); ``auto-vidur``: the same without the tables
    (``auto`` before issue 28). ``roofline``: the plain roofline.
    ``linear``: measured constants, or constants derived from the roofline (α from a
    one-token step, β from the marginal cost of a 512-token-context decode and of a prefill
    token) when none were measured. ``interference`` adds the mixed-step interference term of
    :mod:`tidal.hardware.interference` (EB paper §1.2) on top of either. ``host``: whose
    per-step host time the measured and corrected models add (``vllm-v1``, the default, or
    ``vidur``; :data:`tidal.hardware.corrected.HOST_MODES`)."""
    if kind == "auto":
        kind, engine = resolve_auto(model, gpu, tp, engine)
    if kind == "engine":
        e = engine or EngineChoice()
        base: PerfModel = EnginePerfModel(
            model, gpu, tp, e.engine, e.version, host, e.expert_parallel, e.moe_distribution,
            e.data_parallel, e.moe_tp, e.async_scheduling,
        )  # fmt: skip
    else:
        base = _build_base(kind, model, gpu, tp, eff_bw, host, **roofline_kw)
    if interference:
        q, source = step_interference(model, gpu, tp)
        base = InterferencePerfModel(base, q, source)
    if engine is None or engine.pipeline == 1:
        return base
    if kind != "engine":  # the settings check refuses it before; a direct caller gets this
        raise refuse_engine_only(["pipeline_parallel_size"], f"perf_model {kind} has none")
    e = engine
    return pipeline_model(base, model, tp, e.pipeline, gpu.peer_bw, system_of(gpu),
                          e.data_parallel)  # fmt: skip


def _build_base(
    kind: str, model: ModelSpec, gpu: GPUSpec, tp: int, eff_bw: float, host: str,
    **roofline_kw: float,
) -> PerfModel:  # fmt: skip

    check_perf_model(kind)
    check_host(host)
    if kind.startswith(PROFILE_PREFIX):
        return ProfiledPerfModel.load(kind.removeprefix(PROFILE_PREFIX))
    if kind.startswith(MEASURED_PREFIX):
        meas = measured_model(model, gpu, tp, kind.removeprefix(MEASURED_PREFIX), host)
        if meas is None:
            raise _no_measured(model, gpu, tp, kind.removeprefix(MEASURED_PREFIX))
        return meas
    cal = CALIBRATIONS.get((model.name, gpu.name, tp))
    kappa = model.kv_bytes_per_token_per_gpu(tp) * tp / (eff_bw * gpu.mem_bw * tp)
    if kind == "vidur":
        kind = "measured"
    if kind == "measured" or (kind in ("auto", "auto-vidur") and cal is None):
        meas = measured_model(model, gpu, tp, host=host)
        if meas is not None:
            return meas
        if kind == "measured":
            raise _no_measured(model, gpu, tp, "the bundled profiles")
        kind = "corrected-roofline"
    if kind in ("corrected-roofline", "corrected"):
        return CorrectedRooflinePerfModel(model, gpu, tp, host=host)
    if kind == "roofline":
        return RooflinePerfModel(model, gpu, tp, eff_bw=eff_bw, **roofline_kw)
    if cal is None:
        cal = derive_linear(RooflinePerfModel(model, gpu, tp, eff_bw=eff_bw, **roofline_kw))
    return LinearPerfModel(
        cal.alpha_p,
        cal.beta_p,
        cal.alpha_d,
        cal.beta_d,
        kappa,
        cal.ctx_ref,
        source=cal.source,
        floor_s_per_token=cal.floor_s_per_token,
    )


def _no_measured(model: ModelSpec, gpu: GPUSpec, tp: int, where: str) -> ConfigError:
    have = sorted(
        f"{x.model}@{p.gpu}/tp{x.tp}" for p in bundled_profiles() for x in p.linear
        if x.model == model.name or p.gpu == gpu.name
    )  # fmt: skip
    return ConfigError(
        "perf_model",
        f"no measured profile for {model.name} on {gpu.name} with tp {tp} in {where}",
        "use auto or corrected-roofline; measured data: " + (", ".join(have[:12]) or "none"),
    )
