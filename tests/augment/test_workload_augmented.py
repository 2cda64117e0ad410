"""Augmented workloads: the six INFERCEPT types, the call-time families, the context cap, the
JSONL format and its errors, and the workload metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.augment.helpers import spec
from tidal.core.augmented_metrics import augmented_metrics, normalized_latency_s
from tidal.core.errors import ConfigError, TraceError
from tidal.workload.augmented import (
    AUGMENTATION_TYPES,
    call_times_s,
    cap_context,
    generate_mixture,
    parse_types,
    sample_request,
)
from tidal.workload.augmented_jsonl import load_augmented_jsonl
from tidal.workload.build import build_workload
from tidal.workload.config import WorkloadConfig


@pytest.mark.parametrize("name", list(AUGMENTATION_TYPES))
def test_each_type_matches_its_table_statistics(name):
    kind = AUGMENTATION_TYPES[name]
    rng = np.random.default_rng(3)
    samples = [sample_request(kind, rng) for _ in range(3000)]
    ctx = np.array([s.total_context(p) for p, s in samples])
    calls = np.array([s.num_calls for _, s in samples])
    call_s = np.concatenate([[c.duration_ns / 1e9 for c in s.calls] for _, s in samples])
    assert ctx.mean() == pytest.approx(kind.mean_context, rel=0.03)
    assert calls.mean() == pytest.approx(kind.mean_calls, rel=0.03)
    assert call_s.mean() == pytest.approx(kind.mean_call_s, rel=0.05)
    assert kind.expected_context() == pytest.approx(kind.mean_context, rel=0.015)


@pytest.mark.parametrize(
    ("family", "mean"),
    [
        ("N", 11.0),  # |Normal(11, 3)|: the fold is negligible
        ("U", 10.05),  # Uniform(0.1, 20)
        ("R", 2.0),  # Gamma(0.5, 4): mean k·θ
        ("L", 18.0),  # |20 − R|: 20 − 2 (R > 20 has probability ~1e-6)
        ("B", 10.0),  # half L, half R
    ],
)
def test_call_time_families(family, mean):
    x = call_times_s(family, 200_000, np.random.default_rng(0))
    assert (x >= 0).all()
    assert x.mean() == pytest.approx(mean, rel=0.02)


def test_bimodal_family_is_bimodal():
    x = call_times_s("B", 100_000, np.random.default_rng(1))
    assert ((x > 5) & (x < 15)).mean() < 0.2  # little mass in the middle


@given(
    prompt=st.integers(1, 3000),
    segs=st.lists(st.tuples(st.integers(1, 300), st.integers(0, 300)), max_size=8),
    final=st.integers(1, 300),
    cap=st.integers(2, 2048),
)
def test_cap_context_fits_and_keeps_a_prefix(prompt, segs, final, cap):
    s = spec(*[(g, 1.0, a) for g, a in segs], final=final)
    p2, s2 = cap_context(prompt, s, cap)
    assert s2.total_context(p2) <= cap
    assert s2.calls == s.calls[: s2.num_calls]
    assert p2 == min(prompt, cap - 1) or s.total_context(prompt) <= cap
    if s.total_context(prompt) <= cap:
        assert (p2, s2) == (prompt, s)


def test_mixture_is_uniform_over_types_and_reproducible():
    types = parse_types("infercept-mix")
    a = generate_mixture(types, 3000, 2.0, np.random.default_rng(5))
    b = generate_mixture(types, 3000, 2.0, np.random.default_rng(5))
    assert a.payloads == b.payloads
    np.testing.assert_array_equal(a.arrival_ns, b.arrival_ns)
    counts = np.bincount(a.extra["tool"], minlength=6)[:6]
    assert counts.min() > 0.13 * 3000
    assert (a.prompt_len + a.output_len + a.extra["return_tokens"]).max() <= 2048
    gaps = np.diff(a.arrival_ns) / 1e9
    assert gaps.mean() == pytest.approx(0.5, rel=0.06)
    with pytest.raises(ConfigError, match=r"workload\.augmented"):
        parse_types("infercept:nope")


def _write(tmp_path, lines):
    p = tmp_path / "w.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


NATIVE = {
    "prompt_tokens": 100,
    "tool": "qa",
    "segments": [
        {"decode_tokens": 4, "call_s": 0.5, "return_tokens": 20},
        {"decode_tokens": 3},
    ],
}
INFERCEPT = {
    "experiments": [
        {"prompt_tokens": 100, "completion_tokens": 4, "api_time": 0.5, "api_token_length": 20},
        {"prompt_tokens": 124, "completion_tokens": 3},
    ]
}


def test_jsonl_native_and_infercept_forms_agree(tmp_path):
    p = _write(tmp_path, [json.dumps(NATIVE), json.dumps(INFERCEPT)])
    rs = load_augmented_jsonl(p, np.random.default_rng(0), rate=1.0, num_requests=None)
    a, b = rs.payloads
    assert a.calls == b.calls == spec((4, 500.0, 20), final=3).calls
    assert a.tool == 1
    assert b.tool == 6
    assert rs.prompt_len.tolist() == [100, 100]
    assert rs.output_len.tolist() == [7, 7]
    assert rs.extra["call_ns"].tolist() == [500_000_000] * 2


def test_jsonl_replays_arrival_times_and_samples_without_them(tmp_path):
    lines = [json.dumps({**NATIVE, "arrival_s": t}) for t in (5.0, 5.5, 7.0)]
    rs = load_augmented_jsonl(_write(tmp_path, lines), None, rate=None, num_requests=None)
    assert rs.arrival_ns.tolist() == [0, 500_000_000, 2_000_000_000]
    cfg = WorkloadConfig(
        augmented=f"augmented:{_write(tmp_path, [json.dumps(NATIVE)])}", rate=2.0, num_requests=50
    )
    rs = build_workload(cfg, np.random.default_rng(0))
    assert len(rs) == 50  # sampled with replacement


@pytest.mark.parametrize(
    ("line", "field", "message"),
    [
        ("{not json", None, "not valid JSON"),
        (json.dumps({"segments": [{"decode_tokens": 1}]}), "prompt_tokens", "missing"),
        (json.dumps({**NATIVE, "prompt_tokens": 0}), "prompt_tokens", "≥ 1"),
        (json.dumps({**NATIVE, "tool": "fax"}), "tool", "unknown tool"),
        (
            json.dumps({"prompt_tokens": 5, "segments": [{"decode_tokens": 2, "call_s": 1}]}),
            "segments[0].call_s",
            "no call",
        ),
        (
            json.dumps(
                {
                    "prompt_tokens": 5,
                    "segments": [{"call_s": 1, "return_tokens": 2}, {"decode_tokens": 1}],
                }
            ),
            "segments[0].decode_tokens",
            "missing",
        ),
        (
            json.dumps(
                {
                    "prompt_tokens": 5,
                    "segments": [
                        {"decode_tokens": 2, "call_s": -1, "return_tokens": 2},
                        {"decode_tokens": 1},
                    ],
                }
            ),
            "call_s",
            "seconds ≥ 0",
        ),
        (json.dumps({"prompt_tokens": 5, "segments": []}), "segments", "non-empty"),
    ],
)
def test_malformed_lines_name_file_line_and_field(tmp_path, line, field, message):
    p = _write(tmp_path, [json.dumps(NATIVE), "", line])
    with pytest.raises(TraceError) as err:
        load_augmented_jsonl(p, np.random.default_rng(0), rate=1.0, num_requests=None)
    text = str(err.value)
    assert str(p) in text
    assert "line 3" in text
    if field is not None:
        assert field in text
    assert message in text


def test_mixed_or_decreasing_arrivals_are_refused(tmp_path):
    p = _write(tmp_path, [json.dumps({**NATIVE, "arrival_s": 1}), json.dumps(NATIVE)])
    with pytest.raises(TraceError, match=r"line 2.*arrival_s"):
        load_augmented_jsonl(p, None, rate=1.0, num_requests=None)
    p = _write(tmp_path, [json.dumps({**NATIVE, "arrival_s": t}) for t in (2, 1)])
    with pytest.raises(TraceError, match=r"line 2.*decrease"):
        load_augmented_jsonl(p, None, rate=None, num_requests=None)
    p = _write(tmp_path, [json.dumps(NATIVE)])
    with pytest.raises(ConfigError, match="rate"):
        load_augmented_jsonl(p, None, rate=None, num_requests=None)


def test_normalized_latency_and_effective_throughput_by_hand():
    s = 1_000_000_000
    cols = {
        "arrival_ns": np.array([0, 1 * s, 2 * s]),
        "first_token_ns": np.array([s // 2, 4 * s, -1]),
        "finish_ns": np.array([10 * s, 11 * s, -1]),
        "output_tokens": np.array([30, 10, 0]),
        "return_tokens": np.array([20, 0, 0]),
        "call_ns": np.array([5 * s, 0, 0]),
        "num_calls": np.array([2, 0, 1]),
    }
    norm = normalized_latency_s(cols)
    # (10 − 0 − 5)/(30 + 20) = 0.1 s; (11 − 1 − 0)/10 = 1 s; unfinished: NaN
    assert norm[:2].tolist() == pytest.approx([0.1, 1.0])
    assert np.isnan(norm[2])
    m = augmented_metrics(cols, slo_ttft_s=1.0)
    # only request 0 meets TTFT ≤ 1 s; makespan 0 → 11 s
    assert m["effective_throughput"] == pytest.approx(1 / 11)
    assert m["effective_slo_attainment"] == pytest.approx(1 / 3)
    assert m["normalized_latency_p50_s"] == pytest.approx(0.55)
    assert augmented_metrics(cols, 5.0, slo_norm_latency_s=0.5)["effective_throughput"] == (
        pytest.approx(1 / 11)
    )
    assert m["calls_completed"] == 2
