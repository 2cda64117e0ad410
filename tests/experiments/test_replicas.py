"""Replicated deployments: exact, and round-robin replicas behave as if alone."""

from __future__ import annotations

import numpy as np
import pytest

from tidal.core.errors import ConfigError
from tidal.experiments.replicas import run_replicated
from tidal.sim.config import load_config
from tidal.sim.run import load_requests, run_simulation

CFG = {
    "model": "llama-3.1-8b",
    "gpu": "l40s",
    "scheduler": {"token_budget": 1024, "max_seqs": 64},
    "workload": {
        "num_requests": 400,
        "rate": 25,
        "arrival_cv": 2.0,
        "prompt_len": 800,
        "output_len": 120,
        "length_dist": "uniform",
    },
}
TIMES = ("first_scheduled_ns", "first_token_ns", "finish_ns", "output_tokens", "num_preemptions")


def test_one_replica_is_the_single_instance_simulation():
    cfg = load_config(CFG)
    a = run_simulation(cfg)
    b = run_replicated(cfg, 1)
    for k in a.columns:
        np.testing.assert_array_equal(a.columns[k], b.columns[k])
    assert {k: v for k, v in b.metrics.items() if k in a.metrics} == a.metrics


def test_round_robin_replicas_serve_their_share_exactly_as_if_alone():
    cfg = load_config(CFG)
    reqs = load_requests(cfg)
    both = run_replicated(cfg, 3, "round-robin", reqs)
    inst = both.columns["instance"]
    for r in range(3):
        idx = np.flatnonzero(np.arange(len(reqs)) % 3 == r)
        np.testing.assert_array_equal(inst[idx], r)
        alone = run_simulation(cfg, reqs.take(idx))
        for k in TIMES:
            np.testing.assert_array_equal(both.columns[k][idx], alone.columns[k])
    assert both.metrics["num_gpus"] == 3
    # the cluster roofline is three replicas' worth
    one = run_replicated(cfg, 1, requests=reqs)
    assert both.metrics["roofline_token_throughput"] == pytest.approx(
        3 * one.metrics["roofline_token_throughput"]
    )
    tl = both.extras["tables"]["timeline"]
    assert set(np.unique(tl["instance"]).tolist()) == {0, 1, 2}


@pytest.mark.parametrize("router", ["least-loaded", "round-robin"])
def test_replicated_fast_forward_is_exact(router):
    fast = run_replicated(load_config(CFG), 2, router)
    slow = run_replicated(load_config(dict(CFG, fast_forward=False)), 2, router)
    for k in fast.columns:
        np.testing.assert_array_equal(fast.columns[k], slow.columns[k])


def test_least_loaded_balances_and_more_replicas_cut_queueing():
    cfg = load_config(CFG)
    res = {r: run_replicated(cfg, r, "least-loaded") for r in (1, 2, 4)}
    counts = np.bincount(res[4].columns["instance"], minlength=4)
    assert counts.min() > 0.15 * counts.sum()
    assert (res[4].columns["finish_ns"] >= 0).all()
    p99 = [res[r].metrics["ttft_p99_s"] for r in (1, 2, 4)]
    assert p99[0] > p99[1] > p99[2]


def test_bad_replica_counts_and_routers_are_refused():
    cfg = load_config(CFG)
    with pytest.raises(ConfigError, match="replicas"):
        run_replicated(cfg, 0)
    with pytest.raises(ConfigError, match="router"):
        run_replicated(cfg, 2, "random")
