"""Policy stats: counters add and subtract, the EB time share is derived from the summed time."""

from __future__ import annotations

import pytest

from tidal.engine.stats import PolicyStats


def test_stats_sum_and_the_share_is_weighted_by_busy_time():
    a = PolicyStats({"mode_switches": 2, "eb_refills": 5}, eb_ns=300, mb_ns=100)
    b = PolicyStats({"mode_switches": 1}, eb_ns=0, mb_ns=600)
    total = PolicyStats.total([a, b])
    assert total.counters == {"eb_refills": 5, "mode_switches": 3}
    # 300 ns of EB in 1000 ns busy — not the mean of 0.75 and 0.0
    assert total.eb_time_share == pytest.approx(0.3)
    assert total.metrics()["eb_time_share"] == pytest.approx(0.3)


def test_a_measured_phase_is_the_difference_and_mixed_batching_has_no_share():
    before = PolicyStats({"eb_refills": 4}, eb_ns=100)
    after = PolicyStats({"eb_refills": 10}, eb_ns=400)
    phase = after - before
    assert phase.counters == {"eb_refills": 6}
    assert phase.eb_time_share == 1.0
    assert PolicyStats().eb_time_share is None
    assert "eb_time_share" not in PolicyStats().metrics()
