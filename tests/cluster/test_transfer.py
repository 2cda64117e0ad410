"""Transfers share links max-min fairly; completion times follow from the rates exactly."""

from __future__ import annotations

import math

from tests.cluster.helpers import TimerLoop
from tidal.cluster.transfer import TransferEngine

GB = 1e9


def _engine(links):
    loop = TimerLoop()
    return loop, TransferEngine(links, loop.call_at)


def test_one_transfer_takes_bytes_over_bandwidth():
    loop, eng = _engine({"pcie:0": 20 * GB})
    done = []
    eng.start(0, 13.5 * GB, ("pcie:0",), done.append)
    loop.run()
    assert done == [math.ceil(13.5 / 20 * 1e9)]


def test_two_transfers_on_one_link_share_it():
    loop, eng = _engine({"pcie:0": 10 * GB})
    done = {}
    eng.start(0, 10 * GB, ("pcie:0",), lambda t: done.setdefault("a", t))
    eng.start(0, 20 * GB, ("pcie:0",), lambda t: done.setdefault("b", t))
    loop.run()
    # both at 5 GB/s until a ends at 2 s; then b alone at 10 GB/s for its last 10 GB: 3 s.
    assert abs(done["a"] - 2e9) <= 1
    assert abs(done["b"] - 3e9) <= 2


def test_max_min_fairness_across_a_shared_ssd():
    # two loads from one node's SSD (3 GB/s) to two GPUs, plus a DRAM load on GPU 0:
    # SSD loads get 1.5 each; the DRAM load gets the rest of pcie:0 (10 - 1.5).
    _loop, eng = _engine({"ssd:0": 3 * GB, "pcie:0": 10 * GB, "pcie:1": 10 * GB})
    a = eng.start(0, 3 * GB, ("ssd:0", "pcie:0"), lambda t: None)
    b = eng.start(0, 3 * GB, ("ssd:0", "pcie:1"), lambda t: None)
    c = eng.start(0, 100 * GB, ("pcie:0",), lambda t: None)
    assert math.isclose(a.rate, 1.5 * GB)
    assert math.isclose(b.rate, 1.5 * GB)
    assert math.isclose(c.rate, 8.5 * GB)


def test_cancel_stops_progress_and_never_calls_back():
    loop, eng = _engine({"pcie:0": 10 * GB})
    done = []
    a = eng.start(0, 10 * GB, ("pcie:0",), done.append)
    b = eng.start(0, 10 * GB, ("pcie:0",), done.append)
    loop.run(until=1_000_000_000)
    eng.cancel(loop.now, a)
    assert math.isclose(a.remaining, 5 * GB, rel_tol=1e-9)
    loop.run()
    # b had 5 GB left at 1 s and then the whole link: done at 1.5 s
    assert done == [1_500_000_000]
    assert not b.active
    assert a.cancelled


def test_rate_cap_limits_a_transfer():
    _loop, eng = _engine({"pcie:0": 20 * GB})
    t = eng.start(0, 10 * GB, ("pcie:0",), lambda t: None, max_rate=5 * GB)
    assert math.isclose(t.rate, 5 * GB)
