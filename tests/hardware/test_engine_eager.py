"""SGLang's eager prefill floor for MLA / DSA / GDN models (hardware/engine_eager.py)."""

from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.hardware.engine_eager import (
    EAGER_PREFILL_FLOOR_S,
    eager_prefill_applies,
    eager_prefill_floor_s,
)
from tidal.hardware.engine_perf import EnginePerfModel
from tidal.hardware.gpus import get_gpu
from tidal.hardware.measured import MeasuredPerfModel
from tidal.hardware.models import get_model

DSV3 = "deepseek-ai/DeepSeek-V3"


@lru_cache(maxsize=8)
def perf(model: str, engine: str, gpu: str = "h200", tp: int = 8) -> EnginePerfModel:
    return EnginePerfModel(get_model(model), get_gpu(gpu), tp, engine)


def prefill_ns(p: EnginePerfModel, tokens: int, decodes: int = 0) -> int:
    """One step prefilling one prompt of ``tokens`` beside ``decodes`` 1k-context decodes."""
    return p.step_ns(decodes, 1024 * decodes, tokens, tokens, tokens, 1)


def test_the_floor_is_the_measured_deepseek_v3_forward_scaled_by_layers() -> None:
    dsv3 = get_model(DSV3)
    assert dsv3.num_layers == 61
    assert eager_prefill_floor_s("sglang", dsv3) == pytest.approx(EAGER_PREFILL_FLOOR_S)
    glm5 = get_model("zhipuai/GLM-5")  # 78 layers of DSA
    assert eager_prefill_floor_s("sglang", glm5) == pytest.approx(
        EAGER_PREFILL_FLOOR_S * 78 / 61
    )
    qwen35 = get_model("Qwen/Qwen3.5-397B-A17B")  # Gated DeltaNet hybrid, 60 layers
    assert eager_prefill_applies("sglang", qwen35)


@pytest.mark.parametrize(
    ("model", "engine"),
    [(DSV3, "vllm"), ("moonshotai/Kimi-K2.5", "vllm"), ("Qwen/Qwen3-235B-A22B", "sglang")],
)
def test_no_floor_for_vllm_or_gqa_models(model: str, engine: str) -> None:
    assert eager_prefill_floor_s(engine, get_model(model)) == 0.0
    assert perf(model, engine).prefill_floor_s == 0.0


def test_a_short_prefill_on_sglang_takes_the_floor_and_a_long_one_its_gpu_time() -> None:
    p = perf(DSV3, "sglang")
    floor_ns = round(p.prefill_floor_s * 1e9)
    assert prefill_ns(p, 16) == floor_ns  # launch-bound: the GPU work is far shorter
    long = prefill_ns(p, 16384)
    assert long > floor_ns  # compute-bound: the floor does not show
    # the floor is a max, never an addition: above it the step is the unfloored model's
    vllm_like = MeasuredPerfModel.step_seconds(p, 0, 0, 16384, 16384, 16384, 1)
    assert long == max(1, round(vllm_like * 1e9))


@settings(max_examples=40, deadline=None)
@given(decodes=st.integers(1, 256), ctx=st.integers(1, 32768))
def test_decode_steps_are_not_floored(decodes: int, ctx: int) -> None:
    """Decode runs under CUDA graphs: a pure-decode step (the fast-forwarded ones) is the
    unfloored step, and a step with a prefill is at least the floor."""
    p = perf(DSV3, "sglang")
    plain = MeasuredPerfModel.step_seconds(p, decodes, decodes * ctx, 0, 0, 0, 0)
    assert p.step_ns(decodes, decodes * ctx) == max(1, round(plain * 1e9))
    assert prefill_ns(p, 2, decodes) >= round(p.prefill_floor_s * 1e9)


def test_a_decode_pools_single_token_hand_over_is_not_floored() -> None:
    """A disaggregated decode pool admits loaded KV as one-token chunks (SGLang's PREBUILT
    batch: no extend forward): those steps are the unfloored step; a 2-token chunk is not."""
    p = perf(DSV3, "sglang")
    floor_ns = round(p.prefill_floor_s * 1e9)
    hand_over = p.step_ns(8, 8 * 1024, 4, 4, 4 * 8192, 4)  # 4 loaded legs, 8k contexts
    plain = MeasuredPerfModel.step_seconds(p, 8, 8 * 1024, 4, 4, 4 * 8192, 4)
    assert hand_over == max(1, round(plain * 1e9)) < floor_ns
    assert p.step_ns(8, 8 * 1024, 2, 2, 2, 1) == floor_ns


def test_summary_records_the_floor_and_its_source() -> None:
    d = perf(DSV3, "sglang").describe()
    assert d["eager_prefill_floor_ms"] == pytest.approx(82.641, abs=1e-3)
    assert "12160" in d["eager_prefill_source"]
    assert "eager_prefill_floor_ms" not in perf(DSV3, "vllm").describe()
