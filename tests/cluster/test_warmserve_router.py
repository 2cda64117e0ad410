"""WarmServe's router and scale-down at high rates (issue 18's failing conversation cells): a
request finding every ready instance at B waits in the model's FIFO for the first slot that
frees rather than for a new instance's start; arrivals go round-robin over ready instances;
scale-down keeps ⌈peak / (h·B)⌉ instances for ``peak_keep_s`` after a peak."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cluster.helpers import FakeBackend
from tidal.cluster.config import ClusterConfig
from tidal.cluster.controller import ClusterController
from tidal.cluster.instance import State
from tidal.cluster.policies.warmserve_peak import PeakHold
from tidal.core.request import Request


def _ctl(n_req: int, **ws):
    cfg = ClusterConfig(
        spec="1x4:h100", models=["llama-2-7b"], placement="warmserve", batch=2,
        warmserve={"disable": ["forecast"], **ws},
    )  # fmt: skip
    be = FakeBackend()
    ctl = ClusterController(cfg, be, np.zeros(n_req, dtype=np.int64))
    return be, ctl


def _req(i: int, t: int) -> Request:
    return Request(i, t, 16, 4)


def _two_ready(be, ctl):
    """Two requests fill the first instance (B = 2) once it is ready."""
    ctl.on_arrival(_req(0, 0), 0)
    be.run(until=10**10)
    (inst,) = ctl.serving[0]
    assert inst.state == State.READY
    ctl.on_finish(_req(0, 0), be.now)
    ctl.on_arrival(_req(1, be.now), be.now)
    ctl.on_arrival(_req(2, be.now), be.now)
    return inst


def test_a_request_at_a_full_instance_takes_the_first_freed_slot():
    """H100 Llama-3 conv 22.6 req/s: bound to a newly activated instance, a request waited its
    whole start (≈ 0.5 s, the hot model's P99); in the FIFO it takes the slot freed first."""
    be, ctl = _ctl(5)
    inst = _two_ready(be, ctl)
    assert inst.inflight == 2
    t = be.now
    ctl.on_arrival(_req(3, t), t)
    assert [i.state for i in ctl.serving[0]] == [State.READY, State.STARTING]
    assert ctl.serving[0][1].inflight == 0  # not bound to the starting instance
    assert list(ctl.policy.queues[0])
    assert ctl.policy.queues[0][0].request_id == 3
    done = t + 1_000_000  # a request of the full instance finishes 1 ms later
    be.now = done
    ctl.on_finish(_req(1, t), done)
    be.run(until=done)
    assert not ctl.policy.queues[0]
    assert be.delivered[-1] == (inst.engine, 3, done)


def test_the_artifact_rule_binds_the_request_to_the_new_instance():
    be, ctl = _ctl(5, router_queue=False)
    _two_ready(be, ctl)
    ctl.on_arrival(_req(3, be.now), be.now)
    new = ctl.serving[0][1]
    assert new.state == State.STARTING
    assert [r.request_id for r in new.pending] == [3]


def test_a_burst_spreads_round_robin_over_ready_instances():
    """Least-loaded sent a burst of coincident arrivals to a fresh instance, whose next
    prefill step then batched all of them (TTFT 0.10 s vs 0.03 s)."""
    be, ctl = _ctl(8, router_queue=True)
    inst = _two_ready(be, ctl)
    ctl.on_arrival(_req(3, be.now), be.now)  # queues, starts a second instance
    be.run(until=be.now + 10**10)
    a, b = ctl.serving[0]
    assert a is inst
    assert b.state == State.READY
    seen = len(be.delivered)
    ctl.on_finish(_req(1, 0), be.now)
    ctl.on_finish(_req(2, 0), be.now)
    for i in (4, 5):
        ctl.on_arrival(_req(i, be.now), be.now)
    engines = [e for e, _, _ in be.delivered[seen:]]
    assert sorted(engines) == sorted([a.engine, b.engine])


def test_the_peak_is_a_sliding_maximum_over_peak_keep_s():
    _be, ctl = _ctl(8, peak_keep_s=10.0)
    peaks = ctl.policy.peaks
    s = 1_000_000_000
    for t, count in ((0, 3), (2 * s, 5), (4 * s, 2)):
        peaks.note(0, t, count)
    assert peaks.peak(0, 5 * s) == 5
    assert peaks.next_expiry(5 * s, 100 * s) == 12 * s  # the 5 leaves the window then
    assert peaks.peak(0, 12 * s - 1) == 5
    assert peaks.peak(0, 12 * s) == 2  # the 5 at 2 s left the window
    assert peaks.peak(0, 14 * s) == 0
    assert peaks.next_expiry(14 * s, 100 * s) == 100 * s


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 40)), min_size=1, max_size=60))
def test_peak_hold_equals_a_scan_of_the_window(steps):
    keep = 7
    hold, seen, t = PeakHold(1, keep), [], 0
    for dt, count in steps:
        t += dt
        hold.note(0, t, count)
        seen.append((t, count))
        want = max((c for tt, c in seen if t - tt < keep), default=0)
        assert hold.peak(0, t) == want
