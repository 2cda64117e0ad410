"""The KV plan of quantized and MoE deployments, worked by hand (``hardware/memory.py``), and
the precision flags' effect on a model (``hardware/precision.py``)."""

from __future__ import annotations

import pytest

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import GIB, get_gpu
from tidal.hardware.hf_config import shipped_configs
from tidal.hardware.memory import plan_memory
from tidal.hardware.models import get_model

pytestmark = pytest.mark.skipif(not shipped_configs(), reason="aiconfigurator-core not installed")


def test_kv_plan_of_qwen3_30b_a3b_fp8_with_fp8_kv_on_h100():
    """Qwen/Qwen3-30B-A3B-FP8 (block-FP8 checkpoint) with ``--kv-cache-dtype fp8`` on one H100,
    vLLM defaults (utilization 0.9, 8192 batched tokens, 256 sequences, block 16).

    Shapes (config.json): 48 layers, hidden 2048, 32 query / 4 KV heads of 128, 128 experts of
    width 768 (8 active), vocabulary 151 936, untied embeddings.

    Parameters per layer: attention 2048·32·128 (Q) + 2·2048·4·128 (K, V) + 32·128·2048 (O) =
    18 874 368; experts 128 · 3·2048·768 = 603 979 776; router 2048·128 = 262 144; norms 4096.
    Kept in bf16 (2 B): embeddings and LM head 2 · 151 936·2048 = 622 329 856, norms
    (2·48 + 1)·2048 = 198 656, routers 48·262 144 = 12 582 912 → 635 111 424 parameters.
    Block FP8 (1 B + one fp32 scale per 128×128 = 1 + 4/16384 B): 48 · (18 874 368 +
    603 979 776) = 29 896 998 912 parameters → 29 896 998 912 + 7 299 072 B.
    Weights = 1 270 222 848 + 29 904 297 984 = 31 174 520 832 B (29.03 GiB).

    Activation peak: forward 8192 · 2 B · max(2048 + (2·32 + 2·4)·128,
    2048 + 8·(3·768 + 2048)) = 8192·2·36 864 = 603 979 776; sampler 256·151 936·28 +
    (8192 + 256)·2048·2 = 1 123 680 256 → 1 123 680 256 B. Non-torch 0.35 GiB, graphs 0.40 GiB.

    KV = 0.9 · 79.11 GiB − 31 174 520 832 − 1 123 680 256 − 0.75 GiB = 40.37 GiB.
    FP8 KV per token: 2 · 48 layers · 4 heads · 128 · 1 B = 49 152 B (bf16: 98 304).
    Blocks = ⌊KV / (49 152 · 16)⌋ − 1 (the null block) = 55 116 → 881 856 tokens."""
    m = get_model("Qwen/Qwen3-30B-A3B-FP8", kv_cache_dtype="fp8")
    plan = plan_memory(m, get_gpu("h100"), 1)
    weights = 635_111_424 * 2 + 29_896_998_912 + 29_896_998_912 // 4096
    assert weights == 31_174_520_832
    assert plan.weight_bytes_per_gpu == weights
    assert plan.activation_bytes == 256 * 151_936 * 28 + (8192 + 256) * 2048 * 2
    assert plan.kv_bytes_per_token_per_gpu == 2 * 48 * 4 * 128 * 1
    kv = 0.9 * 79.11 * GIB - weights - 1_123_680_256 - 0.75 * GIB
    assert plan.kv_bytes_per_gpu == pytest.approx(kv, rel=1e-12)
    assert plan.num_blocks == int(kv // (49_152 * 16)) - 1 == 55_116
    assert plan.kv_capacity_tokens == 881_856
    # the bf16 KV of the same deployment holds half the tokens (within a block)
    bf16 = plan_memory(get_model("Qwen/Qwen3-30B-A3B-FP8"), get_gpu("h100"), 1)
    assert bf16.num_blocks == int(kv // (98_304 * 16)) - 1


def test_kv_plan_of_gpt_oss_120b_moe_with_sliding_windows_on_h100():
    """openai/gpt-oss-120b on one H100: MXFP4 experts, bf16 rest, 18 of 36 layers with a
    128-token window.

    Shapes: hidden 2880, 64 query / 8 KV heads of 64, 128 experts of width 2880 (4 active),
    vocabulary 201 088, untied. Per layer: attention 2880·64·64·2 + 2·2880·8·64 = 26 542 080;
    experts 128 · 3·2880·2880 = 3 185 049 600; router 2880·128 = 368 640.
    bf16: embeddings 2 · 201 088·2880 = 1 158 266 880, norms 73·2880 = 210 240, routers
    36·368 640 = 13 271 040, attention 36·26 542 080 = 955 514 880 → 2 127 263 040 params,
    4 254 526 080 B. MXFP4 experts (½ B + one E8M0 scale per 32 = 17/32 B): 36·3 185 049 600
    = 114 661 785 600 params → 60 914 073 600 B. Weights 65 168 599 680 B (60.69 GiB).

    Activation: sampler 256·201 088·28 + 8448·2880·2 = 1 490 059 264 B (> forward
    8192·2·(2880 + 4·(3·2880 + 2880)) = 802 160 640).
    Windows: each sequence keeps ⌈127/16⌉ + 1 = 9 blocks = 144 tokens of the 18 sliding
    layers, 2·18·8·64·2 = 36 864 B per token → 5 308 416 B; 256 sequences → 1 358 954 496 B.
    Full layers per token: 2·18·8·64·2 = 36 864 B.
    KV = 0.9·79.11 GiB − weights − 1 490 059 264 − 0.75 GiB − 1 358 954 496 = 7.10 GiB →
    ⌊KV / (36 864·16)⌋ − 1 blocks."""
    m = get_model("openai/gpt-oss-120b")
    plan = plan_memory(m, get_gpu("h100"), 1)
    weights = (1_158_266_880 + 210_240 + 13_271_040 + 955_514_880) * 2 + 114_661_785_600 * 17 // 32
    assert plan.weight_bytes_per_gpu == weights == 65_168_599_680
    assert plan.activation_bytes == 1_490_059_264
    assert plan.seq_state_bytes == 256 * 144 * 36_864 == 1_358_954_496
    kv = 0.9 * 79.11 * GIB - weights - 1_490_059_264 - 0.75 * GIB - 1_358_954_496
    assert plan.kv_bytes_per_gpu == pytest.approx(kv, rel=1e-12)
    assert plan.num_blocks == int(kv // (36_864 * 16)) - 1
    assert plan.summary()["kv_plan"]["seq_state_gib"] == pytest.approx(1.265625)


def test_linear_attention_state_is_set_aside_per_sequence():
    """Qwen3.5-397B-A17B, TP 8: 45 Gated DeltaNet layers, each sequence keeps per layer a
    conv window 3·(2·16·128 + 64·128) bf16 = 73 728 B and a 64·128·128 fp32 state
    = 4 194 304 B, split over 8 ranks."""
    m = get_model("Qwen/Qwen3.5-397B-A17B", quantization="fp8")
    plan = plan_memory(m, get_gpu("h200"), 8)
    per_seq = 45 * (73_728 + 4_194_304) / 8
    assert plan.seq_state_bytes == 256 * per_seq
    fewer = plan_memory(m, get_gpu("h200"), 8, max_seqs=64)
    freed = fewer.kv_bytes_per_gpu - plan.kv_bytes_per_gpu
    activation = plan.activation_bytes - fewer.activation_bytes
    assert freed == pytest.approx(192 * per_seq + activation, rel=1e-9)


def test_mla_kv_is_not_split_by_tp_and_fp8_halves_it():
    v3 = get_model("deepseek-ai/DeepSeek-V3")
    fp8 = get_model("deepseek-ai/DeepSeek-V3", kv_cache_dtype="fp8")
    assert v3.kv_bytes_per_token_per_gpu(8) == 61 * 576 * 2
    assert fp8.kv_bytes_per_token_per_gpu(8) == 61 * 576


def test_quantization_flags_over_the_checkpoint():
    base = get_model("Qwen/Qwen3-32B")
    assert (base.gemm_quant, base.kv_cache_dtype) == ("bfloat16", "auto")
    fp8 = get_model("Qwen/Qwen3-32B", quantization="fp8")
    assert fp8.gemm_quant == "fp8"
    assert fp8.weight_bytes < 0.55 * base.weight_bytes
    # fp8 on a block-FP8 checkpoint keeps its blocks; per-part keys override either
    assert get_model("Qwen/Qwen3-32B-FP8", quantization="fp8").gemm_quant == "fp8_block"
    mixed = get_model("deepseek-ai/DeepSeek-V3", gemm_quant="fp8", moe_quant="nvfp4")
    assert (mixed.gemm_quant, mixed.moe_quant) == ("fp8", "nvfp4")
    assert get_model("nvidia/DeepSeek-V3.1-NVFP4", kv_cache_dtype="auto").kv_cache_dtype == "fp8"
    assert get_model("nvidia/DeepSeek-V3.1-NVFP4", kv_cache_dtype="bfloat16").kv_elem_bytes == 2
    mx = get_model("openai/gpt-oss-120b", quantization="mxfp4")
    assert (mx.gemm_quant, mx.moe_quant) == ("bfloat16", "w4a16_mxfp4")
    nv = get_model("llama-3.1-70b", quantization="modelopt_fp4")
    assert nv.weight_bytes < 0.32 * get_model("llama-3.1-70b").weight_bytes


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"quantization": "int3"}, "quantization"),
        ({"kv_cache_dtype": "fp4"}, "kv_cache_dtype"),
        ({"gemm_quant": "fp6"}, "gemm_quant"),
        ({"moe_quant": "mxfp8"}, "moe_quant"),
    ],
)
def test_bad_precision_values_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        get_model("llama-3.1-8b", **kwargs)


def test_simulation_config_keys_reach_the_model():
    from tidal.sim.config import load_config

    cfg = load_config(
        {
            "model": "Qwen/Qwen3-30B-A3B-FP8",
            "kv_cache_dtype": "fp8",
            "moe_quant": "fp8",
            "workload": {"num_requests": 1, "rate": 1},
        }
    )
    spec = cfg.model_spec()
    assert (spec.gemm_quant, spec.moe_quant, spec.kv_elem_bytes) == ("fp8_block", "fp8", 1)
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        load_config({"kv_cache_dtype": "int8", "workload": {"num_requests": 1, "rate": 1}})
