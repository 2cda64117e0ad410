"""How ``--perf-model engine`` prices a MoE prefill: gpt-oss's alternating attention and a
fused-MoE split that the chosen version's table did not measure (issue 28)."""

from __future__ import annotations

import polars as pl
import pytest

from tidal.hardware.engine_data import data_root, fallbacks, resolve_versions
from tidal.hardware.engine_perf import EnginePerfModel
from tidal.hardware.engine_tables import moe_us
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model

GPT_OSS = "openai/gpt-oss-120b"


def _moe_ms(system: str, version: str, tp: int, tokens: int) -> float:
    """One cell of the raw fused-MoE table: gpt-oss's shape, MXFP4, EP 1, power law 1.01."""
    path = data_root() / "data" / system / "moe" / "vllm" / version / "moe_perf.parquet"
    df = pl.read_parquet(path).filter(
        (pl.col("hidden_size") == 2880) & (pl.col("inter_size") == 2880)
        & (pl.col("topk") == 4) & (pl.col("num_experts") == 128)
        & (pl.col("moe_dtype") == "w4a16_mxfp4") & (pl.col("moe_tp_size") == tp)
        & (pl.col("moe_ep_size") == 1) & (pl.col("distribution") == "power_law_1.01")
        & (pl.col("num_tokens") == tokens)
    )  # fmt: skip
    return float(df["latency"].min())


def test_gpt_oss_prefill_attention_is_half_full_half_window_layers_of_the_table() -> None:
    """One 8,192-token prompt on H200, TP 1: 18 full layers at the context table's cell for
    (64 query heads, 8 KV heads, dim 64, bf16 KV, no window) and 18 at its window-128 cell:
    18 × 1.157915 ms + 18 × 0.184763 ms = 24.168 ms (vLLM 0.24's FA3 rows, batch 1)."""
    pm = EnginePerfModel(get_model(GPT_OSS), get_gpu("h200"), 1, "vllm", "0.18.0")
    assert pm.attn_prefill_s(8192, 8192, 1) == pytest.approx(24.168e-3, rel=1e-4)
    # a full layer alone would be 36 × 1.157915 = 41.7 ms; a window layer alone 6.65 ms
    assert 6.65e-3 < pm.attn_prefill_s(8192, 8192, 1) < 41.7e-3


def test_an_unmeasured_moe_split_takes_the_ratio_another_version_measured() -> None:
    """vLLM 0.19's H200 table holds gpt-oss at MoE TP 1 and 2 only; 0.24's holds TP 1–32.
    TP 4 is 0.19's TP 2 times 0.24's TP 4 / TP 2 at the same tokens, not half of TP 2 (which
    the tables show optimistic: H100's 0.24 rows put TP 4 at 1.12× and TP 8 at 1.37× TP 2
    scaled by group size, at 8,192 tokens)."""
    tp2, t4, t2 = (_moe_ms("h200_sxm", "0.19.0", 2, 8192), _moe_ms("h200_sxm", "0.24.0", 4, 8192),
                   _moe_ms("h200_sxm", "0.24.0", 2, 8192))  # fmt: skip
    assert (tp2, t4, t2) == pytest.approx((2.499686, 1.190579, 2.153619), rel=1e-5)
    want_us = 1e3 * 2.499686 * 1.190579 / 2.153619  # 1,381.9 µs; group-size scaling: 1,249.8
    ts = resolve_versions("h200_sxm", "vllm", "0.18.0")
    assert ts.family_version("moe") == "0.19.0"
    others = fallbacks(ts, "moe")[1:]
    got = moe_us(ts, "w4a16_mxfp4", 2880, 2880, 4, 128, 4, 1, ratio_from=others)
    assert got is not None
    (xs, ys), how = got
    assert how == "power_law_1.01/ratio tp2ep1->tp4ep1 of 0.24.0"
    assert ys[xs.index(8192.0)] == pytest.approx(want_us, rel=1e-6)
    alone = moe_us(ts, "w4a16_mxfp4", 2880, 2880, 4, 128, 4, 1)  # no other version to ask
    assert alone is not None
    assert alone[1] == "power_law_1.01/scaled from tp2ep1"
    assert alone[0][1][alone[0][0].index(8192.0)] == pytest.approx(1e3 * 2.499686 / 2, rel=1e-6)


def test_the_engine_model_names_the_ratio_it_used() -> None:
    pm = EnginePerfModel(get_model(GPT_OSS), get_gpu("h200"), 8, "vllm", "0.18.0")
    assert "ratio tp2ep1->tp8ep1 of 0.24.0" in pm.parts["moe"]
