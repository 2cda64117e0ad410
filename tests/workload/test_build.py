"""build_workload: order and exact semantics of window, rate scale, request limit and caps."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest

from tidal.workload.build import build_workload
from tidal.workload.config import WorkloadConfig

from .helpers import mooncake_rows, write

S = 1_000_000_000


def _build(trace: Path, **kw) -> tuple[list[float], list[int], list[int], str]:
    rs = build_workload(WorkloadConfig(trace=str(trace), **kw), np.random.default_rng(0))
    return (list(rs.arrival_ns / S), rs.prompt_len.tolist(), rs.output_len.tolist(), rs.source)


def test_plain_replay(five_azure: Path) -> None:
    t, p, o, source = _build(five_azure)
    assert t == [0, 1, 2.5, 4, 10]
    assert p == [10, 20, 30, 40, 50]
    assert o == [5, 6, 7, 8, 9]
    assert source == f"azure:{five_azure}"


def test_window_rebases_to_window_start(five_azure: Path) -> None:
    t, p, _, source = _build(five_azure, start_s=1, end_s=4)
    assert t == [0, 1.5]  # rows at 1 and 2.5 s; 4 s is excluded
    assert p == [20, 30]
    assert "window [1, 4) s" in source
    t, p, _, _ = _build(five_azure, start_s=2)
    assert t == [0.5, 2, 8]  # the gap from the window start is kept
    assert p == [30, 40, 50]


def test_rate_scale_divides_times(five_azure: Path) -> None:
    t, _, _, source = _build(five_azure, rate_scale=2)
    assert t == [0, 0.5, 1.25, 2, 5]
    assert "rate x2" in source
    t, _, _, _ = _build(five_azure, rate_scale=0.5)
    assert t == [0, 2, 5, 8, 20]


def test_window_applies_before_scaling(five_azure: Path) -> None:
    t, p, _, _ = _build(five_azure, start_s=1, end_s=10, rate_scale=2)
    assert t == [0, 0.75, 1.5]
    assert p == [20, 30, 40]


def test_max_requests_after_window(five_azure: Path) -> None:
    t, p, _, source = _build(five_azure, start_s=2, max_requests=2)
    assert t == [0.5, 2]
    assert p == [30, 40]
    assert source.endswith("first 2")
    t, _, _, source = _build(five_azure, max_requests=10)
    assert len(t) == 5
    assert "first" not in source


def test_length_caps(five_azure: Path) -> None:
    _, p, o, source = _build(five_azure, max_prompt_len=25, max_output_len=6)
    assert p == [10, 20, 25, 25, 25]
    assert o == [5, 6, 6, 6, 6]
    assert source.endswith("prompt ≤ 25; output ≤ 6")
    _, p, _, source = _build(five_azure, max_prompt_len=1000)
    assert p == [10, 20, 30, 40, 50]
    assert "≤" not in source


def test_all_steps_together(five_azure: Path) -> None:
    t, p, o, source = _build(
        five_azure,
        start_s=1,
        end_s=11,
        rate_scale=4,
        max_requests=3,
        max_prompt_len=35,
        max_output_len=7,
    )
    assert t == [0, 0.375, 0.75]
    assert p == [20, 30, 35]
    assert o == [6, 7, 7]
    assert source == (
        f"azure:{five_azure}; window [1, 11) s; rate x4; first 3; prompt ≤ 35; output ≤ 7"
    )


def test_empty_window(five_azure: Path) -> None:
    t, _, _, _ = _build(five_azure, start_s=20, end_s=30)
    assert t == []


def test_mooncake_trace(tmp_path: Path) -> None:
    f = write(tmp_path / "m.jsonl", mooncake_rows([(0, 5, 6), (3000, 7, 8), (6000, 9, 10)]))
    t, p, _, _ = _build(f, end_s=6, rate_scale=3)
    assert t == [0, 1]
    assert p == [5, 7]


# --- synthetic ----------------------------------------------------------------------------


def _synthetic(seed: int = 0, **kw):
    return build_workload(WorkloadConfig(**kw), np.random.default_rng(seed))


def test_synthetic_defaults() -> None:
    rs = _synthetic(num_requests=1000, rate=10.0)
    assert len(rs) == 1000
    assert rs.arrival_ns[0] == 0
    assert np.all(rs.prompt_len == 512)
    assert np.all(rs.output_len == 256)
    assert rs.source.startswith("synthetic: 1000 requests, poisson at 10 req/s")


def test_synthetic_rate_scale_multiplies_rate() -> None:
    rs = _synthetic(num_requests=50_000, rate=10.0, rate_scale=2.0, arrival_cv=2.0)
    rate = (len(rs) - 1) / rs.span_s
    assert rate == pytest.approx(20.0, rel=5 * 2 / math.sqrt(len(rs)))


def test_synthetic_closed_loop_and_inf() -> None:
    assert np.all(_synthetic(num_requests=5, concurrency=2).arrival_ns == 0)
    assert np.all(_synthetic(num_requests=5, rate=math.inf).arrival_ns == 0)


def test_synthetic_window_caps_and_limit() -> None:
    rs = _synthetic(
        num_requests=10_000,
        rate=10.0,
        start_s=100,
        end_s=200,
        max_requests=500,
        length_dist="lognormal",
        max_prompt_len=600,
        max_output_len=300,
    )
    assert len(rs) == 500
    assert rs.arrival_ns[-1] < 100 * S
    assert rs.prompt_len.max() == 600
    assert rs.output_len.max() == 300


def test_synthetic_deterministic() -> None:
    kw = {"num_requests": 2000, "rate": 4.0, "arrival_cv": 3.0, "length_dist": "uniform"}
    a, b, c = _synthetic(1, **kw), _synthetic(1, **kw), _synthetic(2, **kw)
    assert np.array_equal(a.arrival_ns, b.arrival_ns)
    assert np.array_equal(a.prompt_len, b.prompt_len)
    assert np.array_equal(a.output_len, b.output_len)
    assert not np.array_equal(a.arrival_ns, c.arrival_ns)


def test_servegen_config(traces: Path) -> None:
    cfg = WorkloadConfig(
        trace="servegen_language_m-small_trace_csv.tar.gz",
        start_s=72000,
        end_s=72600,
        rate_scale=0.01,
        max_requests=1000,
        max_output_len=10,
    )
    rs = build_workload(cfg, np.random.default_rng(0))
    assert len(rs) == 1000
    assert rs.arrival_ns.max() < 600 * S
    assert rs.output_len.max() <= 10
    assert "client" in rs.extra
    assert "client rates x0.01" in rs.source


def test_speed(traces: Path) -> None:
    t0 = time.perf_counter()
    rs = _synthetic(num_requests=1_000_000, rate=100.0, arrival_cv=2.0, length_dist="lognormal")
    t1 = time.perf_counter()
    conv = build_workload(
        WorkloadConfig(trace="AzureLLMInferenceTrace_conv.csv.gz"), np.random.default_rng(0)
    )
    t2 = time.perf_counter()
    assert len(rs) == 1_000_000
    assert len(conv) == 19_366
    assert t1 - t0 < 1.0
    assert t2 - t1 < 1.0
