"""Mixed-step interference (ebplus.md §1.2): algebra from the paper's fits, the bandwidth
derivation for other GPUs, and the perf-model wrapper's exactness contract."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tidal.hardware.calibration import build_perf_model
from tidal.hardware.gpus import GPUS, get_gpu
from tidal.hardware.interference import (
    MB_COST_FITS,
    STEP_INTERFERENCE,
    InterferencePerfModel,
    Quadratic,
    derived_interference,
    paper_interference,
    step_costs,
)
from tidal.hardware.models import get_model

QWEN = get_model("qwen3-8b")


def test_paper_interference_is_the_fit_minus_the_exclusive_marginal():
    # ebplus.md §1.2 "my algebra": H200 ΔI ≈ 0.09e-6 + 30.9e-6 r + 14.8e-6 r² (19.2 µs at 0.5),
    # RTX ΔI ≈ 12.85e-6 + 143.1e-6 r + 9.9e-6 r² (86.9 µs at 0.5)
    h = paper_interference("qwen3-8b", "h200")
    r = paper_interference("qwen3-8b", "rtx-pro-6000")
    assert h is not None
    assert r is not None
    assert (h.c0, h.c1, h.c2) == pytest.approx((0.087e-6, 30.918e-6, 14.78e-6), abs=5e-9)
    assert (r.c0, r.c1, r.c2) == pytest.approx((12.855e-6, 143.095e-6, 9.899e-6), abs=5e-9)
    assert h(0.5) == pytest.approx(19.2e-6, abs=0.1e-6)
    assert r(0.5) == pytest.approx(86.9e-6, abs=0.1e-6)
    assert paper_interference("qwen3-8b", "h100") is None


def test_wrapper_charges_mixed_steps_only():
    base = build_perf_model("linear", QWEN, get_gpu("h200"))
    q = Quadratic(1e-6, 2e-5, 3e-6)
    perf = InterferencePerfModel(base, q)
    # exclusive steps: exactly the base model
    assert perf.step_ns(100, 100 * 700) == base.step_ns(100, 100 * 700)
    assert perf.step_ns(0, 0, 4096, 4096 * 4096, 4096, 1) == base.step_ns(
        0, 0, 4096, 4096 * 4096, 4096, 1
    )
    # mixed: + ΔI(r)·(n_p + n_d), r = n_d / (n_p + n_d)
    shape = (300, 300 * 600, 900, 900 * 900, 900, 2)
    extra = q(300 / 1200) * 1200
    assert perf.step_seconds(*shape) == pytest.approx(base.step_seconds(*shape) + extra)
    assert perf.step_ns(*shape) > base.step_ns(*shape)


@pytest.mark.parametrize("kind", ["linear", "roofline"])
def test_decode_runs_stay_bit_identical(kind):
    perf = build_perf_model(kind, QWEN, get_gpu("rtx-pro-6000"), interference=True)
    assert isinstance(perf, InterferencePerfModel)
    run = perf.decode_run_ns(37, 37 * 811, 300)
    one_by_one = [perf.step_ns(37, 37 * 811 + 37 * i) for i in range(300)]
    np.testing.assert_array_equal(run, np.asarray(one_by_one, dtype=np.int64))


def test_derived_interference_reproduces_the_anchors():
    for name in ("h200", "rtx-pro-6000"):
        gpu = get_gpu(f"{name}@{GPUS[name].mem_bw_tbs}")  # a what-if copy: not in the table
        q = derived_interference(QWEN, gpu)
        anchor = STEP_INTERFERENCE[("qwen3-8b", name, 1)]
        for r in (0.0, 0.3, 0.5, 0.9, 1.0):
            assert q(r) == pytest.approx(anchor(r), rel=1e-9)


def test_derived_interference_falls_as_bandwidth_grows():
    bws = [0.864, 1.2, 1.792, 2.5, 3.35, 4.8, 6.0, 8.0]
    for r in (0.1, 0.5, 0.9):
        vals = [derived_interference(QWEN, get_gpu(f"h200@{bw}"))(r) for bw in bws]
        assert all(a > b for a, b in itertools.pairwise(vals)), (r, vals)


def test_every_catalog_gpu_gets_a_positive_default():
    for name, gpu in GPUS.items():
        for model in ("qwen3-8b", "llama-3.1-8b", "qwen3-30b-a3b"):
            q = derived_interference(get_model(model), gpu)
            assert all(q(r) > 0 for r in (0.05, 0.5, 0.95)), (name, model)


def test_step_costs_expose_the_measured_constants_and_fits():
    perf = build_perf_model("linear", QWEN, get_gpu("h200"), interference=True)
    c = step_costs(QWEN, get_gpu("h200"), 1, perf)
    measured = (1.2786e-3, 24.853e-6, 8.9212e-3, 45.865e-6)
    assert (c.alpha_p, c.beta_p, c.alpha_d, c.beta_d) == measured
    fit = MB_COST_FITS[("qwen3-8b", "h200", 1)]
    assert c.beta_mb_e(0.5, paper_fit=True) == fit(0.5)
    assert c.beta_mb_e(0.5) == pytest.approx(c.beta_eb_w(0.5) + c.interference(0.5))
    # a roofline deployment gets the constants the paper's calibration recipe would measure
    roof = build_perf_model("auto", get_model("llama-3.1-8b"), get_gpu("l40s"))
    c2 = step_costs(get_model("llama-3.1-8b"), get_gpu("l40s"), 1, roof)
    assert c2.alpha_d > 0
    assert c2.beta_p > 0
    assert c2.mb_cost_fit is None
    assert c2.beta_mb_e(0.5, paper_fit=True) == c2.beta_mb_e(0.5)
