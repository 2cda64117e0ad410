"""INFERCEPT's measured A100 profiles (hardware/calibration.py): the constants reproduce the
published iteration times, swap budgets and the derived floor, computed here by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tidal.augment.waste import IterationProfile
from tidal.hardware.calibration import (
    INFERCEPT_GEMM_EFFICIENCY,
    INFERCEPT_PROFILES,
    build_perf_model,
    measured_host_link,
)
from tidal.hardware.corrected import CorrectedRooflinePerfModel
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.hardware.perf import LinearPerfModel

A100 = get_gpu("a100-80gb")
GPTJ = get_model("gpt-j-6b")
VICUNA = get_model("vicuna-13b")


def _model(m, tp):
    return build_perf_model("linear", m, A100, tp)  # the paper's profile (auto reads the tables)


@pytest.mark.parametrize(
    ("m", "tp", "ms_at_384"),
    [
        (GPTJ, 1, 0.0463 * 384 + 10),  # 27.7792 ms (augserve.md §2.4)
        (VICUNA, 2, 0.0279 * 384 + 15.4),  # 26.1136 ms
    ],
)
def test_auto_uses_infercept_profile_and_reproduces_its_saturated_iteration(m, tp, ms_at_384):
    p = _model(m, tp)
    assert isinstance(p, LinearPerfModel)
    assert ms_at_384 == pytest.approx({1: 27.7792, 2: 26.1136}[tp])
    # a 384-token chunk of new tokens (no decode context): It(384) = α·384 + γ
    assert p.step_ns(0, 0, 384, 384 * 384, 384, 1) == pytest.approx(ms_at_384 * 1e6, abs=1)
    # ... and a step of 300 decodes with no context plus an 84-token chunk: the same tokens
    assert p.step_ns(300, 0, 84, 84 * 84, 84, 1) == pytest.approx(ms_at_384 * 1e6, abs=1)
    # other deployments (no measured profile either) get the corrected roofline in the order
    # before issue 28 (``auto`` now reads the A100's engine tables: test_auto_perf.py)
    other = build_perf_model("auto-vidur", m, A100, 4 if tp == 2 else 2)
    assert isinstance(other, CorrectedRooflinePerfModel)


def test_iteration_profile_fitted_to_the_calibrated_model_is_infercepts_own():
    # the waste formulas' α, γ (scheduler_v2.py discard_waste) come back exactly
    prof = IterationProfile.from_perf(_model(GPTJ, 1), 384)
    assert prof.alpha_s == pytest.approx(0.0463e-3, rel=1e-9)
    assert prof.gamma_s == pytest.approx(10e-3, rel=1e-9)
    assert prof.saturated_s == pytest.approx(27.7792e-3, rel=1e-9)
    # the 13B line is floored at 768 tokens, so a refit would not return it: a run on the
    # measured deployment hands the scheduler INFERCEPT's own constants instead
    from tidal.sim.augment import measured_iteration_profile
    from tidal.sim.config import load_config

    cfg = load_config(
        {
            "model": "vicuna-13b",
            "gpu": "a100-80gb",
            "tp": 2,
            "workload": {"augmented": "infercept-mix", "num_requests": 1, "rate": 1.0},
        }
    )
    prof13 = measured_iteration_profile(cfg)
    assert prof13 is not None
    assert (prof13.alpha_s, prof13.gamma_s, prof13.saturation_tokens) == (0.0279e-3, 15.4e-3, 384)
    assert prof13.saturated_s == pytest.approx(26.1136e-3, rel=1e-12)
    assert measured_iteration_profile(cfg.model_copy(update={"perf_model": "roofline"})) is None


def test_decode_attention_reads_kv_on_top_of_the_profile():
    # κ = 458,752 B / (0.8 · 2.039 TB/s) = 0.28124 µs per context token; 100 decodes at a
    # 1,000-token context: 10 + 0.0463·100 + 0.28124e-3·100,000 ms = 42.754 ms
    p = _model(GPTJ, 1)
    kappa_ms = 458_752 / (0.8 * 2.039e12) * 1e3
    assert kappa_ms == pytest.approx(0.28124e-3, rel=1e-4)
    assert p.step_ns(100, 100_000) / 1e6 == pytest.approx(42.754, abs=1e-3)


def test_gemm_efficiency_implied_by_the_6b_slope():
    # GPT-J linear FLOPs per token 2·28·(4·4096² + 2·4096·16384) = 11.2743e9;
    # 11.2743e9 / (46.3 µs · 312 TFLOP/s) = 0.7805
    flops = 2 * 28 * (4 * 4096**2 + 2 * 4096 * 16384)
    assert GPTJ.linear_flops_per_token == flops
    assert pytest.approx(flops / (46.3e-6 * 312e12), rel=1e-12) == INFERCEPT_GEMM_EFFICIENCY
    assert pytest.approx(0.7805, abs=1e-4) == INFERCEPT_GEMM_EFFICIENCY


def test_13b_steps_beyond_the_profiled_range_cannot_outrun_the_gemm_floor():
    p = _model(VICUNA, 2)
    # Vicuna-13B linear FLOPs per token 2·40·(4·5120² + 3·5120·13824) = 25.3755e9; floor per
    # token on two A100s = 25.3755e9 / (0.7805 · 2 · 312e12) = 52.105 µs
    flops = 2 * 40 * (4 * 5120**2 + 3 * 5120 * 13824)
    floor_us = flops / (INFERCEPT_GEMM_EFFICIENCY * 2 * 312e12) * 1e6
    assert floor_us == pytest.approx(52.105, abs=1e-3)
    # 2048-token prefill: the line says 15.4 + 0.0279·2048 = 72.54 ms, the floor 106.71 ms
    assert p.step_ns(0, 0, 2048, 2048**2, 2048, 1) / 1e6 == pytest.approx(2048 * floor_us / 1e3)
    assert 2048 * floor_us / 1e3 == pytest.approx(106.71, abs=0.01)
    # the floor crosses the line at 15.4 / (0.052105 − 0.0279) = 636 tokens
    cross = 15.4 / (floor_us / 1e3 - 0.0279)
    assert cross == pytest.approx(636.3, abs=0.5)
    assert p.step_ns(0, 0, 600, 0, 600, 1) / 1e6 == pytest.approx(15.4 + 0.0279 * 600)
    # the 6B floor is the slope itself, so it never binds: an 8192-token step is on the line
    assert _model(GPTJ, 1).step_ns(0, 0, 8192, 0, 8192, 1) / 1e6 == pytest.approx(
        10 + 0.0463 * 8192
    )


def test_floored_decode_runs_stay_bit_identical():
    # 700 decodes: the 13B floor (700 · 52.1 µs = 36.5 ms) binds at short contexts and the
    # KV term takes over as the contexts grow — np.maximum over the run must match max().
    p = _model(VICUNA, 2)
    assert p.decode_affine(700) is None
    assert p.decode_affine(64) is not None
    run = p.decode_run_ns(700, 0, 300)
    steps = [p.step_ns(700, 700 * i) for i in range(300)]
    assert run.tolist() == steps
    floor_ns = round(700 * p.floor_s_per_token * 1e9)
    assert steps[0] == floor_ns
    assert steps[-1] > floor_ns
    assert np.all(np.diff(run) >= 0)


@pytest.mark.parametrize(
    ("m", "tp", "tokens_per_iter", "gbs"),
    [
        # (1 + 2·0.00462)·384 + 2·108.99 = 605.528 tokens per 27.7792 ms; half per direction
        # = 10,898.9 tokens/s × 458,752 B = 5.000 GB/s
        (GPTJ, 1, 605.528, 5.000),
        # (1 − 2·0.3297119141)·384 + 2·93.994140625 = 318.770 per 26.1136 ms → 6,103.5
        # tokens/s × 409,600 B per GPU = 2.500 GB/s
        (VICUNA, 2, 318.770, 2.500),
    ],
)
def test_measured_host_link_is_half_infercepts_summed_swap_budget(m, tp, tokens_per_iter, gbs):
    prof = INFERCEPT_PROFILES[(m.name, "a100-80gb", tp)]
    assert prof.swap_tokens_per_iteration == pytest.approx(tokens_per_iter, abs=1e-3)
    link = measured_host_link(m, A100, tp)
    assert link is not None
    assert link[0] / 1e9 == pytest.approx(gbs, abs=1e-3)
    assert measured_host_link(m, A100, 2 * tp) is None
    assert not math.isclose(link[0], 0.8 * A100.pcie_gbs * 1e9)


def test_eb_view_of_the_profile_prices_decodes_at_a_512_token_context():
    # β_d(512) = α + κ·512 = 46.3 µs + 0.28124 µs · 512 = 190.29 µs (EB's StepCosts convention)
    from tidal.hardware.interference import step_costs

    c = step_costs(GPTJ, A100, 1, _model(GPTJ, 1))
    assert (c.alpha_p, c.beta_p, c.alpha_d) == (10e-3, 46.3e-6, 10e-3)
    assert c.beta_d * 1e6 == pytest.approx(46.3 + 0.28124 * 512, abs=0.01)
