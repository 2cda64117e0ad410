"""Parallel-Probe's controller (tidal.workload.parallel_probe): hand-derived cases, invariants,
and the workload/simulator wiring."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.sim.config import load_config
from tidal.sim.run import run_simulation
from tidal.workload.build import build_workload
from tidal.workload.config import WorkloadConfig
from tidal.workload.parallel_probe import (
    ParallelProbeOptions,
    answer_matrix,
    probe_groups,
    run_controller,
    token_savings,
)


def test_unanimous_branches_stop_after_stability_steps() -> None:
    # first probe at 100 tokens; steps 0, 1, 2 have stable = 0, 1, 2 -> stop with 4 probe calls
    opts = ParallelProbeOptions(interval=100, stability=2)
    out = run_controller(np.full(4, 1000), np.zeros((4, 10), np.int64), opts)
    assert out.stopped_early
    assert not out.pruned.any()
    assert out.consumed.tolist() == [400] * 4
    full = np.full((1, 4), 1000)
    seq, tot = token_savings(full, out.consumed[None, :])
    assert seq == tot == 1 - 1600 / 4000


def test_dissenting_branch_is_pruned_after_patience() -> None:
    # branch 2 always disagrees: off-track at steps 0 and 1 -> pruned with 3 calls (300 tokens);
    # the others stop at step 50 (stable = 50) with 1 + 51 calls
    opts = ParallelProbeOptions(interval=100, stability=50, warmup=0, prune_patience=2)
    answers = np.zeros((3, 100), np.int64)
    answers[2] = 1
    out = run_controller(np.full(3, 10_000), answers, opts)
    assert out.pruned.tolist() == [False, False, True]
    assert out.consumed.tolist() == [5200, 5200, 300]


def test_no_pruning_before_warmup_and_short_branches_finish() -> None:
    opts = ParallelProbeOptions(interval=100, stability=1000, warmup=1000, prune_patience=1)
    lengths = np.array([250, 999, 1000])
    answers = np.tile(np.arange(3)[:, None], (1, 10))  # three answers, ties to branch 0's
    out = run_controller(lengths, answers, opts)
    assert not out.stopped_early
    assert out.consumed.tolist() == lengths.tolist()


@settings(max_examples=60, deadline=None)
@given(
    lens=st.lists(st.integers(1, 5000), min_size=2, max_size=12),
    interval=st.integers(1, 700),
    stability=st.integers(1, 12),
    warmup=st.integers(0, 6),
    patience=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_invariants(lens, interval, stability, warmup, patience, seed) -> None:
    opts = ParallelProbeOptions(
        interval=interval, stability=stability, warmup=warmup, prune_patience=patience
    )
    lengths = np.array(lens)
    a = answer_matrix(lengths, opts, np.random.default_rng(seed))
    out = run_controller(lengths, a, opts)
    assert (out.consumed <= lengths).all()  # never more than all to completion
    assert (out.consumed >= np.minimum(lengths, interval)).all()  # every branch probed once
    again = run_controller(lengths, answer_matrix(lengths, opts, np.random.default_rng(seed)), opts)
    assert (again.consumed == out.consumed).all()  # deterministic per seed
    if not out.stopped_early:  # every unpruned branch ran to its end
        assert (out.consumed[~out.pruned] == lengths[~out.pruned]).all()


def test_answer_model_settles_on_the_final_answer() -> None:
    opts = ParallelProbeOptions(interval=10, agreement=1.0)
    lengths = np.array([95, 40, 7])
    a = answer_matrix(lengths, opts, np.random.default_rng(3))
    calls = -(-lengths // 10)
    for b, c in enumerate(calls):
        assert a[b, c - 1] == 0  # agreement 1: every final answer is the consensus one
        settled = np.flatnonzero(a[b, :c] == 0)
        assert (a[b, settled[0] : c] == 0).all()  # once settled, it stays


def test_paper_like_setting_saves_tokens() -> None:
    # 64 branches, lengths up to the 32k budget (the paper's SC@64 setting)
    rng = np.random.default_rng(0)
    full = np.minimum(rng.lognormal(np.log(14_000), 0.6, (10, 64)).astype(np.int64), 32_768)
    done = probe_groups(full, ParallelProbeOptions(), rng)
    seq, tot = token_savings(full, done)
    assert 0 < seq < 1
    assert 0 < tot < 1
    assert (done <= full).all()


def _workload(policy: str) -> dict:
    return {
        "num_requests": 4,
        "rate": 0.5,
        "prompt_len": 300,
        "output_len": 2000,
        "length_dist": "lognormal",
        "length_sigma": 0.6,
        "n": 8,
        "branch_policy": policy,
        "parallel_probe": {"interval": 100, "stability": 4, "warmup": 2, "prune_patience": 2},
    }


def test_workload_truncates_branches_only() -> None:
    full = build_workload(WorkloadConfig(**_workload("all")), np.random.default_rng(5))
    probe = build_workload(WorkloadConfig(**_workload("parallel-probe")), np.random.default_rng(5))
    assert (full.arrival_ns == probe.arrival_ns).all()
    assert (full.prompt_len == probe.prompt_len).all()
    assert (probe.output_len <= full.output_len).all()
    assert probe.output_len.sum() < full.output_len.sum()
    assert "Parallel-Probe" in probe.source


def test_simulator_finishes_every_probed_branch_and_shares_the_prompt() -> None:
    runs = {
        p: run_simulation(load_config({"workload": _workload(p), "seed": 2}))
        for p in ("all", "parallel-probe")
    }
    c = runs["parallel-probe"].columns
    assert (c["output_tokens"] == c["output_len"]).all()  # stopped branches end (KV freed)
    assert (c["cached_tokens"].reshape(4, 8)[:, 1:] > 0).all()  # prompt shared via the cache
    assert c["output_tokens"].sum() < runs["all"].columns["output_tokens"].sum()
    assert c["finish_ns"].max() <= runs["all"].columns["finish_ns"].max()


def test_parallel_probe_needs_branches() -> None:
    import pytest

    with pytest.raises(ValueError, match="branch_policy"):
        WorkloadConfig(num_requests=2, rate=1.0, branch_policy="parallel-probe")
