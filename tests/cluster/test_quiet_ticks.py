"""WarmServe's quiet ticks: a tick that changed nothing with its clock-driven inputs settled is
repeated exactly by later ones until the controller's version changes, so skipping them leaves
every result unchanged; and stopped instances leave rows, not objects."""

from __future__ import annotations

import gc

import pytest

from tests.cluster.test_exact_hash import CASES
from tests.conftest import needs_traces
from tidal.cluster.instance import ModelInstance
from tidal.cluster.policies.warmserve import WarmServe
from tidal.report.digest import result_digest
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

pytestmark = needs_traces


def _counting(monkeypatch, settled: bool | None) -> dict[str, int]:
    seen = {"ticks": 0, "bodies": 0}
    tick, autoscale = WarmServe.tick, WarmServe._autoscale

    def counted_tick(self, now_ns):
        seen["ticks"] += 1
        tick(self, now_ns)

    def counted_autoscale(self, now_ns):
        seen["bodies"] += 1
        autoscale(self, now_ns)

    monkeypatch.setattr(WarmServe, "tick", counted_tick)
    monkeypatch.setattr(WarmServe, "_autoscale", counted_autoscale)
    if settled is False:
        monkeypatch.setattr(WarmServe, "_settled", lambda self, now_ns: False)
    return seen


@pytest.mark.parametrize("case", ["warmserve", "warmserve-small-batch"])
def test_skipped_ticks_change_no_result(monkeypatch, case):
    cfg = load_config(CASES[case])
    with monkeypatch.context() as mp:
        full = _counting(mp, settled=False)
        reference = result_digest(run_simulation(cfg))
    quiet = _counting(monkeypatch, settled=None)
    assert result_digest(run_simulation(cfg)) == reference
    assert full["bodies"] == full["ticks"]
    assert quiet["ticks"] == full["ticks"]
    assert quiet["bodies"] < 0.9 * quiet["ticks"]  # some ticks were skipped


def test_stopped_instances_are_dropped():
    cfg = {**CASES["warmserve-small-batch"]}
    cfg["cluster"] = {**cfg["cluster"], "warmserve": {"router_queue": False, "peak_keep_s": 0}}
    res = run_simulation(load_config(cfg))  # the artifact's rules: > 10 short-lived instances
    ctl = res.extras["controller"]
    table = res.extras["tables"]["instances"]
    assert len(table["instance"]) == res.metrics["instance_starts"] == ctl.num_instances > 10
    assert table["instance"].tolist() == list(range(ctl.num_instances))
    assert (table["stopped_ns"] >= table["created_ns"]).all()
    assert not ctl.live
    del res
    gc.collect()
    alive = [o for o in gc.get_objects() if type(o) is ModelInstance and o.stopped_ns >= 0]
    # at most one per engine slot: its current (drained) scheduler's KV names its instance
    assert len(alive) <= len(ctl.backend.sim.instances) < ctl.num_instances
    assert len(ctl.backend.retired) <= len(ctl.models)  # stopped schedulers summed per model
