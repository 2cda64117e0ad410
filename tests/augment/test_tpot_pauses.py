"""TPOT of augmented (tool-calling) requests leaves out the tool calls' time: a request waiting
on a tool is out of the engine, not decoding (core/metrics.py). ``tpot_incl_pauses_*`` keeps
vLLM's whole-request formula. Hand-worked columns, a property over random ones (every path —
per-request, streamed summary, p95 — agrees), and a simulated run."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidal.core.augmented_metrics import augmented_metrics
from tidal.core.metrics import request_latencies, summarize
from tidal.sim.cluster_metrics import latency_p95
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

S = 10**9


def _cols(first, finish, out, call) -> dict[str, np.ndarray]:
    n = len(first)
    a = np.asarray
    return {
        "arrival_ns": np.zeros(n, dtype=np.int64),
        "first_scheduled_ns": np.zeros(n, dtype=np.int64),
        "first_token_ns": a(first, dtype=np.int64),
        "finish_ns": a(finish, dtype=np.int64),
        "output_tokens": a(out, dtype=np.int64),
        "prompt_len": np.full(n, 100, dtype=np.int64),
        "num_preemptions": np.zeros(n, dtype=np.int64),
        "call_ns": a(call, dtype=np.int64),
        "num_calls": (a(call) > 0).astype(np.int64),
        "return_tokens": np.zeros(n, dtype=np.int64),
    }


def test_a_hand_worked_request() -> None:
    """First token at 1 s, last at 11 s, 11 tokens, one 5 s call between: 0.5 s per token
    decoding (the 5 s left over 10 gaps), 1.0 s with the call."""
    cols = _cols([1 * S], [11 * S], [11], [5 * S])
    assert request_latencies(cols)["tpot_s"][0] == pytest.approx(0.5)
    m = summarize(cols, slo_ttft_s=2.0, slo_tpot_s=0.6)
    assert m["tpot_p50_s"] == pytest.approx(0.5)
    assert m["slo_attainment"] == 1.0  # 0.5 s ≤ 0.6 s: the call does not miss the SLO
    aug = augmented_metrics(cols, slo_ttft_s=2.0)
    assert aug["tpot_incl_pauses_p50_s"] == pytest.approx(1.0)
    assert latency_p95(cols)["tpot_p95_s"] == pytest.approx(0.5)


@given(
    st.lists(
        st.tuples(
            st.integers(0, 10 * S),  # first token
            st.integers(0, 10 * S),  # decoding time
            st.integers(0, 10 * S),  # time on calls
            st.integers(1, 2000),  # output tokens
            st.booleans(),  # finished
        ),
        min_size=1,
        max_size=40,
    )
)
def test_tpot_times_the_gaps_plus_the_calls_is_the_decode_span(rows) -> None:
    first = [r[0] for r in rows]
    finish = [r[0] + r[1] + r[2] if r[4] else -1 for r in rows]
    out = [r[3] for r in rows]
    call = [r[2] for r in rows]
    cols = _cols(first, finish, out, call)
    tpot = request_latencies(cols)["tpot_s"]
    for i, (_, d, _, n, done) in enumerate(rows):
        if not done or n <= 1:
            assert np.isnan(tpot[i])
            continue
        assert tpot[i] == pytest.approx(d / S / (n - 1))
    many = ~np.isnan(tpot)
    m = summarize(cols, 2.0, 0.2, rows=7)  # streamed in chunks
    aug = augmented_metrics(cols, 2.0)
    if not many.any():
        assert m["tpot_mean_s"] is None
        return
    assert m["tpot_mean_s"] == pytest.approx(float(np.mean(tpot[many])))
    assert m["tpot_p99_s"] == pytest.approx(float(np.percentile(tpot[many], 99)))
    incl = [(r[1] + r[2]) / S / (r[3] - 1) for r in rows if r[4] and r[3] > 1]
    assert aug["tpot_incl_pauses_mean_s"] == pytest.approx(float(np.mean(incl)))
    assert latency_p95(cols, rows=5)["tpot_p95_s"] == pytest.approx(
        float(np.percentile(tpot[many], 95))
    )


def test_a_simulated_augmented_run_reports_both() -> None:
    cfg = load_config(
        {
            "model": "qwen3-8b", "gpu": "h100", "perf_model": "roofline", "seed": 1,
            "workload": {"augmented": "infercept-mix", "num_requests": 40, "rate": 2},
        }
    )  # fmt: skip
    res = run_simulation(cfg)
    m, c = res.metrics, res.columns
    done = (c["finish_ns"] >= 0) & (c["output_tokens"] > 1)
    paused = done & (c["call_ns"] > 0)
    assert paused.sum() > 5
    span = (c["finish_ns"] - c["first_token_ns"])[done] / 1e9 / (c["output_tokens"][done] - 1)
    assert m["tpot_incl_pauses_mean_s"] == pytest.approx(float(span.mean()))
    assert m["tpot_mean_s"] < m["tpot_incl_pauses_mean_s"]
    decode = (c["finish_ns"] - c["first_token_ns"] - c["call_ns"])[done]
    assert (decode > 0).all()  # every call lies between the first and the last token
    assert m["tpot_mean_s"] == pytest.approx(
        float((decode / 1e9 / (c["output_tokens"][done] - 1)).mean())
    )
