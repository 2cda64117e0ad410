"""WarmServe's overload fallback (issue 18 item 4). Built from the past-capacity setting of the
starvation guard's tests (H200 Llama-3 conv 64 req/s in miniature: one node of two GPUs, B = 2):
model 0's burst takes both GPUs and the peak rule holds them; model 1's request waits past
``starve_give_up_s``, so the guard stands down and, without the fallback, it waits for the
peak to expire. With the fallback, ServerlessLLM's rules take over (one idle instance of model
0 is stopped after ``keep_alive_s``) and hand back to WarmServe's once nothing waits."""

from __future__ import annotations

import numpy as np

from tests.cluster.helpers import FakeBackend
from tests.cluster.test_warmserve_starve import _burst_ebbs, _burst_then
from tidal.cluster.config import ClusterConfig
from tidal.cluster.controller import ClusterController
from tidal.cluster.instance import State

S = 1_000_000_000
FB = {"overload_fallback": True, "overload_enter_s": 5.0, "overload_hold_s": 10.0}


def _ctl(**ws):
    cfg = ClusterConfig(
        spec="1x2:h100", models=["llama-2-7b", "llama-2-7b"], placement="warmserve", batch=2,
        warmserve={"disable": ["forecast"], **ws},
        serverlessllm={"target": 2, "instance_cap": 2},
    )  # fmt: skip
    be = FakeBackend()
    model_of = np.array([0, 0, 0, 0, 1, 1], dtype=np.int64)
    ctl = ClusterController(cfg, be, model_of)
    ctl.start()
    return be, ctl


def test_overload_engages_serverlessllm_rules_and_disengages_when_the_backlog_clears():
    """t = model 1's arrival; the guard gives up at 5 s. The fallback engages at the first
    period with a wait > 5 s (t + 5.5 s). ServerlessLLM's autoscaler then sees model 0 at 1 in
    flight on 2 instances (desired ⌈1/2⌉ = 1) with no arrival: its idle timer grows 1 s per
    loop from t + 5.5 s and at 5 s (the sixth loop, t + 10.5 s) it stops the newest READY
    instance (idle); model 1 acquires the freed GPU in the same loop. Once model 1's request is
    served nothing waits, and after the 10-s hold (t + 15.5 s) WarmServe's rules return."""
    be, ctl = _ctl(starve_give_up_s=5.0, **FB)
    pol = ctl.policy
    t = _burst_ebbs(be, ctl)
    be.run(until=t + 5 * S)
    assert not pol.fallback.engaged  # wait = 5 s, not above it
    be.run(until=t + 5 * S + S // 2)
    assert pol.fallback.engaged
    assert pol.fallback.engagements == 1
    be.run(until=t + 10 * S)
    assert not ctl.serving[1]
    assert len(ctl.serving[0]) == 2
    be.run(until=t + 10 * S + S // 2)
    assert len(ctl.serving[0]) == 1
    assert ctl.serving[0][0].inflight == 1  # the busy instance is kept
    (inst,) = ctl.serving[1]
    assert inst.created_ns == t + 10 * S + S // 2
    be.run(until=t + 15 * S)
    assert inst.state == State.READY
    assert [rid for _, rid, _ in be.delivered].count(4) == 1
    assert pol.fallback.engaged  # nothing waits, but the hold has not passed
    be.run(until=t + 15 * S + S // 2)
    assert not pol.fallback.engaged
    assert pol.fallback.engaged_ns == 10 * S
    assert pol.guard.fired == 0  # the guard stood down throughout


def test_without_the_fallback_the_same_request_waits_for_the_peak_to_expire():
    be, ctl = _ctl(starve_give_up_s=5.0, overload_fallback=False)
    assert ctl.policy.fallback is None
    t = _burst_ebbs(be, ctl)
    be.run(until=t + 30 * S)
    assert not ctl.serving[1]
    assert 4 not in [rid for _, rid, _ in be.delivered]


def test_a_starved_model_the_guard_serves_in_time_does_not_trip_it():
    """Within capacity: model 1 waits 2 s, the guard hands it model 0's over-held instance,
    and no request ever waits 5 s."""
    be, ctl = _ctl(**FB)
    t = _burst_then(be, ctl, left=1)
    be.run(until=t + 60 * S)
    assert ctl.policy.guard.fired == 1
    assert ctl.policy.fallback.engagements == 0
    assert [rid for _, rid, _ in be.delivered].count(4) == 1


def test_the_fallback_needs_the_guard():
    _be, ctl = _ctl(starve_wait_s=0, **FB)
    assert ctl.policy.fallback is None


def test_off_by_default_and_at_20_s_when_on():
    _be, ctl = _ctl()
    assert ctl.policy.fallback is None
    _be, ctl = _ctl(overload_fallback=True)
    fb = ctl.policy.fallback
    assert fb is not None
    assert fb.enter_ns == 20 * S
    assert fb.exit_ns == 2 * S
