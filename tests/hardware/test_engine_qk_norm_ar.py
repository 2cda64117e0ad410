"""MiniMax-M2's TP-wide qk-norm (vLLM's ``MiniMaxText01RMSNormTP.forward_qk``): at TP > 1 one
all-reduce a layer of the per-token q and k variances (2 fp32 values, 8 bytes a token), priced
from the engine's all-reduce table; none at TP 1 and none for a per-head qk-norm (Qwen3)."""

from __future__ import annotations

import pytest

from tidal.hardware.engine_deployment import TP_QK_NORM_ARCHITECTURES
from tidal.hardware.engine_perf import EngineDeployment, EnginePerfModel
from tidal.hardware.engine_tables import MOE_DISTRIBUTIONS, allreduce_us
from tidal.hardware.gpus import get_gpu
from tidal.hardware.interp import Curve
from tidal.hardware.models import ModelSpec, get_model

MINIMAX = get_model("MiniMaxAI/MiniMax-M2.5")


def _deployment(m: ModelSpec, tp: int, dp: int = 1) -> EngineDeployment:
    perf = EnginePerfModel(m, get_gpu("h200"), tp)
    return EngineDeployment(perf.tables, m, tp, False, MOE_DISTRIBUTIONS[0], perf.fb, dp)


def test_minimax_m2_is_a_tp_wide_qk_norm_model() -> None:
    assert MINIMAX.architecture in TP_QK_NORM_ARCHITECTURES
    assert get_model("qwen3-30b-a3b").architecture not in TP_QK_NORM_ARCHITECTURES


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tp_adds_one_all_reduce_of_8_bytes_a_token_a_layer(tp: int) -> None:
    ed = _deployment(MINIMAX, tp)
    pts = allreduce_us(ed.ts, tp)
    assert pts is not None
    ar = Curve(*pts)
    got = ed.qk_norm_allreduce()
    assert got is not None
    # e.g. 4 decode tokens: 32 bytes, below the table's smallest message: its latency floor
    for t, us in zip(ed.tokens, got, strict=True):
        assert us == pytest.approx(ar.at(8 * t), rel=1e-12)
    assert got[0] == pytest.approx(pts[1][0], rel=1e-12)
    lin = ed.linear()
    assert lin.layer_us["qk_norm_allreduce"] == got


def test_tp1_and_a_per_head_qk_norm_add_nothing() -> None:
    assert _deployment(MINIMAX, 1).qk_norm_allreduce() is None
    assert "qk_norm_allreduce" not in _deployment(MINIMAX, 1).linear().layer_us
    qwen = _deployment(get_model("qwen3-30b-a3b"), 4)
    assert qwen.qk_norm_allreduce() is None
    assert "qk_norm_allreduce" not in qwen.linear().layer_us


def test_the_step_grows_by_one_all_reduce_a_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A MiniMax-M2.5 decode step at TP 4 (16 requests, 2,048 tokens of context each) is
    L = 62 all-reduces of 16·8 = 128 bytes longer than the same step without them."""
    import tidal.hardware.engine_deployment as ed

    gpu, b, ctx = get_gpu("h200"), 16, 2048
    with_ar = EnginePerfModel(MINIMAX, gpu, 4).step_seconds(b, b * ctx, 0, 0, 0, 0)
    monkeypatch.setattr(ed, "TP_QK_NORM_ARCHITECTURES", frozenset())
    perf = EnginePerfModel(MINIMAX, gpu, 4)
    without = perf.step_seconds(b, b * ctx, 0, 0, 0, 0)
    pts = allreduce_us(perf.tables, 4)
    assert pts is not None
    assert MINIMAX.num_layers == 62
    assert with_ar - without == pytest.approx(62 * Curve(*pts).at(128) * 1e-6, rel=1e-6)
