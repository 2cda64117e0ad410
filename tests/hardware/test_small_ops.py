"""Small per-step operators of the engine-table step model (issue 28, docs/design/qwen3_vllm.md):
Qwen3's per-head q/k RMSNorms and the TP all-gather of the vocabulary-sharded logits."""

from __future__ import annotations

from functools import lru_cache
from itertools import pairwise

import pytest

from tidal.hardware.corrected import CorrectedRooflinePerfModel
from tidal.hardware.engine_data import resolve_versions
from tidal.hardware.engine_deployment import EngineDeployment
from tidal.hardware.engine_tables import nccl_us
from tidal.hardware.gpus import get_gpu
from tidal.hardware.interp import Curve
from tidal.hardware.models import get_model

H100_BW = get_gpu("h100").mem_bw


@lru_cache(maxsize=8)
def deployment(model: str, tp: int) -> EngineDeployment:
    m, g = get_model(model), get_gpu("h100")
    fb = CorrectedRooflinePerfModel(m, g, tp)
    return EngineDeployment(resolve_versions("h100_sxm", "vllm"), m, tp, False,
                            "power_law_1.01", fb)  # fmt: skip


def test_qwen3_configs_have_qk_norm_and_llama_does_not() -> None:
    assert get_model("Qwen/Qwen3-32B").qk_norm
    assert get_model("Qwen/Qwen3-235B-A22B-FP8").qk_norm
    assert get_model("qwen3-8b").qk_norm
    assert not get_model("meta-llama/Llama-3.1-70B").qk_norm
    assert not get_model("llama-3.1-8b").qk_norm


def test_qk_norm_is_two_rmsnorm_kernels_over_the_shard_s_q_and_kv_heads_by_hand() -> None:
    """Qwen3-32B at TP 2: 64 q heads and 8 KV heads of d = 128 → 32 and 4 a GPU. Each kernel
    costs t0 + r·(2·128·2 bytes) + k·M·(2·heads·128·2 bytes)/BW with the RMSNorm's fitted
    (t0, k, r): at M = 0 two launches, and each token adds (32 + 4)·512·k/BW."""
    m = get_model("Qwen/Qwen3-32B")
    fb = CorrectedRooflinePerfModel(m, get_gpu("h100"), 2)
    t0, k, r = fb.c.elementwise["input_layernorm"]
    assert fb.qk_norm_s(0) == pytest.approx(2 * (t0 * 1e-6 + r * 1e-9 * 512), rel=1e-12)
    per_token = (32 + 4) * 512 * k / H100_BW
    assert fb.qk_norm_s(4096) - fb.qk_norm_s(0) == pytest.approx(4096 * per_token, rel=1e-9)
    # a model without qk-norm pays nothing, and the Vidur-era op list is unchanged
    llama = CorrectedRooflinePerfModel(get_model("llama-3.1-8b"), get_gpu("h100"), 2)
    assert llama.qk_norm_s(4096) == 0.0
    assert fb.elementwise_s(64) == pytest.approx(fb._e0 + 64 * fb._e1, rel=1e-12)


def test_the_engine_model_adds_qk_norm_to_each_layer_s_elementwise_ops() -> None:
    d = deployment("Qwen/Qwen3-32B", 8)
    fb = d.fb
    got = d.elementwise()
    for t, us in zip(d.tokens, got, strict=True):
        assert us == pytest.approx(1e6 * (fb._e0 + fb._e1 * t + fb.qk_norm_s(t)), rel=1e-12)
    # TP 8: 8 q heads and 1 KV head a GPU; at 8 tokens the two launches dominate (> 3 µs)
    i = d.tokens.index(8)
    assert 1e6 * fb.qk_norm_s(8) > 2 * fb.c.elementwise["input_layernorm"][0]
    assert got[i] - 1e6 * (fb._e0 + 8 * fb._e1) == pytest.approx(1e6 * fb.qk_norm_s(8))


def test_hybrid_models_norm_q_and_k_only_on_their_full_attention_layers() -> None:
    m = get_model("Qwen/Qwen3.5-27B")
    assert m.qk_norm
    assert m.num_linear_layers
    fb = CorrectedRooflinePerfModel(m, get_gpu("h100"), 1)
    t0, _, r = fb.c.elementwise["input_layernorm"]
    launch = 2 * (t0 * 1e-6 + r * 1e-9 * 2 * m.d_head * m.dtype_bytes)
    share = m.softmax_attention_layers / m.num_layers
    assert share < 1
    assert fb.qk_norm_s(0) == pytest.approx(launch * share, rel=1e-12)


def test_logits_are_all_gathered_at_tp_above_one_by_the_nccl_table() -> None:
    """s sampled rows of Qwen3-32B's 151,936-entry vocabulary in bf16: s·151936·2 bytes
    all-gathered over the TP group, read off the NCCL all-gather table of 4 GPUs."""
    d = deployment("Qwen/Qwen3-32B", 4)
    pts = nccl_us("h100_sxm", "all_gather", 4)
    assert pts is not None
    ag = Curve(*pts)
    got = d.logits_gather()
    for s, us in zip(d.tokens, got, strict=True):
        assert us == ag.at(s * 151936 * 2)
    assert all(b >= a for a, b in pairwise(got))  # more rows never gather faster
    assert d.parts["logits_gather"] == "engine:nccl/4gpu"
    assert deployment("Qwen/Qwen3-32B", 1).logits_gather() == [0.0] * len(d.tokens)


def test_the_lm_head_step_part_is_the_gemm_plus_the_gather() -> None:
    d = deployment("meta-llama/Llama-3.1-70B", 2)
    lin = d.linear()
    gemm = d.gemm("bfloat16", 128256 // 2, 8192, "lm_head")
    gather = d.logits_gather()
    assert lin.step_us["lm_head"] == [a + b for a, b in zip(gemm, gather, strict=True)]
    assert min(gather) > 0
