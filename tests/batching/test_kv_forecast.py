"""The state-conditioned KV forecast of EB⁺'s MB mode (``mb_cap: forecast``), by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tidal.batching.kv_forecast import KVForecast


def test_deterministic_outputs_admit_until_the_peak_fills_the_cache():
    # every output is 10 tokens: a new request of 5 prompt tokens holds 5 + s tokens (+1 for
    # the half block of block_size 2) for s < 10 and leaves at s = 10: peak 15 at s = 9
    fc = KVForecast(capacity_tokens=100, block_size=2, eps=0.01)
    fc.set_outputs(np.full(50, 10))
    assert list(fc.s) == list(range(11))
    fc.project([], [])
    admitted = sum(fc.admit(5) for _ in range(10))
    assert admitted == 6  # 6·15 = 90 ≤ 100 < 7·15
    assert fc.mean[9] == pytest.approx(90.0)
    assert fc.mean[10] == 0.0
    assert not fc.var.any()  # no uncertainty when every output is the same


def test_running_requests_are_conditioned_on_their_age():
    fc = KVForecast(capacity_tokens=10_000, block_size=2, eps=0.01)
    fc.set_outputs(np.full(50, 10))
    # 20 tokens held, 3 generated: leaves after 7 more steps; an old one (age 12 > every
    # sample) is assumed to run through the horizon
    fc.project([20, 40], [3, 12])
    s = np.arange(11)
    young = np.where(s < 7, 20 + s + 1, 0)
    old = 40 + s + 1
    assert np.allclose(fc.mean, young + old)


def test_margin_is_the_clt_term_of_the_bernoulli_survival():
    # outputs 5 or 15 with equal frequency: S(t) = 1 (t < 5), 1/2 (5 ≤ t < 15), 0 after
    eps = 0.05
    fc = KVForecast(capacity_tokens=10**6, block_size=2, eps=eps)
    fc.set_outputs(np.array([5, 15] * 20))
    fc.project([], [])
    assert fc.admit(100)
    i = int(np.searchsorted(fc.s, 10))
    s = fc.s[i]
    assert fc.mean[i] == pytest.approx((100 + s + 1) * 0.5)
    assert fc.var[i] == pytest.approx((100 + s) ** 2 * 0.25)
    z = math.sqrt(2 * math.log(1 / eps))  # Gaussian tail bound exp(-z²/2) = ε
    peak = max(m + z * math.sqrt(v) for m, v in zip(fc.mean, fc.var, strict=True))
    # a cache just below that peak refuses the same request
    tight = KVForecast(capacity_tokens=int(peak) - 1, block_size=2, eps=eps)
    tight.set_outputs(np.array([5, 15] * 20))
    tight.project([], [])
    assert not tight.admit(100)
    assert not tight.mean.any()  # a refusal leaves the projection unchanged


def test_resumed_request_is_conditioned_on_its_generated_tokens():
    fc = KVForecast(capacity_tokens=10_000, block_size=2, eps=0.01)
    fc.set_outputs(np.full(50, 10))
    fc.project([], [])
    assert fc.admit(30, age=8)  # 2 more steps to go
    s = np.arange(11)
    assert np.allclose(fc.mean, np.where(s < 2, 30 + s + 1, 0))


def test_room_counts_what_admit_would_accept_without_committing():
    fc = KVForecast(capacity_tokens=100, block_size=2, eps=0.01)
    fc.set_outputs(np.full(50, 10))
    fc.project([], [])
    assert fc.room([(5, 0)] * 10) == 6
    assert not fc.mean.any()
    # a resumed request close to its end fits after the six new ones
    assert fc.room([(5, 0)] * 6 + [(1, 9)]) == 7


def test_reserved_tokens_shrink_the_room():
    fc = KVForecast(capacity_tokens=100, block_size=2, eps=0.01)
    fc.set_outputs(np.full(50, 10))
    fc.project([], [], reserved_tokens=30)
    assert fc.room([(5, 0)] * 10) == 4  # 30 + 4·15 = 90 ≤ 100 < 105


def test_recent_outputs_lift_the_survival_only_when_they_are_longer():
    # 400 outputs of 10 then 100 of 30 (outputs got longer): the window says S(20) = 0.2,
    # the last 100 say 1 → S(20) = 1; 400 of 30 then 100 of 10 (shorter): the window's 0.8
    # stays (the last 100 say 0)
    longer = np.concatenate([np.full(400, 10), np.full(100, 30)])
    shorter = np.concatenate([np.full(400, 30), np.full(100, 10)])
    for outputs, recent, s20 in (
        (longer, 0, 0.2),
        (longer, 100, 1.0),
        (shorter, 100, 0.8),
        (longer, 500, 0.2),  # as long as the window: nothing more recent
    ):
        fc = KVForecast(capacity_tokens=10_000, block_size=2, eps=0.01)
        fc.set_outputs(outputs, recent)
        assert fc.surv is not None
        assert fc.surv[20] == pytest.approx(s20)
        assert fc.surv[5] == 1.0
        assert fc.surv[30] == 0.0
    # a cohort of new requests (5 tokens each, cache 1000): the window mixture admits as if
    # 80 % leave at step 10; the recent sample keeps every one of them to step 29 (peak 35)
    adm = {}
    for recent in (0, 100):
        fc = KVForecast(capacity_tokens=1000, block_size=2, eps=0.01)
        fc.set_outputs(longer, recent)
        fc.project([], [])
        adm[recent] = sum(fc.admit(5) for _ in range(100))
    assert adm[100] == 1000 // 35  # deterministic: 28 requests of peak 5 + 29 + 1 tokens
    assert adm[0] > adm[100]
