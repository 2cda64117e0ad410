"""ModelSpec from Hugging Face configs: the silicon sample's models by repo id, paths, the
architectures' arithmetic against published sizes, and the error for anything else."""

from __future__ import annotations

import json
import shutil

import pytest

from tidal.core.errors import ConfigError
from tidal.hardware.hf_config import SUPPORTED, shipped_configs
from tidal.hardware.models import MODELS, check_tp, get_model

pytestmark = pytest.mark.skipif(not shipped_configs(), reason="aiconfigurator-core not installed")


@pytest.mark.parametrize(
    ("hf_id", "arch", "billions"),
    [
        # total parameters as the model cards state them (MTP / vision towers not counted)
        ("Qwen/Qwen3-235B-A22B-FP8", "Qwen3MoeForCausalLM", 235.0),
        ("meta-llama/Llama-3.1-70B", "LlamaForCausalLM", 70.6),
        ("openai/gpt-oss-120b", "GptOssForCausalLM", 116.8),
        ("MiniMaxAI/MiniMax-M2.5", "MiniMaxM2ForCausalLM", 229.0),
        ("deepseek-ai/DeepSeek-V3", "DeepseekV3ForCausalLM", 671.0),
        ("moonshotai/Kimi-K2.5", "KimiK25ForConditionalGeneration", 1026.0),
        ("zhipuai/GLM-5", "GlmMoeDsaForCausalLM", 744.0),
        ("Qwen/Qwen3.5-397B-A17B", "Qwen3_5MoeForConditionalGeneration", 397.0),
        ("Qwen/Qwen3-32B", "Qwen3ForCausalLM", 32.8),
        ("mistralai/Mixtral-8x7B-v0.1", "MixtralForCausalLM", 46.7),
    ],
)
def test_silicon_sample_models_parse_to_their_published_size(hf_id, arch, billions):
    m = get_model(hf_id)
    assert m.architecture == arch
    assert m.num_params / 1e9 == pytest.approx(billions, rel=0.01)


@pytest.mark.parametrize(
    ("hf_id", "active", "tables"),
    [
        # activated parameters per token as the model cards state them, with both embedding
        # tables counted (Qwen, DeepSeek) or the unembedding only (gpt-oss, GLM)
        ("Qwen/Qwen3-235B-A22B", 22.0, 2),
        ("deepseek-ai/DeepSeek-V3", 37.0, 2),
        ("Qwen/Qwen3-30B-A3B", 3.3, 2),
        ("openai/gpt-oss-120b", 5.1, 1),
        ("zhipuai/GLM-5", 40.0, 1),
        ("Qwen/Qwen3.5-397B-A17B", 17.0, 2),
    ],
)
def test_moe_active_parameters_match_the_model_cards(hf_id, active, tables):
    m = get_model(hf_id)
    touched = m.layer_matmul_params + tables * m.embedding_params
    assert touched / 1e9 == pytest.approx(active, rel=0.04)


def test_hf_llama_matches_the_catalog_llama():
    hf, cat = get_model("meta-llama/Llama-3.1-70B"), get_model("llama-3.1-70b")
    assert hf.num_params == cat.num_params
    assert hf.kv_bytes_per_token == cat.kv_bytes_per_token
    assert hf.weight_bytes == cat.weight_bytes


def test_deepseek_v3_structure():
    m = get_model("deepseek-ai/DeepSeek-V3")
    assert (m.num_dense_layers, m.num_moe_layers) == (3, 58)
    assert (m.num_experts, m.num_active_experts, m.num_shared_experts) == (256, 8, 1)
    assert m.shared_intermediate_size == m.moe_inter == 2048
    # MLA: the 512-wide latent and the 64-wide rope key, bf16, per layer; not split by TP
    assert m.kv_bytes_per_token == 61 * (512 + 64) * 2
    assert m.kv_bytes_per_token_per_gpu(8) == m.kv_bytes_per_token
    assert (m.gemm_quant, m.moe_quant) == ("fp8_block", "fp8_block")


def test_dsa_adds_the_indexer_key_cache():
    v3, v32 = get_model("deepseek-ai/DeepSeek-V3"), get_model("deepseek-ai/DeepSeek-V3.2")
    assert v32.index_topk == 2048
    # FP8 indexer keys of 128 values + one fp32 scale, per layer
    assert v32.kv_bytes_per_token - v3.kv_bytes_per_token == 61 * (128 + 4)
    # past the top-k only the indexer (64 heads of 128, QKᵀ) grows with the context
    grown = v32.attn_flops_per_token(100_000) - v32.attn_flops_per_token(2048)
    assert grown == 61 * 2 * 64 * 128 * (100_000 - 2048)
    assert v3.attn_flops_per_token(100_000) > 40 * v3.attn_flops_per_token(2048)


def test_gpt_oss_sliding_layers_and_mxfp4_experts():
    m = get_model("openai/gpt-oss-120b")
    assert (m.sliding_window, m.num_sliding_layers, m.full_attention_layers) == (128, 18, 18)
    assert (m.gemm_quant, m.moe_quant) == ("bfloat16", "w4a16_mxfp4")
    # full layers only per token: 18 layers × 2 × 8 KV heads × 64 × bf16
    assert m.kv_bytes_per_token == 18 * 2 * 8 * 64 * 2
    long, short = m.kv_bytes_per_seq_per_gpu(1, 10_000), m.kv_bytes_per_seq_per_gpu(1, 100)
    window = m.window_kv_bytes_per_token_per_gpu(1)
    assert long == m.kv_bytes_per_token * 10_000 + window * 128
    assert short == (m.kv_bytes_per_token + window) * 100
    # the published checkpoint is ≈ 65 GB (MXFP4 experts, bf16 rest)
    assert m.weight_bytes / 1e9 == pytest.approx(65.0, rel=0.03)


def test_qwen35_linear_layers_keep_a_constant_state():
    m = get_model("Qwen/Qwen3.5-397B-A17B")
    assert (m.num_linear_layers, m.full_attention_layers) == (45, 15)
    assert m.kv_bytes_per_token == 15 * 2 * 2 * 256 * 2
    # per linear layer: conv (4−1)·(2·16·128 + 64·128) bf16 + 64·128·128 fp32 state
    per_layer = 3 * (2 * 16 * 128 + 64 * 128) * 2 + 64 * 128 * 128 * 4
    assert m.state_bytes_per_seq == 45 * per_layer
    assert m.state_bytes_per_seq_per_gpu(8) == m.state_bytes_per_seq / 8
    a, b = m.kv_bytes_per_seq_per_gpu(8, 1000), m.kv_bytes_per_seq_per_gpu(8, 2000)
    assert b - a == m.kv_bytes_per_token_per_gpu(8) * 1000


def test_kimi_k25_int4_experts_only():
    m = get_model("moonshotai/Kimi-K2.5")
    assert (m.gemm_quant, m.moe_quant) == ("bfloat16", "int4_wo")
    assert m.num_dense_layers == 1
    # the published INT4 checkpoint is ≈ 595 GB
    assert m.weight_bytes / 1e9 == pytest.approx(595.0, rel=0.03)


def test_modelopt_nvfp4_checkpoint_quantizes_weights_and_kv():
    m = get_model("nvidia/DeepSeek-V3.1-NVFP4")
    assert (m.gemm_quant, m.moe_quant, m.kv_cache_dtype) == ("nvfp4", "nvfp4", "fp8")
    assert m.kv_bytes_per_token == 61 * (512 + 64)


def test_a_path_to_a_config_or_a_model_directory(tmp_path):
    src = shipped_configs()["Qwen/Qwen3-30B-A3B"]
    shutil.copy(src, tmp_path / "config.json")
    by_dir, by_file = get_model(str(tmp_path)), get_model(str(tmp_path / "config.json"))
    ref = get_model("Qwen/Qwen3-30B-A3B")
    for m in (by_dir, by_file):
        assert (m.num_params, m.kv_bytes_per_token) == (ref.num_params, ref.kv_bytes_per_token)
    assert by_dir.name == str(tmp_path)


def test_hf_quant_config_beside_a_model_directory(tmp_path):
    (tmp_path / "config.json").write_text(shipped_configs()["Qwen/Qwen3-32B"].read_text())
    quant = {"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(quant))
    m = get_model(str(tmp_path))
    assert (m.gemm_quant, m.kv_cache_dtype) == ("fp8", "fp8")


def test_an_unsupported_architecture_names_it_and_the_supported_ones(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["FalconForCausalLM"], "num_hidden_layers": 2}))
    with pytest.raises(ConfigError, match="FalconForCausalLM") as err:
        get_model(str(path))
    assert all(a in str(err.value) for a in SUPPORTED)


def test_an_unknown_repo_id_lists_what_ships():
    with pytest.raises(ConfigError, match="Qwen/Qwen3-32B"):
        get_model("nobody/NoModel-7B")


def test_catalog_ids_stay_aliases():
    for name, spec in MODELS.items():
        assert get_model(name) is spec


def test_tp_must_split_the_linear_attention_heads():
    m = get_model("Qwen/Qwen3.5-397B-A17B")  # 32 heads, 16 / 64 linear key / value heads
    with pytest.raises(ConfigError, match=r"16/64 linear-attention.*valid: 1, 2, 4, 8, 16\)"):
        check_tp(m, 32)
    check_tp(m, 16)


def test_every_silicon_sample_model_resolves():
    """Each model of the package's vLLM / SGLang serving measurements (silicon_sample.csv) is
    a model ``--model`` accepts, and each row's precision names operator-table dtypes."""
    import csv

    from tidal.hardware.hf_config import package_dir
    from tidal.hardware.precision import WEIGHT_DTYPES

    root = package_dir()
    assert root is not None
    with open(root / "systems" / "silicon_sample.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["backend"] in ("vllm", "sglang")]
    assert len(rows) > 2000
    for path in sorted({r["model_path"] for r in rows}):
        assert get_model(path).num_params > 0, path
    for r in rows:
        for q in (r["gemm_quant_mode"], r["moe_quant_mode"]):
            m = get_model(r["model_path"], gemm_quant=q or None)
            assert m.gemm_quant in WEIGHT_DTYPES


def test_an_fp8_alias_carries_its_checkpoint_precision():
    m = get_model("nvidia/Llama-3.1-8B-Instruct-FP8")
    assert (m.gemm_quant, m.kv_cache_dtype) == ("fp8", "fp8")
    assert m.num_params == get_model("llama-3.1-8b").num_params


def test_a_window_on_every_layer_is_planned_as_full_attention(tmp_path):
    cfg = json.loads(shipped_configs()["Qwen/Qwen3-8B"].read_text())
    cfg |= {"architectures": ["MistralForCausalLM"], "sliding_window": 4096}
    cfg.pop("use_sliding_window", None)  # Mistral's configs have none: the window applies
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = get_model(str(tmp_path))
    assert (m.num_sliding_layers, m.full_attention_layers) == (0, 36)
    assert m.kv_bytes_per_token == get_model("Qwen/Qwen3-8B").kv_bytes_per_token
