"""Trace loaders on the real files and on small hand-made files, including malformed ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tidal.core.errors import ConfigError, TraceError
from tidal.workload.traces import (
    detect_format,
    load_azure,
    load_mooncake,
    load_trace,
    tick_ms_of,
)

from .helpers import AZURE_HEADER, azure_rows, mooncake_rows, write

AZURE_CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz"
AZURE_CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"
MOON_CONV = "mooncake_fast25/conversation_trace.jsonl.gz"
MOON_SYN = "mooncake_fast25/synthetic_trace.jsonl.gz"


# --- real files ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rows", "span_s"),
    [
        (AZURE_CONV, 19_366, 3501.721937),
        (AZURE_CODE, 8_819, 3435.948056),
        (MOON_CONV, 12_031, 3536.999),
        (MOON_SYN, 3_993, 1022.025),
    ],
)
def test_real_trace_shape(traces: Path, name: str, rows: int, span_s: float) -> None:
    rs = load_trace(traces / name)
    assert len(rs) == rows
    assert rs.arrival_ns[0] == 0
    assert np.all(np.diff(rs.arrival_ns) >= 0)
    assert rs.span_s == pytest.approx(span_s, abs=1e-6)
    assert rs.prompt_len.min() >= 1
    assert rs.output_len.min() >= 1
    assert rs.arrival_ns.dtype == np.int64
    assert rs.prompt_len.dtype == np.int64


def test_azure_first_rows_exact(traces: Path) -> None:
    rs = load_azure(traces / AZURE_CONV)
    # 18:15:46.6805900, 18:15:50.9951690, 18:15:51.2224670
    assert list(rs.arrival_ns[:3]) == [0, 4_314_579_000, 4_541_877_000]
    assert list(rs.prompt_len[:3]) == [374, 396, 879]
    assert list(rs.output_len[:3]) == [44, 109, 55]
    assert rs.source.startswith("azure:")


def test_mooncake_ticks(traces: Path) -> None:
    rs = load_mooncake(traces / MOON_CONV)
    assert len(np.unique(rs.arrival_ns)) == 1180
    assert tick_ms_of(rs.arrival_ns / 1e6) == 3000


def test_mooncake_spread_ticks(traces: Path) -> None:
    plain = load_mooncake(traces / MOON_CONV)
    spread = load_mooncake(traces / MOON_CONV, spread_ticks=True, rng=np.random.default_rng(0))
    assert len(np.unique(spread.arrival_ns)) > 12_000
    assert np.all(np.diff(spread.arrival_ns) >= 0)
    assert spread.arrival_ns[0] >= 0
    assert spread.arrival_ns[-1] < plain.arrival_ns[-1] + 3_000_000_000
    # Each request moves by U·3 s: the mean moves by 1.5 s (sd of the mean ≈ 0.008 s).
    shift = (spread.arrival_ns.mean() - plain.arrival_ns.mean()) / 1e9
    assert shift == pytest.approx(1.5, abs=0.05)
    with pytest.raises(ValueError, match="random generator"):
        load_mooncake(traces / MOON_CONV, spread_ticks=True)


def test_mooncake_spread_small(tmp_path: Path) -> None:
    f = write(
        tmp_path / "m.jsonl",
        mooncake_rows(
            [(0, 1, 1), (0, 2, 1), (3000, 3, 1), (3000, 4, 1), (3000, 5, 1), (6000, 6, 1)]
        ),
    )
    rs = load_mooncake(f, spread_ticks=True, rng=np.random.default_rng(5))
    assert list(np.bincount(rs.arrival_ns // 3_000_000_000)) == [2, 3, 1]
    assert "3000 ms" in rs.source


def test_detect_real_formats(traces: Path) -> None:
    assert detect_format(traces / AZURE_CONV) == "azure"
    assert detect_format(traces / MOON_SYN) == "mooncake"
    assert (
        detect_format(traces / "servegen/servegen_language_m-small_trace_csv.tar.gz") == "servegen"
    )
    with pytest.raises(ConfigError, match="length_dist"):
        detect_format(traces / "length_distributions/bwb_stats_llama2_tokenizer_filtered_v2.csv.gz")


# --- small files --------------------------------------------------------------------------


def test_azure_timestamps_exact_to_100ns(tmp_path: Path) -> None:
    f = write(
        tmp_path / "a.csv.gz",
        azure_rows(
            [
                ("10:00:00.0000001", 1, 1),
                ("10:00:00.0000002", 1, 1),
                ("10:00:01", 1, 1),
                ("23:59:59.9999999", 1, 1),
            ]
        ),
    )
    rs = load_azure(f)
    assert list(rs.arrival_ns) == [0, 100, 999_999_900, 50_399_999_999_800]


def test_azure_unsorted_rows_sorted_stably(tmp_path: Path) -> None:
    f = write(
        tmp_path / "a.csv",
        azure_rows(
            [
                ("10:00:02.0000000", 1, 1),
                ("10:00:01.0000000", 2, 2),
                ("10:00:02.0000000", 3, 3),
                ("10:00:00.5000000", 4, 4),
            ]
        ),
    )
    rs = load_azure(f)
    assert list(rs.arrival_ns) == [0, 500_000_000, 1_500_000_000, 1_500_000_000]
    assert list(rs.prompt_len) == [4, 2, 1, 3]


def test_azure_blank_lines_ignored(tmp_path: Path) -> None:
    f = write(
        tmp_path / "a.csv",
        AZURE_HEADER + "2023-11-16 10:00:00.0,5,6\n\n2023-11-16 10:00:01.0,7,8\n",
    )
    assert list(load_azure(f).prompt_len) == [5, 7]


def test_mooncake_small(tmp_path: Path) -> None:
    f = write(tmp_path / "m.jsonl", mooncake_rows([(1000, 5, 6), (1000, 7, 8), (4000.5, 9, 10)]))
    rs = load_mooncake(f)
    assert list(rs.arrival_ns) == [0, 0, 3_000_500_000]
    assert list(rs.prompt_len) == [5, 7, 9]
    assert list(rs.output_len) == [6, 8, 10]


@pytest.mark.parametrize(
    ("name", "text", "fmt"),
    [
        ("x.csv", AZURE_HEADER + "2023-11-16 10:00:00.0,5,6\n", "azure"),
        ("x.txt", AZURE_HEADER + "2023-11-16 10:00:00.0,5,6\n", "azure"),
        ("x.jsonl.gz", mooncake_rows([(0, 1, 1)]), "mooncake"),
        ("x.log", mooncake_rows([(0, 1, 1)]), "mooncake"),
        ("chunk-3-trace.csv", "0,1,1,Gamma,1,1\n", "servegen"),
    ],
)
def test_detect_small(tmp_path: Path, name: str, text: str, fmt: str) -> None:
    assert detect_format(write(tmp_path / name, text)) == fmt


def test_detect_unknown(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="trace_format"):
        detect_format(write(tmp_path / "x.csv", "a,b\n1,2\n"))


# --- malformed rows -----------------------------------------------------------------------


AZ_OK = "2023-11-16 10:00:00.0000000,5,6\n"


@pytest.mark.parametrize(
    ("body", "line", "column"),
    [
        (AZ_OK + "2023-11-16 10:00:01.0000000,abc,6\n", 3, "ContextTokens"),
        (AZ_OK + AZ_OK + "2023-11-16 10:00:01.0000000,5,-6\n", 4, "GeneratedTokens"),
        (AZ_OK + "2023-11-16 10:00:01.0000000,0,6\n", 3, "ContextTokens"),
        (AZ_OK + "2023-11-16 10:00:01.0000000,5,\n", 3, "GeneratedTokens"),
        (AZ_OK + "2023-13-16 10:00:01.0000000,5,6\n", 3, "TIMESTAMP"),
        (AZ_OK + "yesterday,5,6\n", 3, "TIMESTAMP"),
        (AZ_OK + "\n" + "2023-11-16 10:00:01.0000000,5.5,6\n", 4, "ContextTokens"),
    ],
)
def test_azure_malformed(tmp_path: Path, body: str, line: int, column: str) -> None:
    f = write(tmp_path / "bad.csv.gz", AZURE_HEADER + body)
    with pytest.raises(TraceError) as err:
        load_azure(f)
    assert str(err.value).startswith(f"{f}, line {line}, column {column!r}: ")


def test_azure_missing_column(tmp_path: Path) -> None:
    f = write(tmp_path / "bad.csv", "TIMESTAMP,ContextTokens\n2023-11-16 10:00:00.0,5\n")
    with pytest.raises(TraceError, match=r"line 1, column 'GeneratedTokens': missing column"):
        load_azure(f)


def test_azure_ragged_row(tmp_path: Path) -> None:
    f = write(tmp_path / "bad.csv", AZURE_HEADER + AZ_OK + AZ_OK + "2023-11-16 10:00:00,1,2,3\n")
    with pytest.raises(TraceError, match=r"line 4: expected 3 fields, found 4"):
        load_azure(f)


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ('{"timestamp": 0, "input_length": "x", "output_length": 1}', "input_length"),
        ('{"timestamp": 0, "input_length": 2, "output_length": -1}', "output_length"),
        ('{"timestamp": 0, "input_length": 2.5, "output_length": 1}', "input_length"),
        ('{"timestamp": -5, "input_length": 2, "output_length": 1}', "timestamp"),
        ('{"timestamp": 0, "output_length": 1}', "input_length"),
        ('{"timestamp": 0, "input_length": 2, "output_length": 1', None),
    ],
)
def test_mooncake_malformed(tmp_path: Path, row: str, column: str | None) -> None:
    good = mooncake_rows([(0, 1, 1), (5, 2, 2)])
    f = write(tmp_path / "bad.jsonl", good + "\n" + row + "\n")
    with pytest.raises(TraceError) as err:
        load_mooncake(f)
    where = f"{f}, line 4" + (f", column {column!r}" if column else "")
    assert str(err.value).startswith(where + ": ")
