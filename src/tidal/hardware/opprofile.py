"""Measured GPU operator profiles: the ``tidal-gpu-profile/1`` format, its loader and writer.

One file holds the operator times of one GPU (spec: ``docs/PROFILE_FORMAT.md``). All times are
medians in microseconds (``*_us``); token, batch and context grids are ascending integers; a
cell of a 2-D table that was not measured is ``null``. Sections:

* ``linear`` — per (model, TP): per-layer operators against the step's token count
  (``layer_us``: GEMMs, norms, RoPE, activation, residual add; one shard's time) and per-step
  operators (``step_us``: the embedding gather, optionally the LM head by sampled rows);
* ``attention`` — per per-GPU head shape (q heads, KV heads, head dim, KV block size): decode
  time per layer on a batch × per-request-context grid, prefill time per layer on a
  chunk × cached-context grid (one chunk);
* ``all_reduce`` — per (link kind, TP): one all-reduce's time against its message bytes;
* ``host`` — per (model, TP): per-step host times (ms, as measured) against the batch size.

A deployment (gpu, model, tp) reads ``linear[model, tp]``, ``attention`` of its per-GPU head
shape (``heads / tp``), ``all_reduce[link, tp]`` and ``host[model, tp]`` (:func:`deployment`).
Files are JSON, gzip-compressed when the name ends in ``.gz``; writes are atomic.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tidal.core.bounded import read_bytes
from tidal.core.errors import ConfigError, TraceError

FORMAT = "tidal-gpu-profile/1"
BUNDLED_DIR = Path(__file__).resolve().parent.parent / "data" / "profiles"
LAYER_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
"""Per-layer operators (Vidur's names). GEMMs: attn_pre_proj (QKV), attn_post_proj (O),
mlp_up_proj (gate+up), mlp_down_proj; the rest are elementwise."""
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
STEP_OPS = ("emb", "lm_head")
"""Per-step operators: ``emb`` by step tokens; ``lm_head`` by sampled rows (optional)."""
HOST_TIMES = ("schedule", "sampler", "prepare_inputs", "process_outputs", "model_execution")
LinkKind = Literal["dgx", "pairwise_nvlink", "pcie", "local"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Provenance(_Strict):
    repo: str
    commit: str
    path: str
    licence: str = "MIT"


class ModelShape(_Strict):
    """The whole model's shape the operators were timed with (before TP sharding)."""

    hidden: int
    q_heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    gated_mlp: bool = True


def _check_grid(name: str, grid: list[int], columns: dict[str, list[float]]) -> None:
    if not grid or any(b <= a for a, b in itertools.pairwise(grid)):
        raise ValueError(f"{name}: grid must be non-empty and strictly ascending")
    for op, col in columns.items():
        if len(col) != len(grid):
            raise ValueError(f"{name}.{op}: {len(col)} values for {len(grid)} grid points")


class LinearOps(_Strict):
    model: str
    tp: int = Field(ge=1)
    shape: ModelShape
    tokens: list[int]
    layer_us: dict[str, list[float]]
    step_us: dict[str, list[float]] = {}
    provenance: Provenance | None = None

    @model_validator(mode="after")
    def _grid(self) -> LinearOps:
        _check_grid(f"linear[{self.model}/tp{self.tp}]", self.tokens, self.layer_us)
        _check_grid(f"linear[{self.model}/tp{self.tp}]", self.tokens, self.step_us)
        return self


class Grid2D(_Strict):
    """``us[i][j]``: time at ``rows[i]`` × ``cols[j]`` (null: not measured)."""

    rows: list[int]
    cols: list[int]
    us: list[list[float | None]]

    @model_validator(mode="after")
    def _shape(self) -> Grid2D:
        _check_grid("rows", self.rows, {})
        _check_grid("cols", self.cols, {})
        if len(self.us) != len(self.rows) or any(len(r) != len(self.cols) for r in self.us):
            raise ValueError("us must be len(rows) lists of len(cols) values")
        return self


class AttentionOps(_Strict):
    """Per layer, one GPU. ``decode``: rows = batch size, cols = context per request.
    ``prefill``: rows = chunk tokens, cols = cached context before the chunk."""

    q_heads: int
    kv_heads: int
    head_dim: int
    block_size: int = 16
    decode: Grid2D | None = None
    prefill: Grid2D | None = None
    provenance: Provenance | None = None


class AllReduceOps(_Strict):
    link: LinkKind
    tp: int = Field(ge=2)
    bytes: list[int]
    us: list[float]
    provenance: Provenance | None = None

    @model_validator(mode="after")
    def _grid(self) -> AllReduceOps:
        _check_grid(f"all_reduce[{self.link}/tp{self.tp}]", self.bytes, {"us": self.us})
        return self


class HostOps(_Strict):
    """Host time per step (ms) against the batch size; ``model_execution`` is the measured
    end-to-end forward (a cross-check of the kernel sum), not a host cost."""

    model: str
    tp: int = Field(ge=1)
    batch: list[int]
    ms: dict[str, list[float]]
    provenance: Provenance | None = None

    @model_validator(mode="after")
    def _grid(self) -> HostOps:
        _check_grid(f"host[{self.model}/tp{self.tp}]", self.batch, self.ms)
        return self


class GPUProfile(_Strict):
    format: Literal["tidal-gpu-profile/1"] = "tidal-gpu-profile/1"
    gpu: str
    source: str
    """Who measured: ``vidur`` (imported) or ``tidal profile-gpu``."""
    notes: str = ""
    linear: list[LinearOps] = []
    attention: list[AttentionOps] = []
    all_reduce: list[AllReduceOps] = []
    host: list[HostOps] = []


@dataclass(frozen=True)
class Deployment:
    """What one (gpu, model, tp) finds in a profile; ``linear`` is always present."""

    gpu: str
    source: str
    linear: LinearOps
    attention: AttentionOps | None
    all_reduce: AllReduceOps | None
    host: HostOps | None

    @property
    def key(self) -> str:
        return f"{self.source}/{self.gpu}/{self.linear.model}/tp{self.linear.tp}"


def save_profile(profile: GPUProfile, path: str | Path) -> None:
    """Write atomically (temp file + rename); gzip when ``path`` ends in ``.gz``."""
    p = Path(path)
    data = json.dumps(profile.model_dump(mode="json", exclude_none=True), separators=(",", ":"))
    raw = gzip.compress(data.encode(), mtime=0) if p.suffix == ".gz" else data.encode()
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, 0o644)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_profile(path: str | Path) -> GPUProfile:
    """Read and validate a profile; errors name the file and the bad field."""
    p = Path(path)
    if not p.exists():
        raise ConfigError("profile", f"{p} does not exist", "give a tidal-gpu-profile/1 file")
    try:
        raw = read_bytes(p, max_line=None)
        return GPUProfile.model_validate_json(raw)
    except ValidationError as err:
        what = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ConfigError("profile", f"{p} is not a valid {FORMAT} file: {what}") from None
    except (OSError, EOFError, ValueError, TraceError) as err:
        raise ConfigError("profile", f"{p} is not a valid {FORMAT} file: {err}") from None


@lru_cache(maxsize=1)
def bundled_profiles() -> tuple[GPUProfile, ...]:
    """The profiles shipped as package data (``tidal/data/profiles/*.json.gz``)."""
    return tuple(load_profile(p) for p in sorted(BUNDLED_DIR.glob("*.json.gz")))


def deployment(
    gpu: str,
    model: str,
    tp: int,
    profiles: tuple[GPUProfile, ...] | None = None,
    heads: tuple[int, int, int] | None = None,
    link: str | None = None,
) -> Deployment | None:
    """The measured data of (gpu, model, tp), or None when no profile has its linear ops.

    ``heads`` = (q heads, KV heads, head dim) of the whole model selects the attention table of
    the per-GPU shape (KV heads replicated when tp exceeds them); ``link`` prefers an
    all-reduce link kind (default: ``dgx``, then any)."""
    for prof in bundled_profiles() if profiles is None else profiles:
        if prof.gpu != gpu:
            continue
        lin = next((x for x in prof.linear if x.model == model and x.tp == tp), None)
        if lin is None:
            continue
        attn = None
        if heads is not None:
            q, kv, d = heads[0] // tp, max(heads[1] // tp, 1), heads[2]
            attn = next(
                (a for a in prof.attention if (a.q_heads, a.kv_heads, a.head_dim) == (q, kv, d)),
                None,
            )
        ars = [a for a in prof.all_reduce if a.tp == tp]
        ars.sort(key=lambda a: (a.link != (link or "dgx"), a.link))
        host = next((h for h in prof.host if h.model == model and h.tp == tp), None)
        return Deployment(gpu, prof.source, lin, attn, ars[0] if ars else None, host)
    return None
