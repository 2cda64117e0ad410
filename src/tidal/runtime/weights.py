"""Loading and saving model weights (safetensors).

Accepted names: this model's own (fused ``qkv_proj`` / ``gate_up_proj``) or Hugging Face Llama's
(``q_proj``, ``k_proj``, ``v_proj`` and ``gate_proj``, ``up_proj``), whose weights (and biases,
Qwen2) are concatenated in that order onto the fused ones; a directory's shards are merged.
A missing or misshapen tensor is an error that names it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tidal.core.errors import ConfigError
from tidal.runtime.model import LlamaForCausalLM

_FUSED = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}


def _fuse_hf_names(tensors: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    out = dict(tensors)
    for i in range(num_layers):
        prefix = f"model.layers.{i}."
        for fused, parts in _FUSED.items():
            for kind in ("weight", "bias"):
                names = [f"{prefix}{p}.{kind}" for p in parts]
                if all(n in out for n in names):
                    out[f"{prefix}{fused}.{kind}"] = torch.cat([out.pop(n) for n in names], dim=0)
    return out


_IGNORED: frozenset[str] = frozenset()
"""Checkpoint tensors that carry no weights (none so far)."""


def _files(p: Path) -> list[Path]:
    """The safetensors file, or every ``*.safetensors`` shard of a model directory."""
    if p.is_dir():
        files = sorted(p.glob("*.safetensors"))
        if not files:
            raise ConfigError("weights", f"{p} holds no *.safetensors file")
        return files
    if not p.exists():
        raise ConfigError("weights", f"file {p} does not exist", "give a .safetensors file")
    return [p]


def load_safetensors(model: LlamaForCausalLM, path: str | Path) -> None:
    """Copy every parameter of ``model`` from the safetensors file (or model directory of
    shards) at ``path``."""
    from safetensors.torch import load_file  # lazy: optional dependency (safetensors)

    p = Path(path)
    raw: dict[str, torch.Tensor] = {}
    for f in _files(p):
        raw.update(load_file(str(f)))
    tensors = _fuse_hf_names(raw, model.config.num_layers)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, param in params.items():
            t = tensors.get(name)
            if t is None:
                raise ConfigError("weights", f"{p} has no tensor {name!r}")
            if tuple(t.shape) != tuple(param.shape):
                raise ConfigError(
                    "weights",
                    f"{p}: {name} has shape {tuple(t.shape)}, the model needs {tuple(param.shape)}",
                    "check that --model matches the checkpoint",
                )
            param.copy_(t.to(param.dtype))
    unused = sorted(set(tensors) - set(params) - _IGNORED)
    if model.config.tie_embeddings:
        unused = [n for n in unused if n != "lm_head.weight"]
    if unused:
        shown = ", ".join(unused[:3]) + (" ..." if len(unused) > 3 else "")
        raise ConfigError(
            "weights",
            f"{p} holds {len(unused)} tensors the model has no place for ({shown})",
            "check that the model's config (biases, tied embeddings) matches the checkpoint",
        )


def save_safetensors(model: LlamaForCausalLM, path: str | Path) -> None:
    from safetensors.torch import save_file  # lazy: optional dependency (safetensors)

    tensors = {k: v.detach().cpu().contiguous() for k, v in model.named_parameters()}
    save_file(tensors, str(path))
