"""vLLM v1's per-step host time, fitted on the EB paper's step constants of *other* models.

Data (weifang231/eb-vllm, ``reproduce/calibration/pd_calibration_<model>_<GPU>.json``; facts
only): vLLM-v1 step times fitted as α + β·x over prefill chunks of 256–4096 tokens and decode
batches of 16–1024 requests at 512 context, ``enforce_eager=True``, CUDA events around
``execute_model`` (docs/research/ebplus.md §1.1). Fitted here: Llama-3.1-8B and Mistral-7B
on H200 and RTX PRO 6000. Held out: Qwen3-8B on both (``CALIBRATIONS``), the cross-check.

Model of an eager step (S sequences; K = the corrected roofline's kernels + LM head):

    T = max(K, L·λ) + h0 + h1·S

``L·λ``: eager mode issues every layer's kernels from Python, so a step whose kernels are
short waits on the launches (the EB paper's α_d of 6–10 ms against ≈ 4 ms of weight reads,
ebplus.md §1.4); the launches overlap the kernels otherwise. ``h0 + h1·S``: input
preparation, sampling and output handling, which CUDA graphs do not remove. Per testbed
(λ, h0, h1) by least squares on relative error with a soft-L1 loss (one odd fit, Mistral-7B
on RTX PRO 6000 with β_d 2.3× Llama's and R² 0.97, must not dominate). The simulator
emulates vLLM v1's default CUDA-graph mode: it adds ``h0 + h1·S`` of the H200 testbed (a
datacentre host) and no launch floor.

Run ``python bench/host_fit.py`` for the fit and the held-out Qwen3-8B errors (``--write``
also stores the graph-mode term in ``data/profiles/roofline_fit.json`` as ``hosts``).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable

import numpy as np
from scipy.optimize import least_squares

from tidal.hardware.calibration import CALIBRATIONS
from tidal.hardware.corrected import (
    CONSTANTS_PATH,
    CorrectedRooflinePerfModel,
    HostConst,
    RooflineConstants,
)
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model

EB = "weifang231/eb-vllm reproduce/calibration/pd_calibration_{}_{}.json"
FIT: dict[tuple[str, str], tuple[float, float, float, float]] = {
    # (model, gpu) → (α_p s, β_p s/token, α_d s, β_d s/request at 512 context)
    ("llama-3.1-8b", "h200"): (0.3467386e-3, 24.204085e-6, 6.7906855e-3, 44.399051e-6),
    ("mistral-7b", "h200"): (0.1003098e-3, 24.207942e-6, 6.6822284e-3, 41.605711e-6),
    ("llama-3.1-8b", "rtx-pro-6000"): (2.0509098e-3, 49.872169e-6, 9.7646241e-3, 95.025703e-6),
    ("mistral-7b", "rtx-pro-6000"): (1.5595366e-3, 49.322069e-6, 10.3759989e-3, 227.30061e-6),
}
SOURCES = {
    ("llama-3.1-8b", "h200"): EB.format("Llama-3.1-8B-Instruct", "H200"),
    ("mistral-7b", "h200"): EB.format("Mistral-7B-v0.1", "H200"),
    ("llama-3.1-8b", "rtx-pro-6000"): EB.format("Meta-Llama-3.1-8B-Instruct", "RTXPRO6000"),
    ("mistral-7b", "rtx-pro-6000"): EB.format("Mistral-7B-v0.1", "RTXPRO6000"),
}
HELD_OUT = [("qwen3-8b", "h200"), ("qwen3-8b", "rtx-pro-6000")]
PREFILL = (256, 512, 1024, 2048, 4096)
DECODE = (16, 32, 64, 128, 256, 384, 512, 768, 1024)
CTX = 512
DEFAULT_TESTBED = "h200"


def eb_constants(model: str, gpu: str) -> tuple[float, float, float, float]:
    if (model, gpu) in FIT:
        return FIT[(model, gpu)]
    c = CALIBRATIONS[(model, gpu, 1)]
    return c.alpha_p, c.beta_p, c.alpha_d, c.beta_d


def shapes(model: str, gpu: str, consts: RooflineConstants | None = None):
    """(kind, x, S, layers, kernel seconds K, EB's measured seconds) per calibration shape."""
    m, g = get_model(model), get_gpu(gpu)
    perf = CorrectedRooflinePerfModel(m, g, 1, consts)
    ap, bp, ad, bd = eb_constants(model, gpu)
    out = []
    for p in PREFILL:
        k = perf.kernel_seconds(0, 0, p, p, 1, p * p) + perf.head_s(1)
        out.append(("prefill", p, 1, m.num_layers, k, ap + bp * p))
    for n in DECODE:
        k = perf.kernel_seconds(n, n * CTX, 0) + perf.head_s(n)
        out.append(("decode", n, n, m.num_layers, k, ad + bd * n))
    return out


def eager_step(k: float, s: int, layers: int, lam_us: float, h0_us: float, h1_us: float) -> float:
    return max(k, layers * lam_us * 1e-6) + (h0_us + h1_us * s) * 1e-6


def fit_testbed(gpu: str, consts: RooflineConstants | None = None) -> tuple[float, float, float]:
    """(λ µs per layer, h0 µs, h1 µs per sequence) on the fitted models of one testbed."""
    rows = [r for (mo, g) in FIT if g == gpu for r in shapes(mo, g, consts)]

    def resid(x: np.ndarray) -> np.ndarray:
        return np.array([eager_step(k, s, L, *x) / t - 1.0 for _, _, s, L, k, t in rows])

    sol = least_squares(resid, [200.0, 500.0, 5.0], bounds=([0, 0, 0], [2000, 2e4, 500]),
                        loss="soft_l1", f_scale=0.05)  # fmt: skip
    return float(sol.x[0]), float(sol.x[1]), float(sol.x[2])


def fit_vllm_v1_host(consts: RooflineConstants | None = None) -> HostConst:
    """The graph-mode host term (h0, h1) of the default testbed."""
    _, h0, h1 = fit_testbed(DEFAULT_TESTBED, consts)
    return HostConst(step_us=h0, per_seq_us=h1)


def errors(model: str, gpu: str, step: Callable[[str, float, int, int], float]) -> list[float]:
    return [abs(step(kind, k, s, L) / t - 1.0) for kind, _, s, L, k, t in shapes(model, gpu)]


def main() -> None:
    consts = RooflineConstants.model_validate(json.loads(CONSTANTS_PATH.read_text()))
    vidur = consts.host
    if "--write" in sys.argv:
        consts.hosts["vllm-v1"] = fit_vllm_v1_host(consts)
        tmp = CONSTANTS_PATH.with_suffix(".tmp")
        tmp.write_text(consts.model_dump_json(indent=1) + "\n")
        tmp.replace(CONSTANTS_PATH)
        print(f"wrote hosts['vllm-v1'] = {consts.hosts['vllm-v1']} to {CONSTANTS_PATH}")
    fits = {g: fit_testbed(g) for g in ("h200", "rtx-pro-6000")}
    print("fitted on:", ", ".join(SOURCES.values()))
    for g, (lam, h0, h1) in fits.items():
        print(f"  {g}: λ = {lam:.1f} µs/layer, h0 = {h0:.0f} µs, h1 = {h1:.2f} µs/seq")
    print("held-out Qwen3-8B (EB constants), |error| median / worst over the 14 shapes:")
    for model, gpu in HELD_OUT:
        lam, h0, h1 = fits[gpu]
        vid0, vid1 = vidur.step_us, vidur.per_seq_us
        cases: dict[str, tuple[float, float, float]] = {
            "vidur host + eager floor": (lam, vid0, vid1),
            "vllm-v1 host + eager floor (own testbed)": (lam, h0, h1),
            "vllm-v1 host + eager floor (H200 testbed's)": fits[DEFAULT_TESTBED],
        }
        e = errors(model, gpu, lambda kd, k, s, L, a=vid0, b=vid1: k + (a + b * s) * 1e-6)
        report(model, gpu, "vidur host, no floor (before)", e)
        for name, (a, b, c) in cases.items():
            e = errors(model, gpu, lambda kd, k, s, L, a=a, b=b, c=c: eager_step(k, s, L, a, b, c))
            report(model, gpu, name, e)


def report(model: str, gpu: str, name: str, e: list[float]) -> None:
    worst = shapes(model, gpu)[int(np.argmax(e))]
    print(f"  {model}/{gpu} · {name}: {100 * statistics.median(e):.1f} % / "
          f"{100 * max(e):.1f} % (worst: {worst[0]} {worst[1]})")  # fmt: skip


if __name__ == "__main__":
    main()
