"""A cluster run's streamed ServeGen workload: the same statistics and the same results as the
whole workload (``run_simulation(cfg, requests)`` takes the whole-array path)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.cluster.test_exact_hash import CASES, GOLDEN, _servegen
from tests.conftest import needs_traces
from tidal.report.digest import result_digest
from tidal.sim.cluster_run import cluster_workload, next_arrivals, workload_stats
from tidal.sim.cluster_stream import mix_stream, stream_stats, streamed_workload, streams
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

pytestmark = needs_traces


@pytest.mark.parametrize(
    ("days", "rate", "rows", "warmup"),
    [(0.04, 2.0, 8192, 60), (0.3, 0.7, 97, 0), (1.0, 0.05, 5, 20)],
)
def test_stream_stats_equal_the_whole_workloads_bit_for_bit(days, rate, rows, warmup):
    cfg = load_config(_servegen("warmserve", days=days, rate=rate, warmup_s=warmup))
    assert streams(cfg)
    whole = cluster_workload(cfg).requests
    assert stream_stats(cfg.cluster, mix_stream(cfg, rows)) == workload_stats(cfg.cluster, whole)


def test_streamed_request_set_reads_as_the_whole_one():
    cfg = load_config(_servegen("warmserve", days=0.1, rate=3.0))
    whole = cluster_workload(cfg).requests
    rs, nxt, first, _, meta = streamed_workload(cfg)
    n = len(whole)
    assert len(rs) == n
    assert meta["description"] == cluster_workload(cfg).description
    want_next, want_first = next_arrivals(whole, 4)
    assert first == want_first
    for lo in range(0, n, 1000):  # forward reads as the simulation does them
        hi = lo + 1500
        np.testing.assert_array_equal(rs.arrival_ns[lo:hi], whole.arrival_ns[lo:hi])
        np.testing.assert_array_equal(rs.prompt_len[lo:hi], whole.prompt_len[lo:hi])
        assert rs.extra["model"][lo] == whole.extra["model"][lo]
        assert nxt[lo] == want_next[lo]
    np.testing.assert_array_equal(np.asarray(rs.output_len), whole.output_len)


@pytest.mark.parametrize("case", ["warmserve-servegen", "muxserve-servegen"])
def test_streamed_run_equals_the_whole_workloads_run(case):
    cfg = load_config(CASES[case])
    streamed = result_digest(run_simulation(cfg))
    assert streamed == GOLDEN[case]
    assert result_digest(run_simulation(cfg, cluster_workload(cfg).requests)) == streamed
