"""A measured ``requests.parquet`` as a trace gets the other loaders' checks (issue 32 §7).

Before: a null or NaN ``arrival_ns`` became int64 min (duration 9.2e9 s, TTFT −3.1e9 s); an
arrival of 2^62 was never served; float columns were truncated; ``success: "no"`` read as
true; a string column raised a traceback.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tidal.core.errors import TraceError
from tidal.workload.measured import load_measured, measured_columns


def _frame(**over: object) -> pl.DataFrame:
    cols: dict[str, object] = {
        "arrival_ns": [0, 10, 20],
        "prompt_len": [5, 6, 7],
        "finish_ns": [100, 110, 120],
        "output_tokens": [3, 4, 5],
        "success": [True, True, True],
    }
    cols.update(over)
    return pl.DataFrame(cols)


def _write(tmp_path: Path, df: pl.DataFrame) -> Path:
    path = tmp_path / "requests.parquet"
    df.write_parquet(path)
    return path


def test_a_good_file_loads(tmp_path: Path) -> None:
    rs = load_measured(_write(tmp_path, _frame()))
    assert rs.arrival_ns.tolist() == [0, 10, 20]
    assert rs.output_len.tolist() == [3, 4, 5]


@pytest.mark.parametrize(
    ("column", "values", "needle"),
    [
        ("arrival_ns", [0, None, 20], r"row 2, column 'arrival_ns': expected an integer, got null"),
        ("arrival_ns", [0.0, float("nan"), 20.0], r"column 'arrival_ns': expected an integer col"),
        ("arrival_ns", [0, 2**62, 20], r"row 2, column 'arrival_ns': expected ns in \[0, "),
        ("arrival_ns", [0, -5, 20], r"row 2, column 'arrival_ns'"),
        ("prompt_len", [5.0, 6.7, 7.0], r"column 'prompt_len': expected an integer column"),
        ("prompt_len", ["5", "6", "7"], r"column 'prompt_len': expected an integer column"),
        ("prompt_len", [5, 2**40, 7], r"row 2, column 'prompt_len'"),
        ("output_tokens", [3, 2**40, 5], r"row 2, column 'output_tokens'"),
        ("finish_ns", [100, 5, 120], r"row 2, column 'finish_ns': a request finishes before"),
        ("success", ["yes", "no", "yes"], r"column 'success': expected a boolean column"),
        ("success", [True, None, True], r"row 2, column 'success'"),
        ("first_token_ns", [1, -7, 3], r"row 2, column 'first_token_ns'"),
    ],
)
def test_a_bad_value_or_type_is_named(tmp_path: Path, column, values, needle) -> None:
    path = _write(tmp_path, _frame(**{column: values}))
    with pytest.raises(TraceError, match=needle):
        load_measured(path)
    with pytest.raises(TraceError, match=needle):
        measured_columns(path)


def test_failed_rows_are_left_out_not_checked_for_lengths(tmp_path: Path) -> None:
    """A failed request (success false, finish −1, 0 tokens) may have any prompt_len."""
    df = _frame(
        prompt_len=[5, 0, 7], finish_ns=[100, -1, 120], output_tokens=[3, 0, 5],
        success=[True, False, True],
    )
    rs = load_measured(_write(tmp_path, df))
    assert rs.extra["source_row"].tolist() == [0, 2]


def test_unsigned_and_narrow_integers_are_read(tmp_path: Path) -> None:
    df = _frame().with_columns(
        pl.col("arrival_ns").cast(pl.UInt64), pl.col("prompt_len").cast(pl.Int32)
    )
    rs = load_measured(_write(tmp_path, df))
    assert rs.prompt_len.dtype == np.int64
    assert rs.prompt_len.tolist() == [5, 6, 7]
    big = _frame(arrival_ns=pl.Series([0, 2**64 - 1, 3], dtype=pl.UInt64))
    with pytest.raises(TraceError, match=r"row 2, column 'arrival_ns'"):
        load_measured(_write(tmp_path, big))
