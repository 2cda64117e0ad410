"""EB and EB⁺ on the real engine: the same schedulers as in the simulator, with step costs
from the machine's calibrated profile. Greedy outputs must not depend on the batching policy
(EB's prefill-only and decode-only steps compute the same tokens as MB's mixed ones)."""

from __future__ import annotations

import json

import pytest

from tests.runtime.helpers import prompts, run, tiny_engine
from tidal.core.errors import ConfigError
from tidal.engine.eb import ExclusiveBatchingScheduler
from tidal.engine.ebplus import EBPlusScheduler
from tidal.hardware.profiled import DEFAULT_KNOTS, FEATURES, ProfiledPerfModel
from tidal.runtime.config import RuntimeConfig, profile_step_costs

pytest.importorskip("torch")


@pytest.fixture
def profile(tmp_path):
    """A plausible CPU profile: 2 ms per step, 20 µs per token, 5 µs per decode request."""
    coef = dict.fromkeys(FEATURES, 0.0)
    coef.update({"const": 2e-3, "tokens": 20e-6, "decodes": 5e-6})
    coef.update({f"hinge_{k}": 0.0 for k in DEFAULT_KNOTS})
    coef["decode_ctx"] = 1e-8
    path = tmp_path / "cpu.json"
    prof = ProfiledPerfModel(coef, DEFAULT_KNOTS, info={"model": "tiny-llama"})
    path.write_text(json.dumps(prof.to_json()))
    return str(path)


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
    cls = EBPlusScheduler if batching == "ebplus" else ExclusiveBatchingScheduler
    assert isinstance(rt.scheduler, cls)
    out, _ = run(rt, ps, 12)
    assert out == base
    assert rt.kv.num_free_blocks == rt.kv.num_blocks


def test_eb_without_a_profile_says_how_to_get_one():
    with pytest.raises(ConfigError, match=r"profile: .*tidal calibrate"):
        tiny_engine(batching="eb")
    with pytest.raises(ConfigError, match="does not exist"):
        tiny_engine(batching="ebplus", profile="/nonexistent/cpu.json")
