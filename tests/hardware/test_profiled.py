"""The profiled step-time model: fitting, exactness of vectorised runs, files and configs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import make_scheduler, simulate
from tests.sim.test_fast_forward import workloads
from tidal.core.errors import ConfigError
from tidal.hardware.calibration import build_perf_model
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.hardware.perf import StepShape
from tidal.hardware.profiled import ProfiledPerfModel, fit_profile

COEF = {
    "const": 2e-3,
    "tokens": 40e-6,
    "decodes": 15e-6,
    "prefill_chunks": 80e-6,
    "prefill_attn": 2e-9,
    "prefill_ctx": 1e-6,
    "hinge_32": -10e-6,
    "hinge_256": -5e-6,
    "decode_ctx": 0.7e-6,
    "decode_batch": 0.6e-3,
    "idle": 0.2,
    "idle_after_20ms": -0.1,
    "idle_after_100ms": -0.05,
}


def _shapes(n: int, seed: int = 0) -> list[StepShape]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        nd = int(rng.integers(0, 64))
        ctx = nd * int(rng.integers(1, 600))
        chunks = [
            (int(rng.integers(1, 300)), int(rng.integers(0, 400)))
            for _ in range(rng.integers(0, 3))
        ]
        if nd == 0 and not chunks:
            nd, ctx = 1, 10
        pt = sum(c for c, _ in chunks)
        attn = sum(c * (2 * s + c) for c, s in chunks)
        pctx = sum(c + s for c, s in chunks)
        out.append(StepShape(nd, ctx, pt, attn, pctx, len(chunks)))
    return out


def test_step_time_is_the_documented_formula():
    m = ProfiledPerfModel(COEF)
    # 10 decodes over 5000 context tokens + one 100-token chunk after 50 cached: T = 110
    t = m.step_seconds(10, 5000, 100, 100 * (2 * 50 + 100), 150, 1)
    expected = (
        2e-3
        + 40e-6 * 110
        - 10e-6 * (110 - 32)
        + 15e-6 * 10
        + 80e-6
        + 2e-9 * 20000
        + 1e-6 * 150
        + 0.7e-6 * 5000
        + 0.6e-3  # the step has decodes: the decode kernel's fixed cost
    )
    assert t == pytest.approx(expected, rel=1e-12)
    assert m.step_seconds(0, 0, 0, 0, 0, 0) == 0.0
    # a prefill-only step pays no decode_batch; profiles written before it load with 0
    only = m.step_seconds(0, 0, 100, 100 * 100, 100, 1)
    assert only == pytest.approx(2e-3 + 40e-6 * 100 - 10e-6 * 68 + 80e-6 + 2e-5 + 1e-4)
    old = ProfiledPerfModel({k: v for k, v in COEF.items() if k != "decode_batch"})
    assert old.coef["decode_batch"] == 0.0
    assert m.step_seconds(3, 90, 0, 0, 0, 0) - old.step_seconds(3, 90, 0, 0, 0, 0) == (
        pytest.approx(0.6e-3)
    )


def test_idle_penalty_is_concave_piecewise_linear_in_the_idle_time():
    m = ProfiledPerfModel(COEF)
    assert m.idle_penalty_ns(0) == 0
    assert m.idle_penalty_seconds(0.01) == pytest.approx(0.2 * 0.01)
    assert m.idle_penalty_seconds(0.05) == pytest.approx(0.2 * 0.05 - 0.1 * 0.03)
    assert m.idle_penalty_seconds(0.3) == pytest.approx(0.2 * 0.3 - 0.1 * 0.28 - 0.05 * 0.2)
    assert m.idle_penalty_ns(50_000_000) == round((0.2 * 0.05 - 0.1 * 0.03) * 1e9)
    # profiles written before the idle penalty existed load with none
    old = {k: v for k, v in COEF.items() if not k.startswith("idle")}
    assert ProfiledPerfModel(old).idle_penalty_ns(10**9) == 0


def test_fit_recovers_the_coefficients_of_noise_free_samples():
    truth = ProfiledPerfModel(COEF)
    shapes = _shapes(400)
    rng = np.random.default_rng(9)
    idle = np.where(rng.random(400) < 0.3, rng.uniform(0, 0.4, 400), 0.0)
    secs = [
        truth.step_seconds(*s) + truth.idle_penalty_seconds(g)
        for s, g in zip(shapes, idle, strict=True)
    ]
    coef, rel = fit_profile(shapes, secs, idle_s=idle)
    for name, value in COEF.items():
        assert coef[name] == pytest.approx(value, rel=1e-6, abs=1e-12), name
    assert np.abs(rel).max() < 1e-9


def test_fit_keeps_signs_physical_and_estimates_the_mean_under_noise():
    no_idle = {k: v for k, v in COEF.items() if not k.startswith("idle")}
    truth = ProfiledPerfModel({**no_idle, "hinge_32": 0.0, "hinge_256": 0.0})
    rng = np.random.default_rng(3)
    shapes = _shapes(3000, seed=4)
    mean = np.array([truth.step_seconds(*s) for s in shapes])
    noisy = mean * rng.gamma(25.0, 1 / 25.0, len(mean))  # multiplicative noise, mean 1, CV 20%
    coef, _ = fit_profile(shapes, noisy)
    assert all(coef[k] >= 0 for k in no_idle if not k.startswith("hinge"))
    assert all(coef[k] <= 0 for k in no_idle if k.startswith("hinge"))
    assert coef["idle"] == 0.0  # no idle steps in the samples: no penalty
    fitted = ProfiledPerfModel(coef)
    pred = np.array([fitted.step_seconds(*s) for s in shapes])
    # the fit tracks the conditional mean: total predicted time within 2% of the true mean
    assert pred.sum() == pytest.approx(mean.sum(), rel=0.02)


@given(
    nd=st.integers(1, 300),
    ctx_per=st.integers(1, 4000),
    steps=st.integers(1, 200),
)
def test_vectorised_decode_runs_are_bit_identical_to_single_steps(nd, ctx_per, steps):
    m = ProfiledPerfModel(COEF)
    ctx0 = nd * ctx_per
    run = m.decode_run_ns(nd, ctx0, steps)
    single = [m.step_ns(nd, ctx0 + nd * i) for i in range(steps)]
    assert run.tolist() == single


@given(rs=workloads(), blocks=st.integers(60, 400), max_seqs=st.integers(1, 32))
def test_simulator_fast_forward_stays_exact_with_a_profiled_model(rs, blocks, max_seqs):
    longest = int((rs.prompt_len + rs.output_len).max())
    blocks = max(blocks, -(-longest // 16) + 2)
    perf = ProfiledPerfModel(COEF)
    recs = []
    for ff in (False, True):
        s = make_scheduler(blocks, 16, 256, max_seqs, watermark=0.0)
        rec, _, _ = simulate(rs, s, perf, fast_forward=ff)
        recs.append(rec)
    for col in ("first_scheduled_ns", "first_token_ns", "finish_ns", "num_preemptions"):
        np.testing.assert_array_equal(getattr(recs[0], col), getattr(recs[1], col), err_msg=col)


def test_profile_files_load_through_the_perf_model_registry(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(ProfiledPerfModel(COEF, info={"model": "tiny-llama"}).to_json()))
    m = build_perf_model(f"profile:{path}", get_model("tiny-llama"), get_gpu("h100"))
    assert isinstance(m, ProfiledPerfModel)
    assert m.coef == COEF
    assert m.idle_penalty_ns(100_000_000) > 0
    assert m.info["model"] == "tiny-llama"
    with pytest.raises(ConfigError, match="does not exist"):
        build_perf_model(
            f"profile:{tmp_path / 'nope.json'}", get_model("tiny-llama"), get_gpu("h100")
        )
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ConfigError, match="not a valid profile"):
        ProfiledPerfModel.load(bad)


def test_simulation_config_takes_a_profile_and_a_kv_block_count(tmp_path):
    from tidal.sim.config import load_config
    from tidal.sim.run import run_simulation

    path = tmp_path / "p.json"
    path.write_text(json.dumps(ProfiledPerfModel(COEF).to_json()))
    wl = {"num_requests": 20, "rate": 50.0, "prompt_len": 32, "output_len": 8}
    cfg = load_config(
        {
            "model": "tiny-llama",
            "perf_model": f"profile:{path}",
            "memory": {"num_blocks": 64},
            "workload": wl,
        }
    )
    res = run_simulation(cfg)
    assert res.metrics["perf_model"] == "profile"
    assert res.metrics["kv_capacity_tokens"] == 64 * 16
    assert res.metrics["num_completed"] == 20
    with pytest.raises(ConfigError, match="perf_model"):
        load_config({"perf_model": f"profile:{tmp_path / 'missing.json'}", "workload": wl})


def test_the_first_step_after_an_idle_spell_carries_the_penalty_in_the_simulator():
    from tests.conftest import request_set

    m = ProfiledPerfModel(COEF)
    # one request at t = 0 (no idle time before it), one at t = 1 s (idle since the first ended)
    rs = request_set([0.0, 1.0], [50, 50], [3, 3])
    for ff in (False, True):
        rec, _, _ = simulate(rs, make_scheduler(), m, fast_forward=ff)
        prefill = m.step_ns(0, 0, 50, 50 * 50, 50, 1)
        decode = [m.step_ns(1, 51 + i) for i in range(2)]
        assert rec.first_token_ns[0] == prefill
        end0 = prefill + sum(decode)
        assert rec.finish_ns[0] == end0
        idle = 1_000_000_000 - end0
        assert rec.first_token_ns[1] == 1_000_000_000 + prefill + m.idle_penalty_ns(idle)
