"""A MoE TP degree the tables lack (MiniMax-M2.5 at MoE TP 8: the tables hold TP 1, 2, 4) is
read through the two nearest measured degrees, t(g) = a + b/g token count by token count,
instead of halving TP 4's time: the fused-MoE layer's fixed part does not shrink with TP."""

from __future__ import annotations

import polars as pl
import pytest

from tidal.hardware.engine_data import data_root, resolve_versions
from tidal.hardware.engine_tables import _tp_two_point, moe_us


def _table(rows: list[tuple[int, int, float]]) -> pl.DataFrame:
    """(moe_tp, num_tokens, latency ms) rows of one distribution, no EP."""
    return pl.DataFrame(
        {"moe_tp_size": [r[0] for r in rows], "moe_ep_size": [1] * len(rows),
         "num_tokens": [r[1] for r in rows], "latency": [r[2] for r in rows],
         "distribution": ["balanced"] * len(rows)}
    )  # fmt: skip


def test_two_points_give_a_fixed_and_a_sharded_part() -> None:
    # t(2) = 0.10 ms, t(4) = 0.06 ms: b = 0.04 / (1/2 - 1/4) = 0.16, a = 0.06 - 0.04 = 0.02,
    # t(8) = 0.02 + 0.02 = 0.04 ms (halving TP 4 would say 0.03 ms)
    got = _tp_two_point(_table([(2, 4, 0.10), (4, 4, 0.06)]), 8, ["balanced"])
    assert got is not None
    (xs, ys), how = got
    assert xs == [4.0]
    assert ys[0] == pytest.approx(40.0)
    assert how == "balanced/tp8 from tp2,tp4"


def test_the_estimate_stays_between_no_change_and_the_group_ratio() -> None:
    # t(2) = 0.10, t(4) = 0.02: a = -0.06 < 0 would give t(8) < 0; kept at 0.02·4/8 = 0.01
    got = _tp_two_point(_table([(2, 4, 0.10), (4, 4, 0.02)]), 8, ["balanced"])
    assert got is not None
    assert got[0][1][0] == pytest.approx(10.0)
    # t(2) = t(4): nothing shrinks with TP, so TP 8 costs the same
    flat = _tp_two_point(_table([(2, 4, 0.05), (4, 4, 0.05)]), 8, ["balanced"])
    assert flat is not None
    assert flat[0][1][0] == pytest.approx(50.0)
    assert _tp_two_point(_table([(4, 4, 0.05)]), 8, ["balanced"]) is None


def test_minimax_at_moe_tp_8_on_h200() -> None:
    ts = resolve_versions("h200_sxm", "vllm", "0.24.0")
    got = moe_us(ts, "fp8_block", 3072, 1536, 8, 256, 8, 1, "power_law_1.01")
    assert got is not None
    (xs, ys), how = got
    assert how == "power_law_1.01/tp8 from tp2,tp4"
    two = moe_us(ts, "fp8_block", 3072, 1536, 8, 256, 2, 1, "power_law_1.01")
    four = moe_us(ts, "fp8_block", 3072, 1536, 8, 256, 4, 1, "power_law_1.01")
    assert two is not None
    assert four is not None
    i, j, k = xs.index(4.0), two[0][0].index(4.0), four[0][0].index(4.0)
    t2, t4 = two[0][1][j], four[0][1][k]  # 86.6 and 63.3 µs at 4 tokens
    b = (t2 - t4) / (1 / 2 - 1 / 4)
    assert ys[i] == pytest.approx(t4 - b / 4 + b / 8)  # 51.6 µs, not 63.3 / 2
    assert 0.5 * t4 < ys[i] < t4


def test_held_out_tp_8_rows_are_predicted_from_tp_2_and_4() -> None:
    """The rule checked on the tables alone: every (shape, dtype, routing, tokens) cell of vLLM
    0.24's H100 MoE table measured at TP 2, 4 and 8 (no EP), TP 8 predicted from TP 2 and 4:
    median |error| 4.6 % over 3,807 cells, where halving TP 4 is 17.7 % off (too fast)."""
    path = data_root() / "data" / "h100_sxm" / "moe" / "vllm" / "0.24.0" / "moe_perf.parquet"
    keys = ["moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "distribution",
            "num_tokens"]  # fmt: skip
    df = pl.read_parquet(path).filter(pl.col("moe_ep_size") == 1)
    g = df.group_by([*keys, "moe_tp_size"]).agg(pl.col("latency").min())
    p = g.pivot(on="moe_tp_size", index=keys, values="latency").drop_nulls(["2", "4", "8"])
    assert p.height > 1000
    two, half = [], []
    for t2, t4, t8 in zip(p["2"], p["4"], p["8"], strict=True):
        got = _tp_two_point(_table([(2, 1, t2), (4, 1, t4)]), 8, ["balanced"])
        assert got is not None
        two.append(abs(got[0][1][0] / (1e3 * t8) - 1))
        half.append(abs(t4 / 2 / t8 - 1))
    two.sort()
    half.sort()
    assert two[len(two) // 2] < 0.06
    assert half[len(half) // 2] > 0.15
