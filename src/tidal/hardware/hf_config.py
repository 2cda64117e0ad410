"""A :class:`ModelSpec` from a Hugging Face ``config.json``: any model of the supported
architectures, by repo id (the configs the ``aiconfigurator-core`` package ships, read as data)
or by a path to a ``config.json`` or a model directory.

Supported ``architectures`` (the silicon sample's models and their relatives):

* dense GQA — Llama, Mistral, Qwen2, Qwen3;
* MoE with top-k routing and shared experts — Qwen2-MoE, Qwen3-MoE, Mixtral, MiniMax-M2,
  gpt-oss (whose alternate layers use a sliding window);
* MLA — DeepSeek-V2/V3/R1, Kimi-K2 (and Kimi-K2.5's text model);
* DSA sparse attention on MLA — DeepSeek-V3.2, GLM-5;
* hybrid linear attention (Gated DeltaNet + gated full attention) — Qwen3-Next, Qwen3.5.

Anything else raises a :class:`ConfigError` naming the architecture and the supported ones.
The checkpoint's precision (``quantization_config`` in ``config.json``, or ModelOpt's
``hf_quant_config.json`` beside it) is read by :mod:`tidal.hardware.hf_quant`.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

from tidal.core.errors import ConfigError
from tidal.hardware.hf_quant import checkpoint_precision
from tidal.hardware.model_spec import ModelSpec

PACKAGE = "aiconfigurator_core"

DENSE = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
MOE = (
    "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM", "MiniMaxM2ForCausalLM",
    "GptOssForCausalLM",
)  # fmt: skip
MLA = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration")
DSA = ("DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM")
HYBRID = (
    "Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
)  # fmt: skip
SUPPORTED = DENSE + MOE + MLA + DSA + HYBRID
QK_NORM = ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", *HYBRID)
"""Architectures whose softmax-attention layers RMS-normalise each query and key head before
RoPE (vLLM's ``qwen3.py`` / ``qwen3_moe.py`` ``q_norm``/``k_norm``, and the gated full
attention of ``qwen3_next.py``): :attr:`ModelSpec.qk_norm`."""

HF_ALIASES: dict[str, str] = {
    "meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B": "meta-llama/Meta-Llama-3.1-405B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Meta-Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "zhipuai/GLM-5": "zai-org/GLM-5",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
}
"""Repo ids under which the silicon sample (or the Hub) names a model whose config the package
ships under another id: same architecture (an Instruct model is its base's shapes)."""

ALIAS_PRECISION: dict[str, tuple[str, str, str]] = {
    "nvidia/Llama-3.1-8B-Instruct-FP8": ("fp8", "fp8", "fp8"),
}
"""(gemm_quant, moe_quant, kv_cache_dtype) of an alias whose checkpoint is quantized where its
base's config is not: NVIDIA's ModelOpt FP8 recipe, as its 70B sibling's hf_quant_config.json
states it (FP8 weights, FP8 KV)."""

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def package_dir() -> Path | None:
    """Where ``aiconfigurator-core`` is installed (found, never imported), or None."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def shipped_configs() -> dict[str, Path]:
    """Repo id → the package's ``model_configs/<org>--<name>_config.json``."""
    root = package_dir()
    if root is None:
        return {}
    out = {}
    for path in sorted((root / "model_configs").glob("*_config.json")):
        stem = path.name.removesuffix("_config.json")
        if stem.endswith("_hf_quant"):
            continue
        out[stem.replace("--", "/", 1)] = path
    return out


def is_model_ref(name: str) -> bool:
    """A repo id (``org/name``) or a path, as opposed to a catalog id."""
    return "/" in name or name.endswith(".json") or Path(name).exists()


@functools.lru_cache(maxsize=256)
def load_hf_model(ref: str) -> ModelSpec:
    """The spec of a repo id the package ships, a ``config.json`` or a model directory."""
    config, quant, hf_id = _locate(ref)
    data = _read_json(config, "model")
    qdata = _read_json(quant, "model") if quant is not None else None
    spec = spec_from_config(data, name=ref, hf_id=hf_id, hf_quant=qdata)
    if ref in ALIAS_PRECISION:
        gemm, moe, kv = ALIAS_PRECISION[ref]
        spec = dataclasses.replace(spec, gemm_quant=gemm, moe_quant=moe, kv_cache_dtype=kv)
    return spec


def _locate(ref: str) -> tuple[Path, Path | None, str]:
    """(config.json, hf_quant_config.json or None, repo id) of a model reference."""
    path = Path(ref).expanduser()
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise ConfigError("model", f"{ref!r} is a directory without a config.json")
        quant = path / "hf_quant_config.json"
        return config, quant if quant.is_file() else None, ""
    if path.is_file():
        quant = path.with_name(path.name.replace("config.json", "hf_quant_config.json"))
        return path, quant if quant != path and quant.is_file() else None, ""
    shipped = shipped_configs()
    hf_id = HF_ALIASES.get(ref, ref)
    if hf_id not in shipped:
        raise ConfigError(
            "model",
            f"unknown model {ref!r}: not a catalog id, not a path, and no config of that repo "
            "id ships with aiconfigurator-core",
            "a catalog id (tidal hardware show), a path to a config.json or model directory, "
            "or one of: " + ", ".join(sorted(shipped) + sorted(HF_ALIASES)),
        )
    config = shipped[hf_id]
    quant = config.with_name(config.name.replace("_config.json", "_hf_quant_config.json"))
    return config, quant if quant.is_file() else None, hf_id


def _read_json(path: Path, field: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(field, f"cannot read {path}: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(field, f"{path}: not a JSON object")
    return data


def spec_from_config(
    data: dict[str, Any], name: str, hf_id: str = "", hf_quant: dict[str, Any] | None = None
) -> ModelSpec:
    """A :class:`ModelSpec` of one Hugging Face config (module docstring: architectures)."""
    arch = (data.get("architectures") or [""])[0]
    if arch not in SUPPORTED:
        raise ConfigError(
            "model",
            f"{name}: architecture {arch or '(none given)'!r} is not supported",
            "supported: " + ", ".join(SUPPORTED),
        )
    text = data.get("text_config") or data
    quant = text.get("quantization_config") or data.get("quantization_config")
    gemm, moe, kv = checkpoint_precision(quant, hf_quant)
    fields: dict[str, Any] = {
        "name": name,
        "hf_id": hf_id,
        "architecture": arch,
        "qk_norm": arch in QK_NORM,
        "gemm_quant": gemm,
        "moe_quant": moe,
        "kv_cache_dtype": kv,
        **_common(text, data),
        **_moe(text),
        **_attention(text),
    }
    return ModelSpec(**fields)


def _get(cfg: dict[str, Any], key: str, default: Any = None) -> Any:
    value = cfg.get(key)
    return default if value is None else value


def _common(text: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """Shapes every architecture has."""
    heads = int(text["num_attention_heads"])
    dtype = str(_get(text, "torch_dtype", _get(text, "dtype", "bfloat16")))
    tie = _get(text, "tie_word_embeddings", _get(top, "tie_word_embeddings", False))
    return {
        "num_layers": int(text["num_hidden_layers"]),
        "hidden_size": int(text["hidden_size"]),
        "num_heads": heads,
        "num_kv_heads": int(_get(text, "num_key_value_heads", heads)),
        "intermediate_size": int(_get(text, "intermediate_size", 0)),
        "vocab_size": int(text["vocab_size"]),
        "head_dim": int(_get(text, "head_dim", 0)),
        "tie_embeddings": bool(tie),
        "max_context": int(_get(text, "max_position_embeddings", 4096)),
        "dtype_bytes": DTYPE_BYTES.get(dtype, 2),
    }


def _moe(text: dict[str, Any]) -> dict[str, Any]:
    """Routed experts, shared experts and the dense layers of a MoE model."""
    routed = _get(text, "num_local_experts", _get(text, "n_routed_experts", 0))
    experts = int(_get(text, "num_experts", routed))
    if not experts:
        return {}
    active = int(_get(text, "num_experts_per_tok", _get(text, "experts_per_token", 0)))
    moe_inter = int(_get(text, "moe_intermediate_size", 0))
    shared = int(_get(text, "n_shared_experts", 0))
    shared_width = shared * (moe_inter or int(_get(text, "intermediate_size", 0)))
    if not shared_width:
        shared_width = int(
            _get(text, "shared_expert_intermediate_size", _get(text, "shared_intermediate_size", 0))
        )
        shared = 1 if shared_width else 0
    return {
        "num_experts": experts,
        "num_active_experts": active,
        "moe_intermediate_size": moe_inter,
        "num_shared_experts": shared,
        "shared_intermediate_size": shared_width,
        "num_dense_layers": _dense_layers(text),
    }


def _dense_layers(text: dict[str, Any]) -> int:
    """Layers with a dense MLP: DeepSeek's first ``first_k_dense_replace`` and those off its
    ``moe_layer_freq``; Qwen-MoE's ``mlp_only_layers`` and those off ``decoder_sparse_step``."""
    n = int(text["num_hidden_layers"])
    first_k = int(_get(text, "first_k_dense_replace", 0))
    freq = int(_get(text, "moe_layer_freq", 1)) or 1
    step = int(_get(text, "decoder_sparse_step", 1)) or 1
    only = set(_get(text, "mlp_only_layers", []))
    moe = [
        i >= first_k and i % freq == 0 and (i + 1) % step == 0 and i not in only for i in range(n)
    ]
    return moe.count(False)


def _attention(text: dict[str, Any]) -> dict[str, Any]:
    """MLA / DSA, sliding-window and linear-attention layers."""
    out: dict[str, Any] = {}
    if _get(text, "kv_lora_rank", 0):
        nope, rope = int(text["qk_nope_head_dim"]), int(text["qk_rope_head_dim"])
        out |= {
            "kv_lora_rank": int(text["kv_lora_rank"]),
            "q_lora_rank": int(_get(text, "q_lora_rank", 0)),
            "qk_nope_head_dim": nope,
            "qk_rope_head_dim": rope,
            "v_head_dim": int(text["v_head_dim"]),
            "head_dim": nope + rope,
            "index_topk": int(_get(text, "index_topk", 0)),
            "index_n_heads": int(_get(text, "index_n_heads", 0)),
            "index_head_dim": int(_get(text, "index_head_dim", 0)),
        }
    kinds = list(_get(text, "layer_types", []))
    n = int(text["num_hidden_layers"])
    window = int(_get(text, "sliding_window", 0))
    if kinds:
        sliding = kinds.count("sliding_attention")
    else:
        sliding = n if window and _get(text, "use_sliding_window", True) else 0
    linear = kinds.count("linear_attention")
    if not kinds and _get(text, "full_attention_interval", 0):
        every = int(text["full_attention_interval"])
        linear = n - n // every
    if sliding and window and sliding + linear < n:
        # a window on every layer (Mistral-7B-v0.1) is planned as full attention: Tidal's KV
        # manager bounds no request by a window, so this is the conservative reading
        out |= {"sliding_window": window, "num_sliding_layers": sliding}
    if linear:
        out |= _linear(text, linear)
    return out


def _linear(text: dict[str, Any], layers: int) -> dict[str, Any]:
    """Gated DeltaNet layers; the full-attention layers of these models gate their output."""
    state = str(_get(text, "mamba_ssm_dtype", ""))
    return {
        "num_linear_layers": layers,
        "linear_num_key_heads": int(text["linear_num_key_heads"]),
        "linear_num_value_heads": int(text["linear_num_value_heads"]),
        "linear_key_head_dim": int(text["linear_key_head_dim"]),
        "linear_value_head_dim": int(text["linear_value_head_dim"]),
        "linear_conv_kernel_dim": int(_get(text, "linear_conv_kernel_dim", 4)),
        "linear_state_dtype_bytes": DTYPE_BYTES.get(state, 0),
        "attn_output_gate": bool(_get(text, "attn_output_gate", True)),
    }
