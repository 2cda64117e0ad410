"""WarmServe's starvation guard (issue 18, H200 Llama-2 conv 45.3 req/s: the second 7B waited
30 s at P99 behind the hotter models' peak-held instances, ServerlessLLM's 9.9 s). Built from
that setting on one node of two GPUs: model 0's burst takes both GPUs and the peak rule holds
them for a minute; model 1 then has no GPU at all. The overload fallback is off here (its
tests: ``test_warmserve_fallback.py``)."""

from __future__ import annotations

import numpy as np

from tests.cluster.helpers import FakeBackend
from tidal.cluster.config import ClusterConfig
from tidal.cluster.controller import ClusterController
from tidal.cluster.instance import State
from tidal.core.request import Request

S = 1_000_000_000


def _ctl(**ws):
    cfg = ClusterConfig(
        spec="1x2:h100", models=["llama-2-7b", "llama-2-7b"], placement="warmserve", batch=2,
        warmserve={"disable": ["forecast"], "overload_fallback": False, **ws},
    )  # fmt: skip
    be = FakeBackend()
    model_of = np.array([0, 0, 0, 0, 1, 1], dtype=np.int64)  # request id → model
    ctl = ClusterController(cfg, be, model_of)
    ctl.start()
    return be, ctl


def _burst_then(be, ctl, left: int) -> int:
    """Four requests of model 0 at t = 0: two instances (both GPUs), peak 4 in flight; at
    10 s all but ``left`` finish. Returns the time model 1's request arrives (16 s: model 0's
    5-s average is then ``left``)."""
    reqs = [Request(i, 0, 16, 4) for i in range(4)]
    for r in reqs:
        ctl.on_arrival(r, 0)
    be.run(until=10 * S)
    assert len(ctl.serving[0]) == 2
    assert all(i.state == State.READY for i in ctl.serving[0])
    for r in reqs[left:]:
        ctl.on_finish(r, 10 * S)
    be.run(until=16 * S)
    assert len(ctl.serving[0]) == 2  # the peak rule holds both: ⌈4 / (0.6 · 2)⌉ = 4 ≥ 2
    t = 16 * S
    ctl.on_arrival(Request(4, t, 16, 4), t)
    return t


def test_a_model_with_no_gpu_gets_one_held_instance_back_after_starve_wait_s():
    """Model 0 has 1 in flight (need ⌈1 / (0.8 · 2)⌉ = 1) and holds 2: one is over-held.
    Model 1's request waits on the retry path; once it has waited 2 s the guard stops model
    0's idle instance, and model 1 acquires its GPUs the moment they free."""
    be, ctl = _ctl()
    t = _burst_then(be, ctl, left=1)
    be.run(until=t + 2 * S - 1)
    assert not ctl.serving[1]  # below starve_wait_s: ordinary waiting, nothing handed back
    be.run(until=t + 3 * S)
    pol = ctl.policy
    assert pol.guard is not None
    assert pol.guard.fired == 1
    assert len(ctl.serving[0]) == 1
    assert ctl.serving[0][0].inflight == 1  # the busy one is kept
    (inst,) = ctl.serving[1]
    assert t + 2 * S <= inst.created_ns <= t + 2 * S + S // 2  # the first period past 2 s
    be.run(until=t + 20 * S)
    assert ctl.serving[1][0].state == State.READY
    assert [rid for _, rid, _ in be.delivered].count(4) == 1


def test_sustained_contention_hands_nothing_back():
    """Model 0 keeps 4 in flight (2 per instance = B; need ⌈4 / 1.6⌉ = 3 ≥ 2 held): no
    instance is held above its load, so model 1 waits however long."""
    be, ctl = _ctl()
    t = _burst_then(be, ctl, left=4)
    be.run(until=t + 30 * S)
    assert ctl.policy.guard.fired == 0
    assert not ctl.serving[1]
    assert len(ctl.serving[0]) == 2


def _burst_ebbs(be, ctl):
    """Model 0 holds 4 in flight (no over-hold) until model 1 has waited 4 s, then 3 finish:
    its need ⌈max(avg, 1) / 1.6⌉ falls to 1 once the 5-s average is ≤ 1.6, 4 s later
    ((4·1 + 1·4) / 5 = 1.6), i.e. 8 s after model 1's arrival."""
    t = _burst_then(be, ctl, left=4)
    be.run(until=t + 4 * S)
    assert ctl.policy.guard.fired == 0
    for i in range(1, 4):
        ctl.on_finish(Request(i, 0, 16, 4), t + 4 * S)
    return t


def test_an_over_hold_that_appears_late_is_handed_back():
    be, ctl = _ctl()
    t = _burst_ebbs(be, ctl)
    be.run(until=t + 7 * S + S // 2)
    assert ctl.policy.guard.fired == 0  # the average still asks for 2 instances
    be.run(until=t + 9 * S)
    assert ctl.policy.guard.fired == 1
    assert len(ctl.serving[1]) == 1


def test_past_starve_give_up_s_the_guard_stands_down():
    """The fallback: model 1 has waited 8 s > ``starve_give_up_s`` 5 s when the over-hold
    appears, so it is treated as past capacity and the hold stays as without the guard."""
    be, ctl = _ctl(starve_give_up_s=5.0)
    t = _burst_ebbs(be, ctl)
    be.run(until=t + 30 * S)
    assert ctl.policy.guard.fired == 0
    assert not ctl.serving[1]


def test_without_the_guard_the_held_instance_stays_for_peak_keep_s():
    """The failing rule: with ``starve_wait_s: 0`` model 1 waits for the peak to expire."""
    be, ctl = _ctl(starve_wait_s=0)
    t = _burst_then(be, ctl, left=1)
    assert ctl.policy.guard is None
    be.run(until=t + 30 * S)
    assert not ctl.serving[1]
    assert len(ctl.serving[0]) == 2


def test_the_artifact_rule_has_no_guard():
    _be, ctl = _ctl(peak_keep_s=0, router_queue=False)
    assert ctl.policy.guard is None
