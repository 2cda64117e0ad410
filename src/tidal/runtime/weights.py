"""Loading and saving model weights (safetensors).

Accepted names: this model's own (fused ``qkv_proj`` / ``gate_up_proj``) or Hugging Face Llama's
(``q_proj``, ``k_proj``, ``v_proj`` and ``gate_proj``, ``up_proj``), which are concatenated in
that order onto the fused matrices. A missing or misshapen tensor is an error that names it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tidal.core.errors import ConfigError
from tidal.runtime.model import LlamaForCausalLM

_FUSED = {
    "self_attn.qkv_proj.weight": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj.weight": ("mlp.gate_proj", "mlp.up_proj"),
}


def _fuse_hf_names(tensors: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    out = dict(tensors)
    for i in range(num_layers):
        prefix = f"model.layers.{i}."
        for fused, parts in _FUSED.items():
            names = [f"{prefix}{p}.weight" for p in parts]
            if all(n in out for n in names):
                out[prefix + fused] = torch.cat([out.pop(n) for n in names], dim=0)
    return out


def load_safetensors(model: LlamaForCausalLM, path: str | Path) -> None:
    """Copy every parameter of ``model`` from the safetensors file at ``path``."""
    from safetensors.torch import load_file

    p = Path(path)
    if not p.exists():
        raise ConfigError("weights", f"file {p} does not exist", "give a .safetensors file")
    tensors = _fuse_hf_names(load_file(str(p)), model.config.num_layers)
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


def save_safetensors(model: LlamaForCausalLM, path: str | Path) -> None:
    from safetensors.torch import save_file

    tensors = {k: v.detach().cpu().contiguous() for k, v in model.named_parameters()}
    save_file(tensors, str(path))
