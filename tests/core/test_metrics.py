"""Metrics on hand-made per-request columns."""

from __future__ import annotations

import numpy as np
import pytest

from tidal.core.metrics import summarize, weighted_percentiles

S = 1_000_000_000


def cols(arrival, first, finish, out, prompt=None):
    n = len(arrival)
    return {
        "arrival_ns": np.array(arrival, dtype=np.int64),
        "first_scheduled_ns": np.array(arrival, dtype=np.int64),
        "first_token_ns": np.array(first, dtype=np.int64),
        "finish_ns": np.array(finish, dtype=np.int64),
        "output_tokens": np.array(out, dtype=np.int64),
        "prompt_len": np.array(prompt or [10] * n, dtype=np.int64),
        "num_preemptions": np.zeros(n, dtype=np.int64),
    }


def test_latencies_throughput_and_goodput_by_hand():
    c = cols(
        arrival=[0, 1 * S, 2 * S, 3 * S],
        first=[1 * S, 2 * S, 6 * S, -1],
        finish=[2 * S, 5 * S, 7 * S, -1],
        out=[11, 31, 2, 0],
    )
    m = summarize(c, slo_ttft_s=2.0, slo_tpot_s=0.05)
    assert m["num_requests"] == 4
    assert m["num_completed"] == 3
    # TTFT 1, 1, 4 s; TPOT 1/10 = 0.1, 3/30 = 0.1, 1/1 = 1.0 s.
    assert m["ttft_p50_s"] == pytest.approx(1.0)
    assert m["ttft_mean_s"] == pytest.approx(2.0)
    assert m["tpot_p50_s"] == pytest.approx(0.1)
    assert m["duration_s"] == pytest.approx(7.0)
    assert m["request_throughput"] == pytest.approx(3 / 7)
    assert m["token_throughput"] == pytest.approx((30 + 44) / 7)
    # No request meets TPOT ≤ 50 ms; with 150 ms the first two meet both SLOs.
    assert m["goodput"] == 0.0
    m2 = summarize(c, slo_ttft_s=2.0, slo_tpot_s=0.15)
    assert m2["goodput"] == pytest.approx(2 / 7)
    assert m2["slo_attainment"] == pytest.approx(2 / 4)


def test_weighted_percentiles_invert_the_cdf():
    v = np.array([10, 20, 30])
    w = np.array([1, 1, 8])
    assert weighted_percentiles(v, w, (10, 20, 50, 99)) == [10.0, 20.0, 30.0, 30.0]


def test_log_histogram_percentiles_within_bin_width():
    import numpy as np

    from tidal.core.histogram import LogHistogram

    rng = np.random.default_rng(0)
    values = rng.integers(1_000_000, 200_000_000, 50_000)
    weights = rng.integers(1, 300, 50_000)
    h = LogHistogram()
    for v, w in zip(values[:1000].tolist(), weights[:1000].tolist(), strict=True):
        h.add(v, w)
    for w in np.unique(weights[1000:]):
        h.add_many(values[1000:][weights[1000:] == w], int(w))
    exact = weighted_percentiles(values, weights, (50, 90, 99))
    for got, want in zip(h.percentiles((50, 90, 99)), exact, strict=True):
        assert abs(got - want) / want < 1 / 256
    assert h.total_weight == weights.sum()
