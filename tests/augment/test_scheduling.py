"""AugServe's ordering, anti-starvation, values and dynamic budget; the predictors."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from tests.augment.helpers import make, run, spec, workload
from tidal.augment.budget import DynamicBudget
from tidal.augment.ordering import ValueQueue
from tidal.augment.predictor import (
    NO_PREDICTION,
    PREDICTORS,
    Prediction,
    bucket_of,
    bucket_upper,
)
from tidal.augment.value import CostEnv, remaining_value, stage1_value
from tidal.augment.waste import IterationProfile
from tidal.core.request import Request

PROF = IterationProfile(alpha_s=5e-5, gamma_s=0.01, saturation_tokens=384)
ENV = CostEnv(PROF, 512, 2e-5, other_ctx=10_000)


def _req(rid: int, arrival: int = 0) -> Request:
    return Request(rid, arrival, 10, 10)


def test_value_queue_orders_by_value_then_promotes_the_starving():
    values = {1: 5.0, 2: 1.0, 3: 3.0}
    q = ValueQueue(starvation_ns=100)
    ready = {1: 0, 2: 50, 3: 60}
    q.bind(lambda r: (1.0, values[r.request_id], ready[r.request_id]))
    for rid in (1, 2, 3):
        q.push(_req(rid, arrival=rid))
    assert [r.request_id for r in q] == [2, 3, 1]
    q.refresh(99)
    assert q.peek().request_id == 2
    q.refresh(100)  # request 1 has waited τ: top tier
    assert [r.request_id for r in q] == [1, 2, 3]
    assert q.num_promoted == 1
    q.refresh(160)  # all starving: FCFS by arrival
    assert [r.request_id for r in q] == [1, 2, 3]
    q.remove(q.peek())
    assert [q.pop().request_id for _ in range(len(q))] == [2, 3]


def test_value_queue_serves_kv_resident_requests_before_the_starving():
    q = ValueQueue(starvation_ns=10)
    stage = {1: 1.0, 2: 0.0, 3: 1.0}
    q.bind(lambda r: (stage[r.request_id], float(r.request_id), 0))
    for rid in (1, 2, 3):
        q.push(_req(rid, arrival=rid))
    q.refresh(10)  # 1 and 3 starve; 2 holds its KV on the GPU
    assert [r.request_id for r in q] == [2, 1, 3]
    assert q.pop().request_id == 2
    assert q.peek().request_id == 1


def _starvation_run(starvation_ns: int, fcfs: float = 0.0, floor_ns: int = 0):
    """One expensive request among a stream of cheap ones that never lets the queue empty,
    one request at a time (max_seqs = 1), value order with the oracle; the fixed τ rule
    unless ``fcfs`` (κ of the FCFS-relative rule) is given."""
    n_short = 150
    arrivals = [0.0, 0.0005] + [0.001 + 0.005 * i for i in range(n_short)]
    prompts = [10, 10] + [10] * n_short
    specs = [spec(final=20), spec(final=400)] + [spec(final=20)] * n_short
    s = make(
        "augserve-ordering",
        max_seqs=1,
        predictor="oracle",
        starvation_ns=starvation_ns,
        starvation_fcfs=fcfs,
        starvation_floor_ns=floor_ns,
        checked=False,
    )
    rec, _ = run(workload(arrivals, prompts, specs), s)
    wait = (rec.first_scheduled_ns - rec.arrival_ns) / 1e9
    return wait, rec


def test_anti_starvation_bounds_the_wait_of_the_lowest_value_request():
    # a cheap request is served in 1 ms + 20 decode steps of ~1 ms: ~21 ms
    tau = 0.1
    wait, rec = _starvation_run(round(tau * 1e9))
    assert wait[1] <= tau + 0.025  # τ, then at most the running request's remaining service
    starved, _ = _starvation_run(0)  # 0 = off
    assert starved[1] > 1.0  # served only after the stream has drained
    assert starved[1] > 10 * wait[1]
    assert (rec.finish_ns >= 0).all()


def test_fcfs_relative_rule_bounds_the_wait_by_the_fcfs_wait_plus_the_floor():
    """The expensive request (arrival 0.5 ms) is due when the first cheap one overtakes it,
    after request 0's ~21 ms service (W_F ≈ 21 ms); with κ = 1 and F = 100 ms it is promoted
    at ≈ 121 ms and served after the running request: wait ≤ F + 2 services."""
    wait, rec = _starvation_run(0, fcfs=1.0, floor_ns=100_000_000)
    assert wait[1] <= 0.1 + 0.05
    assert wait[1] >= 0.1  # not before the floor
    assert (rec.finish_ns >= 0).all()


def test_value_order_serves_cheap_requests_first():
    # four requests at t = 0, one at a time: the first starts at once (the instance is idle
    # when it arrives), the other three go shortest-first under the oracle value order
    outs = [300, 20, 120, 60]
    rs = workload([0.0] * 4, [50] * 4, [spec(final=g) for g in outs])
    s = make("augserve-ordering", max_seqs=1, predictor="oracle", checked=False)
    rec, _ = run(rs, s)
    assert list(np.argsort(rec.first_scheduled_ns)) == [0, 1, 3, 2]
    fcfs = make("infercept", max_seqs=1, predictor="oracle", checked=False)
    rec, _ = run(rs, fcfs)
    assert list(np.argsort(rec.first_scheduled_ns, kind="stable")) == [0, 1, 2, 3]


def test_time_form_value_by_hand():
    # no calls: It·(⌈P/N⌉ + G) with It = 5e-5·512 + 0.01 = 0.0356 s
    pred = Prediction(50.0, (), ())
    assert stage1_value(pred, 100, ENV, form="time") == pytest.approx(0.0356 * (1 + 50))
    # memory-time: It·⌈P/N⌉·P + It·G·(P + G/2)
    assert stage1_value(pred, 100, ENV) == pytest.approx(0.0356 * 100 + 0.0356 * 50 * 125)


def test_proposition_one_returned_tokens_weigh_one_over_n_of_decoded_ones():
    # time form: adding 512 returned tokens costs what one more decoded token costs
    # (Â/N iterations vs one iteration per decoded token), apart from the call itself
    base = Prediction(64.0, (0.0,), (0.0,))
    more_ret = Prediction(64.0, (0.0,), (512.0,))
    more_dec = Prediction(65.0, (0.0,), (0.0,))
    v0, vr, vd = (stage1_value(p, 100, ENV, form="time") for p in (base, more_ret, more_dec))
    assert vr - v0 == pytest.approx(vd - v0)


def test_values_grow_with_work_and_shrink_as_it_is_done():
    small = Prediction(64.0, (1.0,), (32.0,))
    big = Prediction(512.0, (1.0, 20.0), (32.0, 64.0))
    assert stage1_value(small, 200, ENV) < stage1_value(big, 200, ENV)
    v1 = stage1_value(big, 200, ENV)
    # after the first call returned (256 generated, 32 returned tokens pending)
    v2 = remaining_value(
        big, prompt=200, context=488, pending=33, generated=256, calls_done=1, env=ENV
    )
    assert v2 < v1
    # Stage II re-buckets a request that outgrew its prediction
    v3 = remaining_value(
        small, prompt=200, context=300, pending=1, generated=100, calls_done=1, env=ENV
    )
    assert v3 > 0
    assert (
        remaining_value(
            NO_PREDICTION, prompt=1, context=1, pending=1, generated=0, calls_done=0, env=ENV
        )
        == 0.0
    )


def test_dynamic_budget_formula():
    kv = SimpleNamespace(num_free_blocks=300, watermark_blocks=10, block_size=16)
    s = SimpleNamespace(
        kv=kv, paused_gpu_blocks=lambda: 50, pool=[None] * 40, last_pressure_ns=-1, _now=0
    )
    b = DynamicBudget(b_min=384, b_max=8192, reserve=1000, growth_factor=0)
    # the spec's form: (300 − 10)·16 + 50·16 − 40 − 1000 = 4640 + 800 − 1040 = 4400
    assert b.budget(s) == 4400
    kv.num_free_blocks = 20  # memory pressure: clipped at B_min
    assert b.budget(s) == 384
    kv.num_free_blocks = 5000  # lots of memory: clipped at B_max
    assert b.budget(s) == 8192


def test_buckets():
    assert bucket_of(1) == 0
    assert bucket_of(63) == 0
    assert bucket_of(64) == 1
    assert bucket_of(1000) == 4
    assert bucket_upper(100) == 128


def _specs(n: int, rng: np.random.Generator):
    out = []
    for _ in range(n):
        k = int(rng.integers(0, 4))
        segs = [(int(rng.integers(1, 300)), float(rng.uniform(1, 5000)), 10) for _ in range(k)]
        out.append(spec(*segs, final=int(rng.integers(1, 300))))
    return out


def test_oracle_and_noisy_predictors():
    rng = np.random.default_rng(1)
    specs = _specs(4000, rng)
    reqs = [Request(i, 0, 10, s.total_decode, payload=s) for i, s in enumerate(specs)]
    oracle = PREDICTORS.get("oracle")(0)
    p = oracle.predict(reqs[0])
    assert p.output_tokens == specs[0].total_decode
    assert p.num_calls == specs[0].num_calls
    noisy = PREDICTORS.get("noisy")(7, p=0.8, sigma=0.3)
    right, ratios = 0, []
    for r, sp in zip(reqs, specs, strict=True):
        q = noisy.predict(r)
        right += bucket_of(q.output_tokens) == bucket_of(sp.total_decode)
        ratios += [q.call_s[k] / (c.duration_ns / 1e9) for k, c in enumerate(sp.calls)]
    assert right / len(reqs) == pytest.approx(0.8, abs=0.03)
    logs = np.log(ratios)
    assert abs(logs.mean()) < 0.02
    assert logs.std() == pytest.approx(0.3, abs=0.02)
    # same (seed, request) → same prediction, whatever the order of the questions
    assert noisy.predict(reqs[5]) == PREDICTORS.get("noisy")(7).predict(reqs[5])
    assert PREDICTORS.get("none")(0).predict(reqs[0]) is NO_PREDICTION


def test_mean_predictor_learns_per_tool_call_times():
    sp = spec((5, 1000.0, 10), final=5, tool=1)  # qa
    req = Request(0, 0, 10, 10, payload=sp)
    mean = PREDICTORS.get("mean")(0)
    prior = mean.call_s(req, mean.predict(req), 0)
    assert prior == pytest.approx(0.72)  # the QA type's mean
    for _ in range(99):
        mean.observe_call(req, 10.0, 10)
    assert mean.call_s(req, mean.predict(req), 0) == pytest.approx((0.72 + 99 * 10) / 100)
    assert math.isfinite(mean.predict(req).output_tokens)
