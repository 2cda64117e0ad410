"""The engine tables' collectives: ``message_size`` counts elements, the step model prices bytes."""

from __future__ import annotations

import polars as pl
import pytest

from tidal.hardware.engine_data import nccl_table, resolve_versions, table
from tidal.hardware.engine_tables import _message_bytes, allreduce_us, nccl_us


def _bus_gbps(nbytes: float, us: float, gpus: int) -> float:
    """NCCL's bus bandwidth of an all-reduce: 2(n − 1)/n of the algorithm bandwidth."""
    return nbytes / (us * 1e-6) * 2 * (gpus - 1) / gpus / 1e9


def test_allreduce_points_are_the_tables_elements_times_two_bytes() -> None:
    ts = resolve_versions("h100_sxm", "vllm")
    df = table(ts, "comm", "custom_allreduce_perf.parquet")
    assert df is not None
    assert set(df["allreduce_dtype"].unique()) == {"bfloat16"}
    xs, us = allreduce_us(ts, 8)  # type: ignore[misc]
    sizes = sorted(df.filter(pl.col("num_gpus") == 8)["message_size"].unique().to_list())
    assert xs == [2.0 * s for s in sizes]
    # 2^28 bf16 elements across 8 H100s: NVLink 4 / NVSwitch bus bandwidth, not half of it
    i = xs.index(2.0 * 2**28)
    assert 350 < _bus_gbps(xs[i], us[i], 8) < 900


def test_nccl_points_are_bytes_and_reach_nvswitch_bandwidth() -> None:
    xs, us = nccl_us("h100_sxm", "all_reduce", 8)  # type: ignore[misc]
    df = nccl_table("h100_sxm")
    assert df is not None
    half = df.filter((pl.col("op_name") == "all_reduce") & (pl.col("num_gpus") == 8)
                     & (pl.col("nccl_dtype") == "half"))  # fmt: skip
    assert xs == [2.0 * s for s in sorted(half["message_size"].unique().to_list())]
    assert 350 < _bus_gbps(xs[-1], us[-1], 8) < 900


def test_element_widths_follow_the_dtype_column_and_refuse_unknown_ones() -> None:
    df = pl.DataFrame({"message_size": [10, 10, 10], "d": ["half", "int8", "float32"]})
    assert _message_bytes(df, "d")["message_size"].to_list() == [20, 10, 40]
    assert _message_bytes(df.drop("d"), "d")["message_size"].to_list() == [20, 20, 20]
    with pytest.raises(ValueError, match="element size unknown"):
        _message_bytes(pl.DataFrame({"message_size": [1], "d": ["fp6"]}), "d")
