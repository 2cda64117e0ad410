"""How ``--perf-model engine`` prices a MoE prefill: gpt-oss's alternating attention, and a
fused-MoE split that the chosen version's table did not measure (issue 28)."""

from __future__ import annotations

import polars as pl
import pytest

from tidal.hardware.engine_data import data_root, resolve_versions
from tidal.hardware.engine_perf import EnginePerfModel
from tidal.hardware.engine_tables import gemm_us
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


def test_an_unmeasured_moe_tp_degree_comes_from_the_two_nearest_and_says_so() -> None:
    """vLLM 0.19's H200 table (read by 0.19.0 itself: other versions read the newest since
    the version rule) holds gpt-oss at MoE TP 1 and 2 only: TP 4 is read through both,
    t(g) = a + b/g (``tp4 from tp1,tp2``), not as TP 2's time halved, which the tables show
    optimistic at prefill sizes (vLLM 0.24's H100 rows: TP 4 at 1.12× and TP 8 at 1.37× TP 2
    so scaled, 8,192 tokens; ``test_engine_moe_tp_degree``: the two-point rule on held-out
    TP 8 rows)."""
    tp2 = _moe_ms("h100_sxm", "0.24.0", 2, 8192)
    assert _moe_ms("h100_sxm", "0.24.0", 4, 8192) / (tp2 / 2) == pytest.approx(1.1229, rel=1e-3)
    assert _moe_ms("h100_sxm", "0.24.0", 8, 8192) / (tp2 / 4) == pytest.approx(1.3687, rel=1e-3)
    pm = EnginePerfModel(get_model(GPT_OSS), get_gpu("h200"), 4, "vllm", "0.19.0")
    assert pm.parts["moe"].endswith("/tp4 from tp1,tp2/tp4ep1")
    layer = pm.dep.linear.layer_us["mlp"][pm.dep.linear.tokens.index(8192)]
    t1, t2 = (1e3 * _moe_ms("h200_sxm", "0.19.0", g, 8192) for g in (1, 2))
    b = (t1 - t2) / (1 - 1 / 2)
    want = min(max(t2 - b / 2 + b / 4, t2 / 2), t2)  # between TP 2 halved and TP 2
    got = gemm_us(resolve_versions("h200_sxm", "vllm", "0.19.0"), "bfloat16", 128, 2880)
    assert got is not None
    router = got[1][got[0].index(8192.0)]  # the router GEMM (N = 128 experts, K = 2880)
    assert layer == pytest.approx(want + router, rel=1e-6)
    assert want > t2 / 2
