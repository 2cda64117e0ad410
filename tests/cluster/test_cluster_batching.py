"""Cluster engines run the configured batching policy (``scheduler.batching``): EB and EB⁺
engines get the step costs of their own model, and EB⁺ at a load where MB wins stays in MB
and serves every request exactly as MB does (ebplus.md §3.3: it only leaves MB when the
crossover says EB wins)."""

from __future__ import annotations

import numpy as np

from tests.conftest import needs_traces
from tidal.batching.eb import ExclusiveBatching
from tidal.batching.ebplus import EBPlus
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

pytestmark = needs_traces


def _cfg(batching: str):
    return load_config(
        {
            "workload": {"trace": "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"},
            "scheduler": {"batching": batching},
            "cluster": {
                "spec": "1x4:h100",
                "models": ["llama-2-7b", "llama-2-13b"],
                "placement": "warmserve",
                "warmup_s": 20,
                "mix": {"rate": 1.0, "alpha": 1.0, "replay_s": 120},
            },
        }
    )


def test_engines_run_the_configured_batching_with_their_own_costs():
    res = run_simulation(_cfg("eb"))
    assert res.metrics["num_completed"] == res.metrics["num_requests"] > 0
    scheds = [inst.scheduler for inst in res.extras["controller"].backend.sim.instances]
    assert scheds
    assert all(isinstance(s.policy, ExclusiveBatching) for s in scheds)
    by_model = {}
    for name, s in zip(res.extras["controller"].backend.names, scheds, strict=True):
        by_model[name] = s.policy.ctl.costs
    # the 13B model (TP 2) and the 7B one have different step costs
    assert by_model["llama-2-13b"] != by_model["llama-2-7b"]
    assert res.metrics["eb_time_share"] == 1.0
    assert res.extras["summary"]["per_model"]["llama-2-7b"]["eb_time_share"] == 1.0


def test_ebplus_engines_stay_in_mb_at_light_load_and_match_it():
    mb = run_simulation(_cfg("mb"))
    ebp = run_simulation(_cfg("ebplus"))
    scheds = [inst.scheduler for inst in ebp.extras["controller"].backend.sim.instances]
    assert all(isinstance(s.policy, EBPlus) for s in scheds)
    assert ebp.metrics["mode_switches"] == 0
    assert ebp.metrics["eb_time_share"] == 0.0
    for col in ("first_token_ns", "finish_ns"):
        np.testing.assert_array_equal(mb.columns[col], ebp.columns[col], err_msg=col)
    # and EB itself, not the same policy under another name, behaves differently
    eb = run_simulation(_cfg("eb"))
    assert not np.array_equal(mb.columns["first_token_ns"], eb.columns["first_token_ns"])
