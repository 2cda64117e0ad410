"""A request handed to a busy instance from a control event created after its fast-forwarded
run began (a cluster reacting to another instance's completion) is seen at the same step
boundary as in step-by-step simulation."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import make_scheduler, request_set, unit_perf
from tidal.sim.instance import SimInstance
from tidal.sim.recorder import RequestRecorder
from tidal.sim.simulator import CONTROL, Simulation


def _run(fast_forward: bool, out_b: int):
    # request 0 decodes long on instance 0; request 1 finishes early on instance 1; request 2
    # is held by the "router" and handed to instance 0 when request 1 finishes.
    rs = request_set([0.0, 0.0, 0.0], [16, 16, 16], [400, out_b, 5])
    rec = RequestRecorder(rs)
    insts = [SimInstance(i, make_scheduler(), unit_perf(), fast_forward) for i in range(2)]
    sim = Simulation(insts, rs, rec)
    held = {}

    def route(req):
        if req.request_id == 2:
            held[2] = req
            return -1
        return req.request_id

    def on_finish(req):
        if req.request_id == 1:
            sim.call_at(sim.now_ns, lambda t: sim.deliver(0, held[2], t), CONTROL)

    sim.route = route
    sim.on_request_finish = on_finish
    sim.run()
    return rec, sim


@pytest.mark.parametrize("out_b", [2, 37, 150])
def test_delivery_mid_run_matches_stepping(out_b):
    (a, sa), (b, sb) = _run(False, out_b), _run(True, out_b)
    for col in ("first_scheduled_ns", "first_token_ns", "finish_ns"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    assert sb.num_events < sa.num_events
    # the steps cut from the run leave the ITL histogram too
    for ia, ib in zip(sa.instances, sb.instances, strict=True):
        assert ia.itl.total_weight == ib.itl.total_weight
        assert ia.itl.percentiles((50, 90, 99)) == ib.itl.percentiles((50, 90, 99))
    # the held request really waited for the other instance
    assert b.first_scheduled_ns[2] >= b.finish_ns[1]
