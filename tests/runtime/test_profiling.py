"""Serving points of ``tidal calibrate``: rates from Little's law, workload-matched lengths and
chunking, and the CLI flags that set them."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from tidal.cli import TidalError
from tidal.cli.calibrate import _fit, serving_options
from tidal.hardware.perf import StepShape
from tidal.hardware.profiled import ProfiledPerfModel
from tidal.runtime.driver import StepRecord
from tidal.runtime.profiling import (
    SERVING_OUTPUT,
    SERVING_PROMPT,
    StepSample,
    _point_requests,
    serving_grid,
    speed_ratio,
)

COEF = {
    "const": 2e-3,
    "tokens": 40e-6,
    "decodes": 15e-6,
    "prefill_chunks": 0.0,
    "prefill_attn": 0.0,
    "prefill_ctx": 0.0,
    "hinge_32": 0.0,
    "hinge_256": 0.0,
    "decode_ctx": 0.0,
}
PRELIM = ProfiledPerfModel(COEF)


def _step(c: int, pf: int) -> float:
    """The model above by hand: no attention or context terms."""
    return 2e-3 + 40e-6 * (c + pf) + 15e-6 * c


def test_default_points_keep_the_old_lengths_and_satisfy_littles_law():
    points = serving_grid(PRELIM, concurrencies=(2, 8))
    assert [p.batch for p in points] == [2, 8]
    for p in points:
        assert p.prompt_range == SERVING_PROMPT
        assert p.output_range == SERVING_OUTPUT
        assert p.chunk == 0  # the profiling engine's own budget
        # fixed point: λ = c / (E[out]·t) with t the step at c decodes and λ·t·E[prompt] prefill
        o_mean, p_mean = sum(SERVING_OUTPUT) / 2, sum(SERVING_PROMPT) / 2
        t = p.batch / (o_mean * p.rate)
        pf = int(p.rate * t * p_mean)
        assert t == pytest.approx(_step(p.batch, pf), rel=0.02)


def test_matched_points_cap_the_prefill_at_the_budget_and_carry_lengths():
    points = serving_grid(
        PRELIM,
        concurrencies=(2, 8, 300),
        prompt_range=(384, 1152),
        output_range=(32, 96),
        token_budget=256,
    )
    assert [p.batch for p in points] == [2, 8]  # 300 ≥ budget: cannot run, skipped
    for p in points:
        assert p.chunk == 256
        assert p.prompt_range == (384, 1152)
        assert p.output_range == (32, 96)
        t = p.batch / (64 * p.rate)
        # prefill per step is at most the budget's room beside the decodes
        assert t <= _step(p.batch, 256 - p.batch) * 1.0001
    reqs = _point_requests(points[1], 8, np.random.default_rng(0))
    assert len(reqs) == points[1].num_requests
    assert all(384 <= r.prompt_len <= 1152 and 32 <= r.max_output_len <= 96 for r in reqs)
    assert [r.arrival_ns for r in reqs] == sorted(r.arrival_ns for r in reqs)


def test_serving_options_use_the_uniform_length_distribution():
    kw = serving_options(768, 64, 256, "2, 8,32")
    assert kw == {
        "prompt_range": (384, 1152),
        "output_range": (32, 96),
        "token_budget": 256,
        "concurrencies": (2, 8, 32),
    }
    assert "prompt_range" not in serving_options(None, None, 0, "4")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        ((0, None, 0, "2"), "serving-prompt-len"),
        ((None, 0, 0, "2"), "serving-output-len"),
        ((None, None, -1, "2"), "serving-token-budget"),
        ((None, None, 0, "2,x"), "serving-concurrency"),
        ((None, None, 0, "0"), "serving-concurrency"),
    ],
)
def test_serving_options_name_the_bad_flag(args, flag):
    with pytest.raises(TidalError, match=flag):
        serving_options(*args)


def test_speed_ratio_is_total_measured_over_total_predicted():
    shapes = [StepShape(4, 400), StepShape(1, 30, 200, 200 * 200, 200, 1), StepShape(8, 0)]
    predicted = [PRELIM.step_ns(*s) for s in shapes]
    periods = [2 * predicted[0], predicted[1], 3 * predicted[2]]
    steps = [StepRecord(0, p, s) for p, s in zip(periods, shapes, strict=True)]
    assert speed_ratio(steps, PRELIM) == pytest.approx(sum(periods) / sum(predicted))
    # the profile scaled by the ratio predicts the replay's total time
    ratio = speed_ratio(steps, PRELIM)
    scaled = ProfiledPerfModel({k: v * ratio for k, v in PRELIM.coef.items()}, PRELIM.knots)
    assert sum(scaled.step_seconds(*s) for s in shapes) * 1e9 == pytest.approx(sum(periods))


def test_speed_ratio_counts_the_idle_penalty_of_steps_after_a_pause():
    coef = {**COEF, "idle": 0.05}  # 50 ms per idle second
    model = ProfiledPerfModel(coef)
    s = StepShape(0, 0, 16, 256, 16, 1)
    base = model.step_ns(*s)
    steps = [StepRecord(0, base + 5_000_000, s, idle_ns=100_000_000)]  # 0.1 s idle: +5 ms
    assert speed_ratio(steps, model) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no steps"):
        speed_ratio([], model)


def _samples(model: ProfiledPerfModel, point: str, rng: np.random.Generator, n: int) -> list:
    out = []
    for _ in range(n):
        nd, pt = int(rng.integers(0, 40)), int(rng.integers(0, 300))
        s = int(rng.integers(0, 600)) if pt else 0
        shape = StepShape(
            nd, nd * int(rng.integers(16, 500)), pt, pt * (2 * s + pt), s + pt, int(pt > 0)
        )
        if nd + pt == 0:
            continue
        out.append(StepSample(shape, model.step_seconds(*shape), point))
    return out


def test_fit_on_serving_ignores_the_grid_steps():
    rng = np.random.default_rng(3)
    truth = ProfiledPerfModel({**COEF, "prefill_ctx": 2e-6, "decode_ctx": 0.5e-6})
    other = ProfiledPerfModel({**COEF, "const": 9e-3, "tokens": 90e-6})
    samples = _samples(truth, "serving:b8", rng, 300) + _samples(other, "decode:b1", rng, 300)
    coef, rel = _fit(samples, "serving")
    fitted = ProfiledPerfModel(coef)
    serving = np.array([s.point.startswith("serving") for s in samples])
    assert np.abs(rel[serving]).max() < 1e-6  # the serving steps are fitted exactly
    assert np.median(np.abs(rel[~serving])) > 0.1  # the grid's (another speed) are not
    shape = StepShape(8, 2000, 64, 64 * 64, 64, 1)
    assert fitted.step_seconds(*shape) == pytest.approx(truth.step_seconds(*shape), rel=1e-6)
    coef_all, _ = _fit(samples, "all")
    assert ProfiledPerfModel(coef_all).step_seconds(*shape) != pytest.approx(
        truth.step_seconds(*shape), rel=1e-3
    )
    with pytest.raises(TidalError, match="fit-on"):
        _fit(samples[300:], "serving")
