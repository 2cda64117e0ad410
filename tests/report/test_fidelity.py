"""Per-request fidelity errors, computed by hand on small runs."""

from __future__ import annotations

import numpy as np
import pytest

from tidal.experiments.fidelity_metrics import fidelity_summary, relative_errors

MS = 1_000_000


def _cols(first_ms, finish_ms, outputs):
    n = len(first_ms)
    return {
        "arrival_ns": np.zeros(n, dtype=np.int64),
        "first_scheduled_ns": np.zeros(n, dtype=np.int64),
        "first_token_ns": np.array(first_ms, dtype=np.int64) * MS,
        "finish_ns": np.array(finish_ms, dtype=np.int64) * MS,
        "output_tokens": np.array(outputs, dtype=np.int64),
    }


def test_relative_errors_per_request():
    real = _cols([10, 20, 40, 10], [110, 120, 140, 10], [11, 11, 11, 1])
    sim = _cols([11, 18, 40, 12], [111, 138, 130, 12], [11, 11, 11, 1])
    e = relative_errors(real, sim)
    np.testing.assert_allclose(e["ttft"], [0.1, -0.1, 0.0, 0.2])
    # TPOT = (finish − first)/(outputs − 1): real 10 ms each, sim 10, 12, 9 ms;
    # the one-token output has no TPOT
    np.testing.assert_allclose(e["tpot"], [0.0, 0.2, -0.1])
    np.testing.assert_allclose(e["e2e"], [1 / 110, 18 / 120, -10 / 140, 0.2])


def test_summary_statistics():
    real = _cols([10, 20, 40, 10], [110, 120, 140, 10], [11, 11, 11, 1])
    sim = _cols([11, 18, 40, 12], [111, 138, 130, 12], [11, 11, 11, 1])
    s = fidelity_summary(real, sim)
    assert s["ttft_median_rel_error"] == pytest.approx(0.1)  # |e| = .1 .1 0 .2
    assert s["ttft_p90_rel_error"] == pytest.approx(np.percentile([0.1, 0.1, 0.0, 0.2], 90))
    assert s["ttft_median_signed_error"] == pytest.approx(0.05)
    assert s["tpot_median_rel_error"] == pytest.approx(0.1)
    assert s["tpot_num_requests"] == 3
    # percentile shift: both TTFT medians are 15 ms; P90 (linear interpolation) 34 vs 33.4 ms
    assert s["ttft_p50_real_s"] == pytest.approx(0.015)
    assert s["ttft_p50_shift"] == pytest.approx(0.0)
    assert s["ttft_p90_real_s"] == pytest.approx(0.034)
    assert s["ttft_p90_sim_s"] == pytest.approx(0.0334)
    assert s["ttft_p90_shift"] == pytest.approx(-0.6 / 34)


def test_unfinished_requests_are_left_out():
    real = _cols([10, 20], [110, -1], [11, 11])
    real["first_token_ns"][1] = -1
    sim = _cols([10, 20], [110, 120], [11, 11])
    assert fidelity_summary(real, sim)["ttft_num_requests"] == 1
