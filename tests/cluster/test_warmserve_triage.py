"""WarmServe's past-capacity triage (issue 18, H200 Llama-3 conv 64 req/s: the 70B's three
TP-4 instances held 12 of 16 GPUs at their need while the 8Bs, completing ~8× more requests
per GPU, waited 10–17 s at P99 behind them; ServerlessLLM's qwen3-8b 9.3 s). Built from that
setting on one node of three GPUs: model 0 runs at its need on two instances and completes
nothing (the sparse model), model 1 runs one instance at B, completes requests quickly and
its queue waits. The overload fallback is off here."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from tests.cluster.helpers import FakeBackend
from tidal.cluster.config import ClusterConfig
from tidal.cluster.controller import ClusterController
from tidal.cluster.instance import State
from tidal.cluster.policies.warmserve_triage import ServiceDensity
from tidal.core.request import Request

S = 1_000_000_000


def test_density_is_the_decayed_completions_over_the_decayed_gpu_seconds():
    """τ = 10 s, two GPUs held from 0, finishes at 5 s and 10 s: at 10 s
    C = e^{-1/2} + 1 and G = 2·τ·(1 − e^{-1}) GPU-seconds."""
    inst = SimpleNamespace(gpus=(0, 1))
    view = SimpleNamespace(models=[0], serving=[[inst]])
    d = ServiceDensity(view, 10.0)  # type: ignore[arg-type]
    d.finished(0, 5 * S)
    d.finished(0, 10 * S)
    want = (math.exp(-0.5) + 1) / (2 * 10 * (1 - math.exp(-1)))
    assert d.density(0) == pytest.approx(want, rel=1e-12)


def test_donor_is_the_sparsest_model_with_two_instances_and_the_ratio_gates_it():
    one, two = [SimpleNamespace(gpus=(0,))], [SimpleNamespace(gpus=(0,))] * 2
    view = SimpleNamespace(models=[0, 1, 2], serving=[two, one, two])
    d = ServiceDensity(view, 10.0)  # type: ignore[arg-type]
    d.advance(10 * S)
    d.done = [1.0, 9.0, 2.0]  # per GPU: 0.5, 9, 1 (models 0 and 2 hold two GPUs)
    assert d.donor(1, set(), 2.0) == 0
    assert d.donor(1, {0}, 2.0) == 2  # a starved model is no donor
    d.done = [1.0, 9.0, 0.9]  # per GPU: 0.5, 9, 0.45
    assert d.donor(1, set(), 2.0) == 2
    assert d.donor(1, set(), 20.0) == 2  # 9 / 0.45 = 20
    assert d.donor(1, set(), 20.5) is None
    assert d.donor(0, set(), 2.0) is None  # model 1 has one instance; 0.5 < 2 · 0.45
    d.done = [0.0, 0.0, 0.0]
    assert d.donor(1, set(), 2.0) is None  # no rate of its own yet


def _ctl(**ws):
    cfg = ClusterConfig(
        spec="1x3:h100", models=["llama-2-7b", "llama-2-7b"], placement="warmserve", batch=2,
        warmserve={"disable": ["forecast"], "overload_fallback": False, **ws},
    )  # fmt: skip
    be = FakeBackend()
    model_of = np.array([0] * 4 + [1] * 996 + [0] * 100, dtype=np.int64)  # request id → model
    ctl = ClusterController(cfg, be, model_of)
    ctl.start()
    return be, ctl


def _contention(be, ctl, model0_churns: bool) -> int:
    """Model 0: 4 in flight on two instances (need ⌈4 / 1.6⌉ = 3 ≥ 2: not over-held). Model
    1: one instance at B = 2 that completes both its requests every 0.5 s from 10 to 20 s
    (4 requests per GPU-second; model 0 none, or with ``model0_churns`` as many: its four
    every 0.5 s on two GPUs). At 20 s two more model-1 requests queue behind a full
    instance and nothing finishes. Returns 20 s."""
    m0 = [Request(i, 0, 16, 4) for i in range(4)]
    for r in m0:
        ctl.on_arrival(r, 0)
    nxt = 4
    live = [Request(nxt, 0, 16, 4), Request(nxt + 1, 0, 16, 4)]
    nxt += 2
    for r in live:
        ctl.on_arrival(r, 0)
    be.run(until=10 * S)
    assert [len(ctl.serving[m]) for m in (0, 1)] == [2, 1]
    assert all(i.state == State.READY for insts in ctl.serving for i in insts)
    for k in range(20):
        t = 10 * S + k * S // 2
        be.run(until=t)
        for r in live:
            ctl.on_finish(r, t)
        live = [Request(nxt, t, 16, 4), Request(nxt + 1, t, 16, 4)]
        nxt += 2
        for r in live:
            ctl.on_arrival(r, t)
        if model0_churns:
            for r in m0:
                ctl.on_finish(r, t)
            m0 = [Request(1000 + 4 * k + i, t, 16, 4) for i in range(4)]
            for r in m0:
                ctl.on_arrival(r, t)
    t = 20 * S
    be.run(until=t)
    for i in range(2):
        ctl.on_arrival(Request(nxt + i, t, 16, 4), t)
    return t


def test_the_sparse_model_gives_the_starved_dense_model_one_instance():
    """No model is above its need, so the guard alone hands nothing back; triage stops one of
    model 0's instances at the first period past ``triage_wait_s`` (10 s), not before; when
    its requests finish model 1 acquires the freed GPU."""
    be, ctl = _ctl()
    t = _contention(be, ctl, model0_churns=False)
    be.run(until=t + 10 * S - 1)
    guard = ctl.policy.guard
    assert guard.fired == 0
    be.run(until=t + 10 * S + S // 2)
    assert guard.fired == 1
    assert guard.triaged == 1
    assert len(ctl.serving[0]) == 1
    (gone,) = [i for i in ctl.live.values() if i.state == State.STOPPING]
    assert gone.model.index == 0
    assert gone.inflight == 2
    for rid in [rid for e, rid, _ in be.delivered if e == gone.engine and rid < 4]:
        ctl.on_finish(Request(rid, 0, 16, 4), t + 11 * S)
    be.run(until=t + 11 * S)
    assert len(ctl.serving[0]) == 1
    assert len(ctl.serving[1]) == 2


def test_without_triage_sustained_contention_hands_nothing_back():
    be, ctl = _ctl(triage_ratio=0)
    t = _contention(be, ctl, model0_churns=False)
    be.run(until=t + 30 * S)
    assert ctl.policy.guard.fired == 0
    assert len(ctl.serving[0]) == 2
    assert len(ctl.serving[1]) == 1


def test_models_of_equal_density_trade_nothing():
    """Both models complete 4 requests per GPU-second: at ``triage_ratio`` 1.5 nothing moves;
    at 0.5 (a trade that may cost requests) model 0 gives one instance."""
    be, ctl = _ctl(triage_ratio=1.5)
    t = _contention(be, ctl, model0_churns=True)
    be.run(until=t + 30 * S)
    assert ctl.policy.guard.fired == 0
    be, ctl = _ctl(triage_ratio=0.5)
    t = _contention(be, ctl, model0_churns=True)
    be.run(until=t + 11 * S)
    assert ctl.policy.guard.triaged == 1
