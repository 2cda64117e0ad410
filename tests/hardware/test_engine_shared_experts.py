"""Shared experts on a second CUDA stream (issue 29): up to the engine's token threshold a MoE
layer with shared experts costs max(router + routed experts, shared experts), above it the sum
(vLLM's ``VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD`` 256, SGLang's
``DUAL_STREAM_TOKEN_THRESHOLD`` 1024), as AIConfigurator prices the decode step."""

from __future__ import annotations

from functools import lru_cache

import pytest

from tidal.hardware.corrected import CorrectedRooflinePerfModel
from tidal.hardware.engine_data import resolve_versions
from tidal.hardware.engine_perf import (
    SHARED_EXPERTS_STREAM_TOKENS,
    EngineDeployment,
    EnginePerfModel,
)
from tidal.hardware.engine_tables import MOE_DISTRIBUTIONS
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model

MODEL = "deepseek-ai/DeepSeek-V3"


@lru_cache(maxsize=4)
def deployment(engine: str, tp: int = 8) -> EngineDeployment:
    m, gpu = get_model(MODEL), get_gpu("b200")
    fb = CorrectedRooflinePerfModel(m, gpu, tp)
    ts = resolve_versions("b200_sxm", engine, None)
    return EngineDeployment(ts, m, tp, False, MOE_DISTRIBUTIONS[0], fb)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_moe_layer_is_the_max_up_to_the_threshold_and_the_sum_above(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tidal.hardware import engine_perf

    d = deployment(engine)
    m = d.model
    assert m.shared_intermediate_size  # DeepSeek-V3: one shared expert
    layer = d.moe_layer()
    shared = d.mlp(m.shared_intermediate_size, m.gemm_quant, "moe_shared")
    limit = SHARED_EXPERTS_STREAM_TOKENS[engine]
    monkeypatch.setitem(engine_perf.SHARED_EXPERTS_STREAM_TOKENS, engine, 0)
    serial = d.moe_layer()  # router + routed experts + shared experts, one stream
    assert any(t <= limit for t in d.tokens)
    assert any(t > limit for t in d.tokens)
    for t, two, one, sh in zip(d.tokens, layer, serial, shared, strict=True):
        if t > limit:
            assert two == one
        else:
            assert two == pytest.approx(max(one - sh, sh), rel=1e-12)
            assert two < one


def test_the_threshold_is_the_engine_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 512 tokens SGLang (threshold 1024) overlaps; with vLLM's threshold (256) the same
    tables give the serial sum there, and the same value at 8 tokens."""
    from tidal.hardware import engine_perf

    d = deployment("sglang")
    m = d.model
    i8, i512 = d.tokens.index(8), d.tokens.index(512)
    two = d.moe_layer()
    shared = d.mlp(m.shared_intermediate_size, m.gemm_quant, "moe_shared")
    monkeypatch.setitem(engine_perf.SHARED_EXPERTS_STREAM_TOKENS, "sglang", 256)
    one = d.moe_layer()
    assert one[i8] == two[i8]
    assert one[i512] > two[i512]  # serial: router + routed + shared, not their max
    assert one[i512] - two[i512] == pytest.approx(min(shared[i512], one[i512] - shared[i512]))


def test_a_decode_step_of_deepseek_v3_hides_the_shared_experts() -> None:
    """B200, SGLang, TP 8, batch 8: the step is cheaper than with the shared experts serial
    by at least the MoE layers' (58 of 61) shared-expert GEMMs less the routed path's slack,
    and never below the routed path alone."""
    m, gpu = get_model(MODEL), get_gpu("b200")
    perf = EnginePerfModel(m, gpu, 8, "sglang")
    d = deployment("sglang")
    i = d.tokens.index(8)
    shared = d.mlp(m.shared_intermediate_size, m.gemm_quant, "moe_shared")[i]
    layer = d.moe_layer()[i]
    router = d.gemm("bfloat16", m.num_experts, m.hidden_size, "moe_router")[i]
    assert layer - router > shared  # routed experts longer than the shared expert at 8 tokens
    step = perf.step_seconds(8, 8 * 8192, 0, 0, 0, 0)
    moe_layers = m.num_layers - m.num_dense_layers
    serial = step + moe_layers * shared * 1e-6
    assert serial / step > 1.05
