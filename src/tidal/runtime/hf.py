"""Hugging Face model directories: ``config.json`` → the runtime's decoder shape.

Accepted architectures are the dense decoders the runtime implements (:mod:`.model`):
``LlamaForCausalLM``, ``MistralForCausalLM`` (without a sliding window) and
``Qwen2ForCausalLM`` (Llama's layer with biases on the Q, K and V projections). Read fields:
``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``
(default: the heads), ``head_dim`` (default ``hidden_size / heads``), ``intermediate_size``,
``vocab_size``, ``max_position_embeddings``, ``rms_norm_eps``, ``tie_word_embeddings`` and
the RoPE base (``rope_theta``, or ``rope_parameters.rope_theta`` since transformers 5). What the
runtime would compute differently (scaled RoPE, a sliding window, another activation, biases on
the output or MLP projections) is refused with the field's name, never silently approximated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tidal.core.errors import ConfigError
from tidal.runtime.model import LlamaConfig

ARCHITECTURES = {
    "LlamaForCausalLM": False,
    "MistralForCausalLM": False,
    "Qwen2ForCausalLM": True,
}
"""Architecture → whether its Q/K/V projections carry biases."""


def is_hf_dir(model: str | os.PathLike[str]) -> bool:
    """A directory holding ``config.json`` (what ``tidal serve /path/to/model`` takes)."""
    p = Path(model).expanduser()
    return p.is_dir() and (p / "config.json").is_file()


def read_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(path).expanduser() / "config.json"
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError("model", f"cannot read {p}: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError("model", f"{p} is not a JSON object")
    return data


def _refuse(name: str, cond: bool, what: str) -> None:
    if cond:
        raise ConfigError(
            f"config.json: {name}", f"{what}; the runtime implements dense Llama/Qwen2 decoders"
        )


def _rope_theta(c: dict[str, Any]) -> float:
    params = c.get("rope_parameters") or {}
    scaling = c.get("rope_scaling")
    kind = params.get("rope_type", "default") if isinstance(params, dict) else "default"
    _refuse("rope_scaling", bool(scaling), f"scaled RoPE {scaling!r} is not implemented")
    _refuse("rope_parameters.rope_type", kind != "default", f"RoPE type {kind!r}")
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    return float(theta or c.get("rope_theta") or 10000.0)


def hf_llama_config(path: str | os.PathLike[str]) -> LlamaConfig:
    c = read_config(path)
    arch = (c.get("architectures") or ["?"])[0]
    if arch not in ARCHITECTURES:
        raise ConfigError(
            "config.json: architectures",
            f"{arch} is not supported",
            "supported: " + ", ".join(ARCHITECTURES),
        )
    act = c.get("hidden_act", "silu")
    _refuse("hidden_act", act != "silu", f"activation {act!r}")
    _refuse("attention_bias", bool(c.get("attention_bias")), "biases on every attention projection")
    _refuse("mlp_bias", bool(c.get("mlp_bias")), "biases on the MLP")
    window = c.get("sliding_window") if c.get("use_sliding_window", True) else None
    _refuse("sliding_window", window is not None, f"a sliding window of {window}")
    try:
        heads = int(c["num_attention_heads"])
        hidden = int(c["hidden_size"])
        return LlamaConfig(
            str(path),
            int(c["num_hidden_layers"]),
            hidden,
            heads,
            int(c.get("num_key_value_heads") or heads),
            int(c.get("head_dim") or hidden // heads),
            int(c["intermediate_size"]),
            int(c["vocab_size"]),
            max_position=int(c.get("max_position_embeddings", 4096)),
            rope_theta=_rope_theta(c),
            rms_norm_eps=float(c.get("rms_norm_eps", 1e-6)),
            tie_embeddings=bool(c.get("tie_word_embeddings", False)),
            qkv_bias=ARCHITECTURES[arch],
        )
    except KeyError as err:
        raise ConfigError(f"config.json: {err.args[0]}", "missing") from None
    except (TypeError, ValueError) as err:
        raise ConfigError("model", f"{path}/config.json: {err}") from None
