"""Augmented (tool-calling) requests on a disaggregated deployment (sim/disagg_augment.py):
a hand-derived timeline of one request that pauses on the decode pool and resumes there, KV
conservation on both pools under random workloads (every block back, every request served,
the invariants checked after every step), and fast-forward changing nothing."""

from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tidal.sim.disagg as disagg
import tidal.sim.single as single
from tests.augment.helpers import augmented_workloads, spec, workload
from tests.conftest import unit_perf
from tidal.sim.config import load_config
from tidal.sim.disagg import run_disaggregated

MS = 1_000_000
LINK = {"link": "ib-ndr", "bandwidth_gbs": 50, "efficiency": 1.0, "latency_us": 10}


def _cfg(dep, fast_forward=True, policy="infercept", intercept=None, **augment):
    aug = {"serving_policy": policy, **augment}
    if intercept is not None:
        aug["intercept"] = intercept
    return load_config(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100",
            "perf_model": "roofline",
            "fast_forward": fast_forward,
            "augment": aug,
            "workload": {"augmented": "infercept-mix", "num_requests": 1, "rate": 1.0},
            "deployment": {"kv_transfer": LINK, **dep},
        }
    )


@contextmanager
def _unit_steps_and_checks(checked: list | None = None):
    """Every instance steps by ``unit_perf`` (1 ms + 1 µs per token); with ``checked``, the
    schedulers' invariants are asserted after every step, the prefill pool's with its held
    blocks (``checked`` collects the wiring and the schedulers)."""
    build, wire = single.build_instance, disagg._wire

    def build_instance(cfg, *a, **k):
        with mock.patch.object(single, "build_perf_model", return_value=unit_perf()):
            s, perf, plan = build(cfg, *a, **k)
        if checked is not None:
            checked.append(s)
            _check_after_each_step(s, checked)
        return s, perf, plan

    def _wire(*a, **k):
        w = wire(*a, **k)
        if checked is not None:
            checked.insert(0, w)
        return w

    with mock.patch.object(disagg, "build_instance", build_instance), mock.patch.object(
        disagg, "_wire", _wire
    ):
        yield


def _check_after_each_step(s, checked: list) -> None:
    update = s.update

    def check(plan, output, end_ns):
        update(plan, output, end_ns)
        if s.augmentation is not None:  # decode: running, paused, queued, swapping, loading
            s.check()
            return
        wiring = checked[0]  # prefill: running legs' blocks + held ones + free == all
        i = checked.index(s) - 1
        kv = s.kv
        held = wiring.held[i].num_held
        running = sum(r.num_blocks for r in s.state.running.values())
        assert running + held + kv.num_free_blocks == kv.num_blocks

    s.update = check  # type: ignore[method-assign]


def test_hand_derived_pause_on_decode_pool_and_resume_there():
    """One request: 100-token prompt, 3 tokens, a 50 ms call returning 20 tokens, 2 tokens.
    Llama-3.1-8B KV: 131 072 B/token; unit steps: 1 ms + 1 µs per token."""
    rs = workload([0.0], [100], [spec((3, 50.0, 20), final=2)])
    cfg = _cfg({}, intercept="preserve")
    with _unit_steps_and_checks():
        res = run_disaggregated(cfg, rs)
    c, m = res.columns, res.metrics
    prefill_end = 1_100_000  # 1 ms + 100 µs on the prefill pool
    assert c["prefill_end_ns"][0] == prefill_end
    xfer = -(-100 * 131_072 * 10**9 // 50_000_000_000) + 10_000  # ⌈bytes/bw⌉ + latency
    assert c["kv_transfer_start_ns"][0] == prefill_end
    assert c["kv_transfer_end_ns"][0] == prefill_end + xfer
    first = prefill_end + xfer + 1_001_000  # the decode side's 1-token recompute
    assert c["first_token_ns"][0] == first
    pause = first + 2 * 1_001_000  # two decode steps: tokens 2 and 3, then the call
    resume = pause + 50 * MS
    # Preserve: the KV stayed on the decode GPUs; the resumed step prefills the last sampled
    # token and the 20 returned ones there (1 ms + 21 µs), sampling token 4; one decode step
    finish = resume + 1_021_000 + 1_001_000
    assert c["finish_ns"][0] == finish
    assert c["output_tokens"][0] == 5
    assert m["intercepts_preserved"] == 1
    assert m["num_intercepts"] == 1
    assert m["pools"]["prefill"]["augment"]["num_intercepts"] == 0
    assert m["paused_time_s"] == pytest.approx(0.05)
    assert m["pools"]["decode"]["num_free_blocks_end"] == m["pools"]["decode"]["num_blocks"]


def test_discard_recomputes_the_context_on_the_decode_pool():
    """Discard: the resumed step prefills the whole context (100 + 3 + 20 tokens) on the
    decode pool; nothing goes back through the prefill pool."""
    rs = workload([0.0], [100], [spec((3, 50.0, 20), final=2)])
    with _unit_steps_and_checks():
        res = run_disaggregated(_cfg({}, intercept="discard"), rs)
    c, m = res.columns, res.metrics
    resume = int(c["first_token_ns"][0]) + 2 * 1_001_000 + 50 * MS
    assert c["finish_ns"][0] == resume + (1_000_000 + 123_000) + 1_001_000
    assert m["intercepts_discarded"] == 1
    assert m["recompute_tokens"] == 102  # the computed context: prompt + 2 decoded tokens
    assert m["pools"]["prefill"]["num_steps"] == 1


def _served(res, rs) -> None:
    c, pools = res.columns, res.metrics["pools"]
    assert (c["finish_ns"] >= 0).all()
    assert (c["output_tokens"] == rs.output_len).all()
    for role in ("prefill", "decode"):
        p = pools[role]
        assert p["num_free_blocks_end"] == p["instances"] * p["num_blocks"], role
    assert pools["prefill"]["augment"]["num_intercepts"] == 0
    assert res.metrics["num_intercepts"] == int(rs.extra["num_calls"].sum())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rs=augmented_workloads(max_requests=10, max_prompt=300, max_return=80),
    p=st.integers(1, 2),
    d=st.integers(1, 2),
    policy=st.sampled_from(["vllm", "infercept", "augserve"]),
    intercept=st.sampled_from([None, "preserve", "discard", "swap"]),
    blocks=st.sampled_from([None, 64]),
    protocol=st.sampled_from(["pull", "push"]),
)
def test_kv_is_conserved_on_both_pools(rs, p, d, policy, intercept, blocks, protocol):
    dec: dict = {"instances": d}
    if blocks is not None:  # 64 blocks of 16 tokens: the decode pool runs out of KV
        dec["memory"] = {"num_blocks": blocks}
    link = {**LINK, "protocol": protocol}
    dep = {"prefill": {"instances": p}, "decode": dec, "kv_transfer": link}
    cfg = _cfg(dep, policy=policy, intercept=intercept)
    checked: list = []
    with _unit_steps_and_checks(checked):
        res = run_disaggregated(cfg, rs)
    _served(res, rs)
    counts = [res.metrics[f"intercepts_{k}"] for k in ("preserved", "discarded", "swapped")]
    assert sum(counts) == res.metrics["num_intercepts"]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rs=augmented_workloads(max_requests=10, max_prompt=300, max_return=80),
    d=st.integers(1, 2),
    policy=st.sampled_from(["vllm", "infercept", "augserve"]),
    blocks=st.sampled_from([None, 64]),
    protocol=st.sampled_from(["pull", "push"]),
)
def test_fast_forward_changes_nothing(rs, d, policy, blocks, protocol):
    dec: dict = {"instances": d}
    if blocks is not None:
        dec["memory"] = {"num_blocks": blocks}
    dep = {"decode": dec, "kv_transfer": {**LINK, "protocol": protocol}}
    out = []
    for ff in (True, False):
        with _unit_steps_and_checks():
            out.append(run_disaggregated(_cfg(dep, ff, policy=policy), rs))
    a, b = out
    for k in a.columns:
        assert np.array_equal(a.columns[k], b.columns[k]), k
    skip = ("wall", "simulate")
    diff = {
        k: (v, b.metrics.get(k))
        for k, v in a.metrics.items()
        if not any(s in k for s in skip) and v != b.metrics.get(k)
    }
    assert not diff, diff
