"""The WarmServe family's rate ladder (issue 18, ``bench/robustness_grid.py``): which placements
run at the next rung, when a setting's ladder ends, and what its highest rate is."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import robustness_grid as rg


def test_ladder_rungs_are_geometric_above_the_first_rates() -> None:
    rates = (*rg.CLUSTER_RATES, *rg.LADDER)
    assert rates[:4] == (0.5, 1.0, 2.0, 4.0)
    assert rg.LADDER[1::2] == (8.0, 16.0, 32.0, 64.0, 128.0)  # every other rung doubles
    for a, b in itertools.pairwise(rates[3:]):
        assert abs(b / a - 2**0.5) < 1e-3


def test_muxserve_below_the_slo_drops_out_but_serverlessllm_stays() -> None:
    ok, bad = {4.0: 0.95, 5.66: 0.91}, {4.0: 0.95, 5.66: 0.89}
    att = {"warmserve": ok, "serverlessllm": bad, "muxserve": bad, "dedicated": ok}
    assert rg.ladder_policies(att) == ["warmserve", "serverlessllm"]
    att = {"warmserve": bad, "serverlessllm": bad, "muxserve": ok, "dedicated": ok}
    # WarmServe below the SLO still runs: the TTFT guarantee pairs it with ServerlessLLM
    assert rg.ladder_policies(att) == ["warmserve", "serverlessllm", "muxserve"]


def test_the_ladder_ends_once_warmserve_and_muxserve_are_both_below() -> None:
    bad, ok = {4.0: 1.0, 5.66: 0.5}, {4.0: 1.0, 5.66: 1.0}
    att = {"warmserve": bad, "serverlessllm": ok, "muxserve": bad, "dedicated": ok}
    assert rg.ladder_policies(att) is None
    assert rg.ladder_policies({}) is None


def test_highest_rate_stops_at_the_first_rung_below_the_slo() -> None:
    assert rg.highest_rate({0.5: 1.0, 1.0: 0.95, 2.0: 0.89, 4.0: 0.99}) == 1.0
    assert rg.highest_rate({0.5: 0.5}) == 0.0
    assert rg.highest_rate({8.0: 0.9, 0.5: 1.0}) == 8.0  # order of the dict does not matter


def test_groups_of_a_rung_carry_only_the_placements_asked_for() -> None:
    s = rg.warmserve_settings()[0]
    g = rg.warmserve_group(s, 11.31, ["warmserve", "serverlessllm"])
    assert g.policies == ["warmserve", "serverlessllm"]
    assert g.base["cluster"]["mix"]["rate"] == 11.31
    assert g.group_id == "2x8_h100-llama2-conv-11.31"
    assert len(rg.warmserve_groups()) == len(rg.warmserve_settings()) * len(rg.CLUSTER_RATES)
