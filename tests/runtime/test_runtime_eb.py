"""EB and EB⁺ on the real engine: the same schedulers as in the simulator, with step costs
from the machine's calibrated profile. Greedy outputs must not depend on the batching policy
(EB's prefill-only and decode-only steps compute the same tokens as MB's mixed ones)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime.helpers import prompts, run, tiny_engine, write_cpu_profile
from tidal.batching.eb import ExclusiveBatching
from tidal.batching.ebplus import EBPlus
from tidal.core.errors import ConfigError
from tidal.runtime.config import RuntimeConfig, profile_step_costs

pytest.importorskip("torch")


@pytest.fixture
def profile(tmp_path):
    """A plausible CPU profile: 2 ms per step, 20 µs per token, 5 µs per decode request."""
    return write_cpu_profile(tmp_path / "cpu.json")


def test_profile_costs_are_the_papers_linear_fit_of_the_profile(profile):
    c = profile_step_costs(RuntimeConfig(batching="eb", profile=profile))
    assert c is not None
    # the profile is linear in tokens here: prefill α_p = 2 ms, β_p = 20 µs per token (the
    # hinges and attention terms are 0); decode β_d = 20 + 5 µs + 512 ctx × 0.01 µs
    assert c.alpha_p == pytest.approx(2e-3, rel=1e-6)
    assert c.beta_p == pytest.approx(20e-6, rel=1e-6)
    assert c.alpha_d == pytest.approx(2e-3, rel=1e-6)
    assert c.beta_d == pytest.approx(25e-6 + 512e-8, rel=1e-6)
    assert profile_step_costs(RuntimeConfig(batching="mb")) is None


@pytest.mark.parametrize("batching", ["eb", "ebplus"])
def test_greedy_outputs_do_not_depend_on_the_batching_policy(profile, batching):
    ps = prompts(10, seed=21)
    base, _ = run(tiny_engine(), ps, 12)
    rt = tiny_engine(batching=batching, profile=profile, max_seqs=4, token_budget=64)
    cls = EBPlus if batching == "ebplus" else ExclusiveBatching
    assert isinstance(rt.scheduler.policy, cls)
    out, _ = run(rt, ps, 12)
    assert out == base
    assert rt.kv.num_free_blocks == rt.kv.num_blocks


def test_eb_without_a_profile_says_how_to_get_one():
    with pytest.raises(ConfigError, match=r"profile: .*tidal calibrate"):
        tiny_engine(batching="eb")
    with pytest.raises(ConfigError, match="does not exist"):
        tiny_engine(batching="ebplus", profile="/nonexistent/cpu.json")


def test_simulator_and_real_engine_give_eb_the_same_costs(profile):
    """``tidal fidelity --batching eb`` compares like with like: the simulator's EB view of a
    profile (its perf model) equals the real engine's (no interference term on either)."""
    from tidal.hardware.calibration import build_perf_model
    from tidal.hardware.gpus import get_gpu
    from tidal.hardware.interference import step_costs
    from tidal.hardware.models import get_model

    model = get_model("tiny-llama")
    perf = build_perf_model(f"profile:{profile}", model, get_gpu("h100"), 1)
    sim = step_costs(model, get_gpu("h100"), 1, perf)
    real = profile_step_costs(RuntimeConfig(batching="ebplus", profile=profile))
    assert real is not None
    assert (sim.alpha_p, sim.beta_p, sim.alpha_d, sim.beta_d) == (
        real.alpha_p,
        real.beta_p,
        real.alpha_d,
        real.beta_d,
    )
    assert sim.interference == real.interference
    assert sim.interference(0.5) == 0.0


def test_fidelity_runs_eb_on_both_backends(profile, tmp_path):
    from tidal.cli.fidelity import run_fidelity

    res = run_fidelity(
        Path(profile),
        tmp_path,
        model="tiny-llama",
        workload={
            "num_requests": 8,
            "rate": 50.0,
            "prompt_len": 24,
            "output_len": 6,
            "length_dist": "uniform",
        },
        token_budget=64,
        max_seqs=8,
        num_kv_blocks=256,
        block_size=16,
        threads=1,
        repeats=1,
        seed=0,
        clock="cpu",
        batching="eb",
    )
    assert res["runtime"]["batching"] == "eb"
    assert res["sim_metrics"]["eb_time_share"] == 1.0  # the simulator ran EB too
    assert res["real_metrics"][0]["eb_time_share"] == 1.0
    for m in (res["sim_metrics"], *res["real_metrics"]):
        assert m["num_completed"] == m["num_requests"] == 8
    assert res["ttft_median_rel_error"] >= 0
