"""Traces whose times or counts do not fit the simulator's integers end in a named error.

Before these fixes: a Mooncake ``timestamp`` of 1e13 ms, an augmented ``arrival_s`` of 1e13 and
an Azure row in year 2300 wrapped int64 nanoseconds into negative arrivals (exit 0, absurd
metrics); ``call_s: 1e10`` raised ``OverflowError``; ``input_length: 5.0`` or ``2**70`` gave
"unreadable JSON Lines" with no line number; ``tidal trace info`` crashed on the year-2300 file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tidal.cli import app
from tidal.core.errors import ConfigError, TraceError
from tidal.workload.augmented_jsonl import load_augmented_jsonl
from tidal.workload.build import build_workload
from tidal.workload.config import WorkloadConfig
from tidal.workload.traces import load_azure, load_mooncake

from .helpers import AZURE_HEADER, write


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    return write(path, "".join(json.dumps(r) + "\n" for r in rows))


def _mc(t: object, p: object = 10, o: object = 5) -> dict[str, object]:
    return {"timestamp": t, "input_length": p, "output_length": o}


def test_mooncake_timestamp_beyond_the_span_names_line_and_field(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_mc(0), _mc(1000), _mc(1e13)])
    with pytest.raises(TraceError, match=r"line 3, column 'timestamp'.*years"):
        load_mooncake(path)


def test_mooncake_blank_lines_keep_the_physical_line_number(tmp_path: Path) -> None:
    text = json.dumps(_mc(0)) + "\n\n\n" + json.dumps(_mc(1e13)) + "\n"
    with pytest.raises(TraceError, match=r"line 4, column 'timestamp'"):
        load_mooncake(write(tmp_path / "t.jsonl", text))


@pytest.mark.parametrize(
    ("value", "needle"),
    [(2**70, "input_length"), (1e30, "input_length"), (-1, "input_length"), ("7", "input_length")],
)
def test_mooncake_bad_length_names_its_line(tmp_path: Path, value: object, needle: str) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_mc(0), _mc(1, value)])
    with pytest.raises(TraceError, match=rf"line 2, column '{needle}'"):
        load_mooncake(path)


def test_mooncake_integral_floats_are_read_not_refused(tmp_path: Path) -> None:
    rs = load_mooncake(_jsonl(tmp_path / "t.jsonl", [_mc(0, 5.0, 3.0), _mc(2.5, 7, 1)]))
    assert rs.prompt_len.tolist() == [5, 7]
    assert rs.output_len.tolist() == [3, 1]
    assert rs.arrival_ns.tolist() == [0, 2_500_000]


def test_azure_row_in_year_2300_is_named(tmp_path: Path) -> None:
    text = AZURE_HEADER + "2023-11-16 10:00:00.0000000,10,5\n2300-01-01 00:00:00.0000000,10,5\n"
    path = write(tmp_path / "a.csv", text)
    with pytest.raises(TraceError, match=r"line 3, column 'TIMESTAMP'.*2300-01-01"):
        load_azure(path)


def test_azure_span_within_int64_but_beyond_the_limit_is_named(tmp_path: Path) -> None:
    """Year 2100 fits int64 ns but spans 77 years; the single odd row is the one named."""
    rows = "".join(f"2023-11-16 10:00:0{i}.0000000,10,5\n" for i in range(3))
    path = write(tmp_path / "a.csv", AZURE_HEADER + rows + "2100-01-01 00:00:00.0000000,1,1\n")
    with pytest.raises(TraceError, match=r"line 5, column 'TIMESTAMP'"):
        load_azure(path)


def test_azure_token_count_beyond_int32_is_named(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", AZURE_HEADER + "2023-11-16 10:00:00.0,9223372036854775807,5\n")
    with pytest.raises(TraceError, match=r"line 2, column 'ContextTokens'"):
        load_azure(path)


def _aug(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    return _jsonl(tmp_path / "aug.jsonl", rows)


def _seg(call_s: object = None) -> list[dict[str, object]]:
    if call_s is None:
        return [{"decode_tokens": 5}]
    return [{"decode_tokens": 5, "call_s": call_s, "return_tokens": 3}, {"decode_tokens": 4}]


def test_augmented_arrival_beyond_the_span_is_named(tmp_path: Path) -> None:
    rows = [
        {"prompt_tokens": 10, "segments": _seg(), "arrival_s": 0},
        {"prompt_tokens": 10, "segments": _seg(), "arrival_s": 1e13},
    ]
    with pytest.raises(TraceError, match=r"line 2, column 'arrival_s'"):
        load_augmented_jsonl(
            _aug(tmp_path, rows), np.random.default_rng(0), rate=None, num_requests=None
        )


def test_augmented_rate_scale_that_stretches_past_the_span_is_named(tmp_path: Path) -> None:
    rows = [
        {"prompt_tokens": 10, "segments": _seg(), "arrival_s": 0},
        {"prompt_tokens": 10, "segments": _seg(), "arrival_s": 1e6},
    ]
    with pytest.raises(TraceError, match=r"rate_scale 1e-05"):
        load_augmented_jsonl(
            _aug(tmp_path, rows),
            np.random.default_rng(0),
            rate=None,
            num_requests=None,
            rate_scale=1e-5,
        )


def test_augmented_call_too_long_is_named_not_overflow(tmp_path: Path) -> None:
    rows = [{"prompt_tokens": 10, "segments": _seg(1e10)}]
    with pytest.raises(TraceError, match=r"line 1, column 'segments\[0\]\.call_s'"):
        load_augmented_jsonl(
            _aug(tmp_path, rows), np.random.default_rng(0), rate=1.0, num_requests=None
        )


def test_augmented_calls_whose_sum_is_too_long_are_named(tmp_path: Path) -> None:
    seg = [{"decode_tokens": 1, "call_s": 9e8, "return_tokens": 0}] * 2 + [{"decode_tokens": 1}]
    with pytest.raises(TraceError, match=r"line 1, column 'segments'.*in all"):
        load_augmented_jsonl(
            _aug(tmp_path, [{"prompt_tokens": 1, "segments": seg}]),
            np.random.default_rng(0),
            rate=1.0,
            num_requests=None,
        )


def test_rate_scale_that_stretches_a_trace_past_the_span_is_a_config_error(
    tmp_path: Path,
) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_mc(0), _mc(1e9)])  # 1e6 s apart
    cfg = WorkloadConfig(trace=str(path), rate_scale=1e-4)
    with pytest.raises(ConfigError, match=r"workload\.rate_scale"):
        build_workload(cfg, np.random.default_rng(0))


def test_window_far_past_the_trace_is_empty_not_an_overflow(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", [_mc(0), _mc(10)])
    cfg = WorkloadConfig(trace=str(path), start_s=1e300)
    assert len(build_workload(cfg, np.random.default_rng(0))) == 0
    cfg = WorkloadConfig(trace=str(path), end_s=float("inf"))
    assert len(build_workload(cfg, np.random.default_rng(0))) == 2


def test_trace_info_on_the_year_2300_file_is_a_named_error(tmp_path: Path) -> None:
    text = AZURE_HEADER + "2023-11-16 10:00:00.0000000,10,5\n2300-01-01 00:00:00.0000000,10,5\n"
    path = write(tmp_path / "a.csv", text)
    res = CliRunner().invoke(app, ["trace", "info", str(path)])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "line 3" in text
    assert "TIMESTAMP" in text
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_trace_info_of_a_long_sparse_trace_needs_no_dense_bins(tmp_path: Path) -> None:
    """Three arrivals over ten years: 1-s bins K = ⌊span⌋ + 1, counts 2 and 1 (before: a
    K-sized bincount, 2.5 GB). IDC = (Σc²/K − m²)/m with m = 3/K."""
    ten_years_ms = 10 * 365 * 86400 * 1000
    path = _jsonl(tmp_path / "t.jsonl", [_mc(0), _mc(500), _mc(ten_years_ms)])
    res = CliRunner().invoke(app, ["trace", "info", str(path)])
    assert res.exit_code == 0, res.output
    import tracemalloc

    from tidal.workload.info import trace_info

    tracemalloc.start()
    try:
        info = trace_info(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20  # numpy's buffers are traced: no K-sized array
    k = ten_years_ms // 1000 + 1
    m = 3 / k
    assert info["idc_1s"] == pytest.approx((5 / k - m * m) / m, rel=1e-9)
    assert info["peak_to_mean_1s"] == pytest.approx(2 / m, rel=1e-9)


@settings(max_examples=40)
@given(st.lists(st.integers(0, 200 * 10**9), min_size=1, max_size=40), st.sampled_from([1, 10, 60]))
def test_sparse_bin_stats_equal_dense_bincount(times: list[int], width: int) -> None:
    from tidal.workload.info import bin_stats

    t = np.sort(np.array(times, dtype=np.int64))
    dense = np.bincount((t - t[0]) // (width * 10**9)).astype(np.float64)
    mean, var, peak = bin_stats(t, width)
    assert mean == pytest.approx(dense.mean(), rel=1e-12)
    assert var == pytest.approx(dense.var(), rel=1e-9, abs=1e-12)
    assert peak == dense.max()
