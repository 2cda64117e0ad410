"""Mixed-step interference (EB paper, ``docs/research/ebplus.md`` §1.2, §1.5, Q2, Q14).

When prefill chunks and decodes share a forward pass, the bandwidth-bound decode attention runs
slower than alone, so a mixed step costs more than the sum of its exclusive parts. The paper
measures it as MB's effective per-token cost ``β_MB^e(r) = a + b·r + c·r²`` (r = decode-token
share), and the interference is ``ΔI(r) = β_MB^e(r) − β_EB^w(r)`` with
``β_EB^w(r) = β_p·(1−r) + β_d·r``.

The simulator charges a mixed step ``ΔI_step(r_step)·(n_p + n_d)`` on top of the base model,
``r_step = n_d/(n_p + n_d)`` (§1.5). Pure prefill and pure decode steps are untouched, so
``decode_run_ns`` stays bit-identical to the base model's.

Where the coefficients come from:

* **Measured GPUs** (Qwen3-8B on H200 and RTX PRO 6000): ``β_MB^e`` was fitted to
  1/throughput of whole vLLM-v1 runs, which folds step overheads and context growth into the
  quadratic (Q2). The step-level ``ΔI_step`` is the paper's ΔI shape times one factor per GPU
  (``STEP_SCALE``), chosen so that the simulator's own saturated MB runs (each at its best
  (B, N)) reproduce the paper's measured v1 throughput (Fig. 4) on the three synthetic mixes
  (r = 0.889, 0.5, 0.111); ``bench/ebplus_calibrate.py`` does the fit.
* **Every other (model, GPU)**: derived from the memory bandwidth BW through the two measured
  GPUs. Between them, a power law with log-bandwidth interpolation of the two measured shapes,
  ``ΔI(r) = w·ΔI_RTX(r)·(BW_RTX/BW)^γ + (1−w)·ΔI_H200(r)·(BW_H200/BW)^γ``,
  ``w = ln(BW_H200/BW) / ln(BW_H200/BW_RTX)``, γ fitted so that ΔI(0.5) passes through both
  anchors (exact at both; γ ≈ 2.3 with the calibrated anchors: on a slower memory the decode
  attention also holds the SMs longer against the prefill's GEMMs). Outside the measured range
  (L40S below, B200 above) we extrapolate conservatively with the bandwidth-bound scaling of
  the decode-attention KV read, ``ΔI ∝ 1/BW``, from the nearer anchor. Other models are scaled
  by ``f_model`` = the roofline decode cost per request (``β_d`` of the roofline at a 512-token
  context) relative to Qwen3-8B on the same GPU. ΔI therefore falls monotonically as bandwidth
  grows, and so does EB's gain over MB.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidal.hardware.gpus import GPUS, GPUSpec
from tidal.hardware.linear_calibration import CALIBRATIONS, derive_linear
from tidal.hardware.models import ModelSpec, get_model
from tidal.hardware.perf import LinearPerfModel, PerfModel, RooflinePerfModel, WrappedPerfModel


@dataclass(frozen=True)
class Quadratic:
    """``c0 + c1·r + c2·r²`` (seconds per token)."""

    c0: float
    c1: float
    c2: float

    def __call__(self, r: float) -> float:
        return self.c0 + self.c1 * r + self.c2 * r * r

    def scaled(self, s: float) -> Quadratic:
        return Quadratic(self.c0 * s, self.c1 * s, self.c2 * s)

    def plus(self, other: Quadratic, s: float = 1.0) -> Quadratic:
        return Quadratic(self.c0 + s * other.c0, self.c1 + s * other.c1, self.c2 + s * other.c2)


ANCHOR_MODEL = "qwen3-8b"
ANCHOR_H200 = "h200"
ANCHOR_RTX = "rtx-pro-6000"

MB_COST_FITS: dict[tuple[str, str, int], Quadratic] = {
    # eb-vllm reproduce/calibration/beta_mb_Qwen3-8B_H200.json (docs/research/ebplus.md §1.2)
    (ANCHOR_MODEL, ANCHOR_H200, 1): Quadratic(2.494e-5, 5.193e-5, 1.478e-5),
    # eb-vllm reproduce/calibration/beta_mb_Qwen3-8B_RTXPRO6000.json
    (ANCHOR_MODEL, ANCHOR_RTX, 1): Quadratic(6.2934e-5, 1.96893e-4, 9.899e-6),
}
"""The paper's measured MB effective per-token cost ``β_MB^e(r)`` (run level)."""

STEP_SCALE: dict[tuple[str, str, int], float] = {
    # `nice python bench/ebplus_calibrate.py --target fig4` (one factor on the paper's ΔI shape;
    # best-of-grid MB within +1.5/+0.5/−3.4 % (H200) and +8.6/−2.8/−1.2 % (RTX) of Fig. 4 v1
    # on the decode-heavy/balanced/prefill-heavy mixes)
    (ANCHOR_MODEL, ANCHOR_H200, 1): 0.379,
    (ANCHOR_MODEL, ANCHOR_RTX, 1): 0.815,
}
"""Q2 rescaling of the paper's run-level ΔI to the step level, per measured deployment."""


def _step_table() -> dict[tuple[str, str, int], Quadratic]:
    out = {}
    for key, scale in STEP_SCALE.items():
        q = paper_interference(*key)
        assert q is not None
        out[key] = q.scaled(scale)
    return out


def beta_eb_w(r: float, beta_p: float, beta_d: float) -> float:
    """EB's workload-weighted marginal cost per token, ``β_p·(1−r) + β_d·r`` (§1.2)."""
    return beta_p * (1.0 - r) + beta_d * r


def paper_interference(model: str, gpu: str, tp: int = 1) -> Quadratic | None:
    """``ΔI(r) = β_MB^e(r) − β_EB^w(r)`` from the paper's fits, where they exist."""
    fit = MB_COST_FITS.get((model, gpu, tp))
    cal = CALIBRATIONS.get((model, gpu, tp))
    if fit is None or cal is None:
        return None
    # β_EB^w(r) = β_p + (β_d − β_p)·r
    return Quadratic(fit.c0 - cal.beta_p, fit.c1 - (cal.beta_d - cal.beta_p), fit.c2)


STEP_INTERFERENCE: dict[tuple[str, str, int], Quadratic] = _step_table()
"""Step-level interference ``ΔI_step(r)`` (s/token) charged to mixed steps of measured GPUs:
``STEP_SCALE × (β_MB^e − β_EB^w)``."""


def _roofline_beta_d(model: ModelSpec, gpu: GPUSpec, tp: int) -> float:
    return derive_linear(RooflinePerfModel(model, gpu, tp)).beta_d


def derived_interference(
    model: ModelSpec,
    gpu: GPUSpec,
    tp: int = 1,
    anchors: dict[tuple[str, str, int], Quadratic] | None = None,
) -> Quadratic:
    """Default ``ΔI_step`` for a (model, GPU) without measurements (module docstring):
    bandwidth interpolation between the two measured Qwen3-8B GPUs (1/BW outside them), times
    the roofline decode-cost ratio of ``model`` to Qwen3-8B on ``gpu``."""
    table = STEP_INTERFERENCE if anchors is None else anchors
    q_h = table[(ANCHOR_MODEL, ANCHOR_H200, 1)]
    q_r = table[(ANCHOR_MODEL, ANCHOR_RTX, 1)]
    bw_h, bw_r = GPUS[ANCHOR_H200].mem_bw_tbs, GPUS[ANCHOR_RTX].mem_bw_tbs
    bw = gpu.mem_bw_tbs
    if bw <= bw_r:
        q = q_r.scaled(bw_r / bw)
    elif bw >= bw_h:
        q = q_h.scaled(bw_h / bw)
    else:
        gamma = math.log(q_r(0.5) / q_h(0.5)) / math.log(bw_h / bw_r)
        w = math.log(bw_h / bw) / math.log(bw_h / bw_r)
        q = q_r.scaled(w * (bw_r / bw) ** gamma).plus(q_h, (1.0 - w) * (bw_h / bw) ** gamma)
    if model.name != ANCHOR_MODEL or tp != 1:
        ref = _roofline_beta_d(get_model(ANCHOR_MODEL), gpu, 1)
        q = q.scaled(_roofline_beta_d(model, gpu, tp) / ref)
    return q


def has_measured_interference(model: ModelSpec, gpu: GPUSpec, tp: int = 1) -> bool:
    """Whether the interference of this deployment was measured (and calibrated, Q2)."""
    return (model.name, gpu.name, tp) in STEP_INTERFERENCE


def step_interference(model: ModelSpec, gpu: GPUSpec, tp: int = 1) -> tuple[Quadratic, str]:
    """The ``ΔI_step`` the simulator charges, and where it comes from."""
    key = (model.name, gpu.name, tp)
    if key in STEP_INTERFERENCE:
        return STEP_INTERFERENCE[key], "calibrated to the EB paper's measured v1 throughput"
    return derived_interference(model, gpu, tp), "derived from bandwidth (power law) and roofline"


class InterferencePerfModel(WrappedPerfModel):
    """A base model plus ``ΔI(r)·(n_p + n_d)`` on mixed steps (prefill and decode together).

    Exclusive steps return the base model's value unchanged, and ``decode_run_ns`` is the
    base's, so the fast-forward exactness contract of :mod:`tidal.hardware.perf` holds."""

    def __init__(self, base: PerfModel, interference: Quadratic, source: str = "") -> None:
        super().__init__(base)
        self.interference = interference
        self.source = source
        self.name = f"{base.name}+interference"
        # pure-decode steps are the base's: pass a piecewise-affine decode through
        self.decode_segment = getattr(base, "decode_segment", None)

    def adjust(self, seconds: Any, num_decodes: int, prefill_tokens: int) -> Any:
        if prefill_tokens > 0 and num_decodes > 0:
            tokens = prefill_tokens + num_decodes
            return seconds + self.interference(num_decodes / tokens) * tokens
        return seconds

    def decode_run_ns(self, num_decodes: int, decode_ctx: int, num_steps: int) -> Any:
        return self.base.decode_run_ns(num_decodes, decode_ctx, num_steps)

    def decode_affine(self, num_decodes: int) -> tuple[float, float] | None:
        return self.base.decode_affine(num_decodes)

    def describe(self) -> dict[str, Any]:
        q = self.interference
        return {
            **self.base.describe(),
            "name": self.name,
            "interference": [q.c0, q.c1, q.c2],
            "interference_source": self.source,
        }


@dataclass(frozen=True)
class StepCosts:
    """What the EB controller knows about the hardware (docs/research/ebplus.md §1): the linear
    exclusive step costs ``α_p + β_p·L`` and ``α_d + β_d·j`` (β_d at a 512-token context), the
    step-level interference of mixed steps, and the paper's measured ``β_MB^e`` fit if any."""

    alpha_p: float
    beta_p: float
    alpha_d: float
    beta_d: float
    interference: Quadratic = Quadratic(0.0, 0.0, 0.0)
    mb_cost_fit: Quadratic | None = None
    source: str = ""
    step_ns: Callable[..., int] | None = field(default=None, compare=False, repr=False)
    """The deployment's step-time function (``PerfModel.step_ns``) the constants were fitted
    to, when known: EB⁺'s crossover may evaluate it at the operating point
    (:mod:`tidal.batching.eb_cost`)."""

    def beta_eb_w(self, r: float) -> float:
        return beta_eb_w(r, self.beta_p, self.beta_d)

    def beta_mb_e(self, r: float, paper_fit: bool = False) -> float:
        """MB's effective marginal cost per token at decode share r: the paper's measured fit
        (``paper_fit`` and one exists), else ``β_EB^w(r) + ΔI_step(r)`` (Q14)."""
        if paper_fit and self.mb_cost_fit is not None:
            return self.mb_cost_fit(r)
        return self.beta_eb_w(r) + self.interference(r)


def step_costs(model: ModelSpec, gpu: GPUSpec, tp: int, perf: PerfModel) -> StepCosts:
    """The EB view of a deployment's performance model: its own linear constants when it is
    linear (measured or roofline-derived), else those the paper's calibration recipe would
    measure on it (``derive_linear``: prefill 256…4096 tokens, decode 16…1024 requests at a
    512-token context, least squares)."""
    base = perf.base if isinstance(perf, InterferencePerfModel) else perf
    if isinstance(base, LinearPerfModel):
        a_p, b_p, a_d, b_d, src = base.alpha_p, base.beta_p, base.alpha_d, base.beta_d, base.source
        if base.ctx_ref != 512:  # the EB view's β_d is at a 512-token context (INFERCEPT: 0)
            b_d = base.beta_d0 + base.kappa * 512
    elif isinstance(base, RooflinePerfModel):
        # the least-squares intercepts can vanish (prefill attention curves the fit); a step
        # never costs less than the roofline's fixed per-step overhead
        cal = derive_linear(base)
        a_p = max(cal.alpha_p, base.step_overhead_s)
        a_d = max(cal.alpha_d, base.step_overhead_s)
        b_p, b_d, src = cal.beta_p, cal.beta_d, cal.source
    else:  # e.g. a profile measured on the real engine: the same recipe, measured on it
        cal = derive_linear(base)
        a_p, b_p, a_d, b_d, src = cal.alpha_p, cal.beta_p, cal.alpha_d, cal.beta_d, cal.source
    inner = base
    while isinstance(inner, WrappedPerfModel):  # e.g. an SM-share or eager-overhead wrapper
        inner = inner.base
    if isinstance(perf, InterferencePerfModel):
        q = perf.interference
    elif isinstance(inner, (LinearPerfModel, RooflinePerfModel)):
        q = step_interference(model, gpu, tp)[0]
    else:  # a measured profile: its machine is not ``gpu``, and it measured no interference
        q = Quadratic(0.0, 0.0, 0.0)
    fit = MB_COST_FITS.get((model.name, gpu.name, tp))
    return StepCosts(a_p, b_p, a_d, b_d, q, fit, src, perf.step_ns)
