"""Measured step-cost constants and the choice of performance model for a deployment.

The EB paper's authors calibrated Qwen3-8B (fp16, TP=1, vLLM eager mode) on two GPUs; their
files are ``reproduce/calibration/pd_calibration_Qwen3-8B_{H200,RTXPRO6000}.json`` in the public
eb-vllm repository, quoted in ``docs/research/ebplus.md`` §1.1. Decode constants were measured
with a 512-token context per request.

INFERCEPT (ICML 2024) profiled its A100 testbed (a vLLM-0.2 fork, eager kernels) for GPT-J-6B
on one GPU and Vicuna-13B with TP = 2; its experiment scripts set "the profiling variables
used in the paper" (``exps/README.md``, ``exps/6B_bench.sh``, ``exps/13B_tp2_bench.sh`` in
github.com/WukLab/InferCept, read for ``docs/research/augserve.md`` §2.4):

* iteration time ``It(N) = α·N + γ`` ms for a batch of N tokens (``discard_waste`` in
  ``vllm/core/scheduler_v2.py``): 6B α = 0.0463, γ = 10; 13B-TP2 α = 0.0279, γ = 15.4 —
  27.78 ms and 26.11 ms at the 384-token saturation point;
* per-iteration swap budgets (``_set_max_ragged_batch``): swap-in ``a·N_sat + b + free/2``,
  swap-out ``(1+a)·N_sat + b − free/2`` tokens, 6B a = 0.00462, b = 108.99; 13B-TP2
  a = −0.3297119141, b = 93.994140625. The free-memory terms only move budget between the
  two directions; their sum ``(1 + 2a)·N_sat + 2b`` (605.6 tokens for 6B, 318.8 for 13B) is
  what the testbed moves per saturated iteration while hiding it under compute.

How they enter the simulator (:data:`CALIBRATIONS`, :func:`measured_host_link`):

* the profile is a :class:`LinearCalibration` with ``α_p = α_d = γ`` and ``β_p = β_d = α``
  (INFERCEPT charges every batch token alike) and ``ctx_ref = 0``: the profile has no context
  term, so the KV read of decode attention, ``κ·Σctx`` (bandwidth-bound, κ = KV bytes /
  (0.8·BW)), is added on top [INF: the profile's reference context is not published];
* the line was fitted around the 384-token budget INFERCEPT runs at; extrapolated to the
  2048–8192-token steps of vLLM and AugServe, the 13B slope (27.9 µs per token on two A100s,
  i.e. 910 TFLOP/s) would outrun the GPUs' 624 TFLOP/s peak. Steps are therefore floored at
  their GEMM time at the efficiency the 6B profile itself implies (linear FLOPs per token /
  (α_6B · peak) = 0.78, :data:`INFERCEPT_GEMM_EFFICIENCY`): the floor never binds for 6B
  (γ > 0) and binds for 13B-TP2 above ≈ 630 tokens per step [INF];
* the swap budget becomes the host link's effective rate: half the summed budget per
  direction per saturated iteration, ``((1+2a)·N_sat + 2b)/2 / It(N_sat)`` tokens/s — 5.0
  GB/s for 6B and 2.5 GB/s per GPU for 13B-TP2, against the 25.6 GB/s that 0.8 × PCIe 4.0
  would give (vLLM 0.2 swaps block by block, per layer) [INF].
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import GPUSpec, get_gpu
from tidal.hardware.models import ModelSpec, get_model
from tidal.hardware.perf import LinearPerfModel, PerfModel, RooflinePerfModel


@dataclass(frozen=True)
class LinearCalibration:
    alpha_p: float
    beta_p: float
    alpha_d: float
    beta_d: float
    source: str
    ctx_ref: int = 512
    """Context per decode request at which ``beta_d`` was measured (the EB paper's 512)."""
    floor_s_per_token: float = 0.0
    """Lower bound on a step, per batch token (0: none); see :class:`LinearPerfModel`."""


@dataclass(frozen=True)
class InferceptProfile:
    """INFERCEPT's profiled constants of one deployment (module docstring)."""

    alpha_ms: float
    """Iteration time per batch token (ms)."""
    gamma_ms: float
    """Fixed iteration time (ms)."""
    swap_a: float
    swap_b: float
    source: str
    saturation_tokens: int = 384

    def iteration_s(self, tokens: float) -> float:
        """``It(N) = (α·N + γ) / 1000`` seconds."""
        return (self.alpha_ms * tokens + self.gamma_ms) / 1e3

    @property
    def swap_tokens_per_iteration(self) -> float:
        """Swap-in plus swap-out budget of one saturated iteration, ``(1 + 2a)·N_sat + 2b``."""
        return (1 + 2 * self.swap_a) * self.saturation_tokens + 2 * self.swap_b

    @property
    def swap_tokens_per_s(self) -> float:
        """Per direction: half the summed budget per saturated iteration."""
        return self.swap_tokens_per_iteration / 2 / self.iteration_s(self.saturation_tokens)


# The source labels of these tables reach every result's metrics (golden digests pin them), so
# they keep their wording: ``augserve.md`` and ``ebplus.md`` are the notes in docs/research/.
INFERCEPT_PROFILES: dict[tuple[str, str, int], InferceptProfile] = {
    ("gpt-j-6b", "a100-80gb", 1): InferceptProfile(
        0.0463, 10.0, 0.00462, 108.99, "INFERCEPT exps/6B_bench.sh (augserve.md §2.4)"
    ),
    ("vicuna-13b", "a100-80gb", 2): InferceptProfile(
        0.0279,
        15.4,
        -0.3297119141,
        93.994140625,
        "INFERCEPT exps/13B_tp2_bench.sh (augserve.md §2.4)",
    ),
}


def _infercept_gemm_efficiency() -> float:
    prof = INFERCEPT_PROFILES[("gpt-j-6b", "a100-80gb", 1)]
    flops = get_model("gpt-j-6b").linear_flops_per_token
    return flops / (prof.alpha_ms / 1e3 * get_gpu("a100-80gb").flops)


INFERCEPT_GEMM_EFFICIENCY = _infercept_gemm_efficiency()
"""Fraction of the A100's peak that INFERCEPT's GPT-J-6B slope implies for the linear layers
(≈ 0.78): the testbed's GEMM efficiency, used to floor the profiles' steps."""


def infercept_calibration(model: str, gpu: str, tp: int) -> LinearCalibration:
    """The :class:`LinearCalibration` of an INFERCEPT profile (module docstring)."""
    p = INFERCEPT_PROFILES[(model, gpu, tp)]
    floor = get_model(model).linear_flops_per_token / (
        INFERCEPT_GEMM_EFFICIENCY * get_gpu(gpu).flops * tp
    )
    a, g = p.alpha_ms / 1e3, p.gamma_ms / 1e3
    return LinearCalibration(g, a, g, a, p.source, ctx_ref=0, floor_s_per_token=floor)


def measured_host_link(model: ModelSpec, gpu: GPUSpec, tp: int) -> tuple[float, str] | None:
    """Effective host-link bytes/s per GPU and direction measured for this deployment
    (INFERCEPT's swap budget, module docstring), or None."""
    p = INFERCEPT_PROFILES.get((model.name, gpu.name, tp))
    if p is None:
        return None
    return p.swap_tokens_per_s * model.kv_bytes_per_token_per_gpu(tp), p.source


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
    **{key: infercept_calibration(*key) for key in INFERCEPT_PROFILES},
}

PERF_MODELS = (
    "auto", "roofline", "linear", "measured", "vidur", "corrected-roofline", "corrected", "engine",
    "auto-vidur",
)  # fmt: skip
"""``auto``: :mod:`tidal.hardware.auto_perf` (a paper's calibration > the engine tables > the
Vidur profiles > the corrected roofline); ``auto-vidur``: the ``auto`` of before issue 28
(without the tables); ``roofline``: the plain roofline (:class:`RooflinePerfModel`);
``corrected-roofline`` (alias ``corrected``): the roofline fitted on measured kernels
(:mod:`tidal.hardware.corrected`);
``measured`` (alias ``vidur``): the bundled GPU operator profiles of Vidur's older engine
(:mod:`tidal.hardware.measured`); ``engine``: the measured operator tables of the serving
engine and version (:mod:`tidal.hardware.engine_perf`)."""
@dataclass(frozen=True)
class EngineChoice:
    """Which engine's tables ``--perf-model engine`` reads (``SimulationConfig``'s keys
    ``engine``, ``engine_version``, ``enable_expert_parallel``, ``moe_distribution``)."""

    engine: str = "vllm"
    version: str | None = None
    expert_parallel: bool = False
    moe_distribution: str = "power_law_1.01"
    data_parallel: int = 1
    moe_tp: int | None = None
    """MoE tensor parallelism of a hybrid TP × EP MoE (SGLang's ``--moe-dense-tp``-style
    splits); None: all TP, or all EP with ``expert_parallel``."""


PROFILE_PREFIX = "profile:"
"""``profile:PATH``: a step-time profile measured on the real engine (``tidal calibrate``)."""
MEASURED_PREFIX = "measured:"
"""``measured:PATH``: a ``tidal-gpu-profile/1`` file (``tidal profile-gpu``; PROFILE_FORMAT.md)."""


def check_perf_model(kind: str) -> None:
    """Raise a ``ConfigError`` unless ``kind`` names a performance model (profiles are read)."""
    if kind.startswith(PROFILE_PREFIX):
        from tidal.hardware.profiled import ProfiledPerfModel

        ProfiledPerfModel.load(kind.removeprefix(PROFILE_PREFIX))
        return
    if kind.startswith(MEASURED_PREFIX):
        from tidal.hardware.opprofile import load_profile

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
    from tidal.hardware.measured import MeasuredPerfModel
    from tidal.hardware.opprofile import deployment, load_profile

    profiles = (load_profile(path),) if path is not None else None
    heads = (model.num_heads, model.num_kv_heads, model.d_head)
    dep = deployment(gpu.name, model.name, tp, profiles, heads)
    return None if dep is None else MeasuredPerfModel(dep, model, gpu, tp, host=host)


def perf_model_source(perf: PerfModel) -> str:
    """Where a model's step times come from, for ``summary.json``'s ``perf_model_source``:
    ``measured:<source>/<gpu>/<model>/tp<N>``, ``corrected-roofline``, ``roofline``,
    ``calibrated:<citation>``, ``profile:<source>``; ``+interference`` when wrapped."""
    from tidal.hardware.corrected import CorrectedRooflinePerfModel
    from tidal.hardware.measured import MeasuredPerfModel
    from tidal.hardware.perf import WrappedPerfModel

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
        data_parallel, moe_tp,
    )  # fmt: skip


def perf_model_tables(perf: PerfModel) -> dict[str, Any]:
    """``summary.json``'s record of the engine tables a step model read (``perf_model:
    engine``: data source and its version, engine, engine version, GPU tables, the version of
    each operator family, and which parts fell back); empty for the other models."""
    from tidal.hardware.engine_perf import EnginePerfModel
    from tidal.hardware.perf import WrappedPerfModel

    base = perf.base if isinstance(perf, WrappedPerfModel) else perf
    if not isinstance(base, EnginePerfModel):
        return {}
    return {"perf_model_tables": {**base.tables.describe(), "parts": base.parts}}


def client_side_metrics(perf: PerfModel, cols: Any) -> dict[str, Any]:
    """``summary.json``'s client-side TTFT / E2E family (:mod:`tidal.hardware.api_server`)
    with ``perf_model: engine``, whose engine is known; empty for the other models."""
    from tidal.hardware.api_server import client_metrics, overhead_for
    from tidal.hardware.engine_perf import EnginePerfModel
    from tidal.hardware.perf import WrappedPerfModel

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
        from tidal.hardware.auto_perf import resolve_auto

        kind, engine = resolve_auto(model, gpu, tp, engine)
    if kind == "engine":
        from tidal.hardware.engine_perf import EnginePerfModel

        e = engine or EngineChoice()
        base: PerfModel = EnginePerfModel(
            model, gpu, tp, e.engine, e.version, host, e.expert_parallel, e.moe_distribution,
            e.data_parallel, e.moe_tp,
        )  # fmt: skip
    else:
        base = _build_base(kind, model, gpu, tp, eff_bw, host, **roofline_kw)
    if not interference:
        return base
    from tidal.hardware.interference import InterferencePerfModel, step_interference

    q, source = step_interference(model, gpu, tp)
    return InterferencePerfModel(base, q, source)


def _build_base(
    kind: str, model: ModelSpec, gpu: GPUSpec, tp: int, eff_bw: float, host: str,
    **roofline_kw: float,
) -> PerfModel:  # fmt: skip
    from tidal.hardware.corrected import check_host

    check_perf_model(kind)
    check_host(host)
    if kind.startswith(PROFILE_PREFIX):
        from tidal.hardware.profiled import ProfiledPerfModel

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
        from tidal.hardware.corrected import CorrectedRooflinePerfModel

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
    from tidal.hardware.opprofile import bundled_profiles

    have = sorted(
        f"{x.model}@{p.gpu}/tp{x.tp}" for p in bundled_profiles() for x in p.linear
        if x.model == model.name or p.gpu == gpu.name
    )  # fmt: skip
    return ConfigError(
        "perf_model",
        f"no measured profile for {model.name} on {gpu.name} with tp {tp} in {where}",
        "use auto or corrected-roofline; measured data: " + (", ".join(have[:12]) or "none"),
    )


def line_fit(x: Iterable[float], y: Iterable[float]) -> tuple[float, float]:
    """Least-squares line ``y ≈ slope·x + intercept`` in closed form with exactly rounded sums
    (``math.fsum``): slope = Σ(x−x̄)(y−ȳ) / Σ(x−x̄)². Unlike ``np.polyfit`` (LAPACK) the result
    is the same on every CPU, which the simulator's determinism needs."""
    xs, ys = [float(v) for v in x], [float(v) for v in y]
    n = len(xs)
    if n < 2 or len(ys) != n:
        raise ValueError(f"a line needs >= 2 paired points, got {n} and {len(ys)}")
    xm, ym = math.fsum(xs) / n, math.fsum(ys) / n
    sxx = math.fsum((a - xm) ** 2 for a in xs)
    if sxx == 0:
        raise ValueError("a line needs two distinct x values")
    slope = math.fsum((a - xm) * (b - ym) for a, b in zip(xs, ys, strict=True)) / sxx
    return slope, ym - slope * xm


def derive_linear(roof: PerfModel, ctx_ref: int = 512) -> LinearCalibration:
    """Fit α/β to the roofline (or any step-time model, e.g. a measured profile) the way the
    paper fits its GPU measurements: prefill sizes 256…4096, decode batches 16…1024 at
    ``ctx_ref`` context (docs/research/ebplus.md §1.1), least squares."""
    import numpy as np

    p = np.array([256, 512, 1024, 2048, 4096])
    tp_ = np.array([roof.step_ns(0, 0, int(x), int(x * x), int(x), 1) for x in p]) / 1e9
    d = np.array([16, 32, 64, 128, 256, 384, 512, 768, 1024])
    td = np.array([roof.step_ns(int(n), int(n * ctx_ref)) for n in d]) / 1e9
    beta_p, alpha_p = line_fit(p, tp_)
    beta_d, alpha_d = line_fit(d, td)
    return LinearCalibration(
        float(max(alpha_p, 1e-6)),
        float(beta_p),
        float(max(alpha_d, 1e-6, 0.01 * beta_d)),
        float(beta_d),
        f"derived from the roofline of {roof.model.name} on {roof.gpu.name}"
        if isinstance(roof, RooflinePerfModel)
        else f"derived from the {roof.name} model",
    )
