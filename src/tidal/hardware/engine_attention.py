"""Attention of MLA, DSA and hybrid linear-attention models from the engine's measured tables.

:mod:`engine_tables` prices GQA attention from the engines' context/generation attention
tables; the attention variants below have tables of their own in ``aiconfigurator-core``
(``systems/data/<gpu>/<family>/<engine>/<version>/``), all per layer and one GPU, with the
per-GPU query heads ``num_heads / TP``:

* **MLA module** (vLLM: ``mla/…/mla_{context,generation}_module_perf.parquet``; DSA, both
  engines: ``sparse_attention/…/dsa_{context,generation}_module_perf.parquet``). The collector
  times one ``DeepseekV2MLAAttention`` forward from hidden states to output: the fused q/kv
  down projection, q/kv up projections (absorbed in decode), RoPE, the attention kernel, the
  output projection and, for DSA, the indexer (its projections, the FP8 MQA logits and the
  top-k) — at TP 1 with the head count set to the per-GPU heads, which is exactly one GPU's
  share under TP (the down projections and the indexer are replicated, the rest is
  head-sharded). So a module grid *is* the layer's attention block and
  :func:`projection_us` adds no projection GEMMs beside it. Rows are keyed by the model whose
  shapes were timed; a model is priced from them only when its attention shapes equal that
  model's (Kimi-K2.5 uses DeepSeek-V3's rows: same hidden size and ranks, 64 heads).
* **MLA kernels** (SGLang: ``mla/…/{context,generation}_mla_perf.parquet`` and
  ``mla_bmm/…/mla_bmm_perf.parquet``): the attention kernel alone, for DeepSeek's latent
  shapes (kv rank 512, rope 64, nope 128, v 128). Decode adds the absorbed per-head BMMs
  before and after the kernel (``mla_gen_pre``/``mla_gen_post``); prefill adds the kv up
  projection of the prompt's tokens (a GEMM); the q/kv down projection, q up projection and
  output projection are per-token GEMMs (:func:`projection_us`).
* **Gated DeltaNet** (``linear_attention/…/gdn_perf.parquet``): the short causal convolution
  plus the delta rule (chunked kernel in prefill, recurrent kernel in decode), per
  (batch, sequence length) with per-GPU key/value heads; its in/out projections are GEMMs.
  The state is constant, so the decode cost is a function of the batch alone (a row constant
  in context); a hybrid model's grids are the layer-weighted mean of its full-attention and
  linear layers (:func:`mix`), as sliding-window layers are blended.

Decode grids: rows = batch, cols = context per request (the module tables' ``step`` is the
sequence length including the new token; the kernel tables' ``isl + step``). Prefill grids:
rows = prompts, cols = prompt length (no cached prefix). A model whose shapes, heads or dtypes
no table holds gets None, and the caller falls back to the corrected roofline and names it in
``parts``. Known approximations: a mixed step sums the decode and prefill modules, so the
module's fixed per-forward cost (its smallest cell, ~90 µs on H200) is paid twice; a chunk
after a cached prefix costs the module's T(p + c) − T(p) plus its fixed cost
(:mod:`tidal.hardware.engine_prefill`: the projections and GDN at the chunk's c tokens); vLLM's
up-projection of the p cached latents is added by ``engine_perf.mla_context_up``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol

import polars as pl

from tidal.hardware.engine_data import TableSet, _pick, data_root, read_table, version_key
from tidal.hardware.engine_tables import Grid, _bracket, _grid, attention_grids
from tidal.hardware.interp import Curve
from tidal.hardware.models import ModelSpec, get_model


class Deployment(Protocol):
    """What :class:`~tidal.hardware.engine_deployment.EngineDeployment` offers this module."""

    ts: TableSet
    model: ModelSpec
    tp: int
    notes: list[str]
    tokens: list[int]

    @property
    def parts(self) -> dict[str, str]: ...

    def gemm(self, dtype: str, n: int, k: int, part: str) -> list[float]: ...

    def _kv_dtype(self) -> str: ...


# ------------------------------------------------------------------------------- tables
@lru_cache(maxsize=64)
def attention_table(ts: TableSet, family: str, name: str) -> tuple[pl.DataFrame, str] | None:
    """(table, version read) of ``family/<engine>/<version>/name``: the deployment's engine
    version, else the newest older one holding the file, else the oldest newer one."""
    d = data_root() / "data" / ts.system / family / ts.engine
    if not d.is_dir():
        return None
    have = sorted((v.name for v in d.iterdir() if (v / name).is_file()), key=version_key)
    v = _pick(have, ts.version)
    return None if v is None else (read_table(d / v / name), v)


def attention_kind(m: ModelSpec) -> str:
    """``dsa`` | ``mla`` | ``hybrid`` (Gated DeltaNet layers) | ``gqa``."""
    if m.is_mla:
        return "dsa" if m.index_topk else "mla"
    return "hybrid" if m.num_linear_layers else "gqa"


def _signature(m: ModelSpec) -> tuple[int, ...]:
    """The shapes an MLA/DSA module's time depends on, but for the (per-GPU) head count."""
    return (
        m.hidden_size, m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim,
        m.v_head_dim, m.index_topk, m.index_n_heads, m.index_head_dim,
    )  # fmt: skip


@lru_cache(maxsize=32)
def _table_model_signature(name: str) -> tuple[int, ...] | None:
    try:
        return _signature(get_model(name))
    except Exception:  # a table's model without a shipped config: never matched
        return None


def _same_shape_models(df: pl.DataFrame, m: ModelSpec) -> list[str]:
    """The table's models whose attention shapes are ``m``'s (its own rows first)."""
    sig = _signature(m)
    names = [n for n in sorted(df["model"].unique().to_list()) if _table_model_signature(n) == sig]
    return sorted(names, key=lambda n: n not in (m.hf_id, m.name))


def _bf16_compute(df: pl.DataFrame) -> pl.DataFrame:
    """Rows with bf16 attention compute: the engines' default (FP8 prefill queries are an
    opt-in flag on Blackwell)."""
    return df.filter(pl.col("mla_dtype") == "bfloat16") if "mla_dtype" in df.columns else df


def _pick_dtype(have: list[str], want: str) -> str | None:
    """``want`` if measured, else the nearest measured GEMM dtype (FP8 flavours, then bf16)."""
    order = [want, *(["fp8_block", "fp8"] if want.startswith("fp8") else []), "bfloat16"]
    return next((d for d in order if d in have), None)


# ------------------------------------------------------------------------------- modules
def _module_rows(
    df: pl.DataFrame, m: ModelSpec, heads: int, kv_dtype: str, op: str
) -> tuple[pl.DataFrame, str] | None:
    """Rows of one op for the model's shapes, per-GPU heads, KV dtype and GEMM dtype."""
    df = _bf16_compute(df).filter((pl.col("op_name") == op) & (pl.col("num_heads") == heads)
                                  & (pl.col("kv_cache_dtype") == kv_dtype))  # fmt: skip
    for name in _same_shape_models(df, m):
        sub = df.filter(pl.col("model") == name)
        dtype = _pick_dtype(sub["gemm_type"].unique().to_list(), m.gemm_quant)
        if dtype is not None:
            return sub.filter(pl.col("gemm_type") == dtype), f"{name} {dtype}"
    return None


@lru_cache(maxsize=16)
def module_grids(
    ts: TableSet, m: ModelSpec, tp: int, kv_dtype: str
) -> tuple[Grid, Grid, str] | None:
    """(decode, prefill, source) of the MLA or DSA attention module, or None."""
    dsa = attention_kind(m) == "dsa"
    family, stem = ("sparse_attention", "dsa") if dsa else ("mla", "mla")
    gen = attention_table(ts, family, f"{stem}_generation_module_perf.parquet")
    ctx = attention_table(ts, family, f"{stem}_context_module_perf.parquet")
    if gen is None or ctx is None:
        return None
    heads = m.num_heads // tp
    g = _module_rows(gen[0], m, heads, kv_dtype, f"{stem}_generation_module")
    c = _module_rows(ctx[0], m, heads, kv_dtype, f"{stem}_context_module")
    if g is None or c is None:
        return None
    # vLLM logs a decode's sequence length (new token included) as ``step`` with isl 1;
    # SGLang logs the cached context as ``step`` (kernel-table convention: isl + step).
    ctx_col = pl.col("step") if ts.engine == "vllm" else pl.col("isl") + pl.col("step")
    dec = _grid(g[0].with_columns(ctx_col.alias("ctx")), "batch_size", "ctx")
    pre = _grid(c[0].filter(pl.col("step") == 0), "batch_size", "isl")
    src = f"engine:{family}/{ts.engine}-{gen[1]}/{stem}_module ({g[1]}, {heads} heads)"
    return dec, pre, src


# ------------------------------------------------------------------------------- MLA kernels
DEEPSEEK_LATENT = (512, 64, 128, 128)
"""(kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim) the MLA kernel and BMM
tables were timed with (DeepSeek-V3; Kimi-K2 shares them)."""


def _bmm_us(ts: TableSet, heads: int, fp8: bool) -> Curve | None:
    """Absorbed decode BMMs (before + after the kernel) against the tokens."""
    got = attention_table(ts, "mla_bmm", "mla_bmm_perf.parquet")
    if got is None:
        return None
    df = got[0].filter(pl.col("num_heads") == heads)
    have = df["bmm_dtype"].unique().to_list()
    dtype = "fp8" if fp8 and "fp8" in have else "bfloat16"
    df = df.filter(pl.col("bmm_dtype") == dtype)
    g = df.group_by("op_name", "num_tokens").agg(pl.col("latency").min())
    g = g.group_by("num_tokens").agg(pl.col("latency").sum(), pl.len()).filter(pl.col("len") == 2)
    if g.height == 0:
        return None
    g = g.sort("num_tokens")
    return Curve([float(x) for x in g["num_tokens"]], [1e3 * v for v in g["latency"]])


@lru_cache(maxsize=16)
def kernel_grids(ts: TableSet, m: ModelSpec, tp: int, kv_dtype: str
                 ) -> tuple[Grid, Grid, str] | None:  # fmt: skip
    """(decode with the absorbed BMMs, prefill kernel only, source), or None."""
    shape = (m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim)
    gen = attention_table(ts, "mla", "generation_mla_perf.parquet")
    ctx = attention_table(ts, "mla", "context_mla_perf.parquet")
    heads = m.num_heads // tp
    bmm = _bmm_us(ts, heads, m.gemm_quant.startswith("fp8"))
    if shape != DEEPSEEK_LATENT or gen is None or ctx is None or bmm is None:
        return None

    def rows(df: pl.DataFrame) -> pl.DataFrame:
        df = _bf16_compute(df)
        return df.filter((pl.col("num_heads") == heads) & (pl.col("kv_cache_dtype") == kv_dtype))

    g, c = rows(gen[0]), rows(ctx[0]).filter(pl.col("step") == 0)
    if g.height == 0 or c.height == 0:
        return None
    r, cols, us = _grid(g.with_columns((pl.col("isl") + pl.col("step")).alias("ctx")),
                        "batch_size", "ctx")  # fmt: skip
    dec = r, cols, [[None if v is None else v + bmm.at(b) for v in row]
                    for b, row in zip(r, us, strict=True)]  # fmt: skip
    src = f"engine:mla/{ts.engine}-{gen[1]}/mla kernels + mla_bmm ({heads} heads)"
    return dec, _grid(c, "batch_size", "isl"), src


# ------------------------------------------------------------------------------- GDN
GDN_KERNELS = {"context": 2, "generation": 2}
"""Kernels per phase: the causal convolution and the delta rule."""


@lru_cache(maxsize=16)
def gdn_grids(ts: TableSet, m: ModelSpec, tp: int) -> tuple[Grid, Grid, str] | None:
    """(decode: rows batch × one column, prefill: batch × length, source) of one Gated
    DeltaNet layer, conv + delta rule; None when no table holds the per-GPU shape."""
    got = attention_table(ts, "linear_attention", "gdn_perf.parquet")
    if got is None or m.linear_num_key_heads % tp or m.linear_num_value_heads % tp:
        return None
    df = got[0].filter(
        (pl.col("d_model") == m.hidden_size)
        & (pl.col("num_k_heads") == m.linear_num_key_heads // tp)
        & (pl.col("num_v_heads") == m.linear_num_value_heads // tp)
        & (pl.col("head_k_dim") == m.linear_key_head_dim)
        & (pl.col("head_v_dim") == m.linear_value_head_dim)
        & (pl.col("d_conv") == m.linear_conv_kernel_dim)
    )
    grids = []
    for phase, col in (("generation", None), ("context", "seq_len")):
        p = df.filter(pl.col("phase") == phase)
        p = p.group_by("kernel_source", "batch_size", "seq_len").agg(pl.col("latency").min())
        p = p.group_by("batch_size", "seq_len").agg(pl.col("latency").sum(), pl.len())
        p = p.filter(pl.col("len") == GDN_KERNELS[phase])  # both kernels measured
        if p.height == 0:
            return None
        if col is None:
            p = p.with_columns(pl.lit(1).alias("one"))
        grids.append(_grid(p, "batch_size", col or "one"))
    src = f"engine:linear_attention/{ts.engine}-{got[1]}/gdn"
    return grids[0], grids[1], src


def _interp(g: Grid, r: float, c: float) -> float | None:
    """``g`` at (r, c): linear between measured points, held below the first, proportional
    beyond the last (the work grows with batch and length); None where a corner is missing."""
    rows, cols, us = g
    ri, ci = {v: i for i, v in enumerate(rows)}, {v: j for j, v in enumerate(cols)}
    out = 0.0
    across = [(cols[0], 1.0)] if len(cols) == 1 else _bracket(cols, int(c))  # constant
    for a, wa in _bracket(rows, int(r)):
        for b, wb in across:
            v = us[ri[a]][ci[b]]
            if v is None:
                return None
            out += wa * wb * v
    return out


def mix(full: Grid | None, part: Grid | None, share: float) -> Grid | None:
    """(1 − share)·full + share·part on ``full``'s points (``part`` interpolated there)."""
    if full is None or part is None:
        return None
    rows, cols, us = full

    def cell(a: float | None, r: int, c: int) -> float | None:
        b = _interp(part, r, c)
        return None if a is None or b is None else (1.0 - share) * a + share * b

    return rows, cols, [[cell(a, r, c) for a, c in zip(row, cols, strict=True)]
                        for r, row in zip(rows, us, strict=True)]  # fmt: skip


# ------------------------------------------------------------------------------- deployment
def _sum(*curves: list[float]) -> list[float]:
    return [sum(v) for v in zip(*curves, strict=True)]


def _gqa_proj(dep: Deployment) -> list[float]:
    """QKV (Q twice as wide with an output gate) and O of a full-attention layer."""
    m, tp = dep.model, dep.tp
    q, kv, d = m.num_heads // tp, max(m.num_kv_heads // tp, 1), m.d_head
    gate = 2 if m.attn_output_gate else 1
    qkv = dep.gemm(m.gemm_quant, (gate * q + 2 * kv) * d, m.hidden_size, "attention_proj")
    return _sum(qkv, dep.gemm(m.gemm_quant, m.hidden_size, q * d, "attention_proj"))


def _gdn_proj(dep: Deployment) -> list[float]:
    """A Gated DeltaNet layer's projections: q, k, v, z; the β/α gates; the output."""
    m, tp, h, dt = dep.model, dep.tp, dep.model.hidden_size, dep.model.gemm_quant
    k_dim = m.linear_num_key_heads * m.linear_key_head_dim // tp
    v_dim = m.linear_num_value_heads * m.linear_value_head_dim // tp
    qkvz = dep.gemm(dt, 2 * k_dim + 2 * v_dim, h, "attention_proj")
    ba = dep.gemm(dt, max(2 * m.linear_num_value_heads // tp, 1), h, "attention_proj")
    return _sum(qkvz, ba, dep.gemm(dt, h, v_dim, "attention_proj"))


def _mla_proj(dep: Deployment, kv_up: bool) -> list[float]:
    """MLA's per-token GEMMs outside the attention kernel: the q/kv down projection (replicated
    under TP), the q up projection, the output, DSA's indexer projections; the kv up
    projection only when ``kv_up`` (no table prices it with the prefill)."""
    m, tp, h, dt = dep.model, dep.tp, dep.model.hidden_size, dep.model.gemm_quant
    heads, qk = m.num_heads // tp, m.qk_nope_head_dim + m.qk_rope_head_dim
    ql, kv_a = m.q_lora_rank, m.kv_lora_rank + m.qk_rope_head_dim
    parts = [dep.gemm(dt, ql + kv_a if ql else kv_a, h, "attention_proj"),
             dep.gemm(dt, heads * qk, ql or h, "attention_proj"),
             dep.gemm(dt, h, heads * m.v_head_dim, "attention_proj")]  # fmt: skip
    if kv_up:
        n_up = heads * (m.qk_nope_head_dim + m.v_head_dim)
        parts.append(dep.gemm(dt, n_up, m.kv_lora_rank, "attention_proj"))
    if m.index_n_heads:
        idx_q = m.index_n_heads * m.index_head_dim
        idx_kw = m.index_head_dim + m.index_n_heads  # the indexer's key and head weights
        parts += [dep.gemm(dt, idx_q, ql or h, "attention_proj"),
                  dep.gemm(dt, idx_kw, h, "attention_proj")]  # fmt: skip
    return _sum(*parts)


def projection_us(dep: Deployment) -> list[float] | None:
    """Per-layer attention projections (µs on ``dep.tokens``) of an MLA, DSA, hybrid or gated
    model; None for a plain GQA model (the caller's QKV + O)."""
    m, kind = dep.model, attention_kind(dep.model)
    if kind in ("mla", "dsa"):
        mod = module_grids(dep.ts, m, dep.tp, dep._kv_dtype())
        if mod is not None:
            dep.parts["attention_proj"] = f"{mod[2]}: inside the attention module"
            return [0.0] * len(dep.tokens)
        kern = kernel_grids(dep.ts, m, dep.tp, dep._kv_dtype()) if kind == "mla" else None
        return _mla_proj(dep, kv_up=kern is None)
    if kind == "hybrid":
        lin, L = m.num_linear_layers, m.num_layers
        full, gdn = _gqa_proj(dep), _gdn_proj(dep)
        return [((L - lin) * a + lin * b) / L for a, b in zip(full, gdn, strict=True)]
    return _gqa_proj(dep) if m.attn_output_gate else None


def grids(dep: Deployment) -> tuple[Grid | None, Grid | None] | None:
    """(decode, prefill) per-layer grids of an MLA, DSA or hybrid model (None: neither is
    tabled, the corrected roofline prices attention); None for a GQA model."""
    m, ts, tp, kv = dep.model, dep.ts, dep.tp, dep._kv_dtype()
    kind = attention_kind(m)
    if kind == "gqa":
        return None
    if kind == "hybrid":
        return _hybrid(dep)
    mod = module_grids(ts, m, tp, kv)
    if mod is not None:
        dep.parts["attention_decode"] = dep.parts["attention_prefill"] = mod[2]
        return mod[0], mod[1]
    kern = kernel_grids(ts, m, tp, kv) if kind == "mla" else None
    if kern is None:
        dep.notes.append(
            f"attention: no {ts.engine} {kind.upper()} table on {ts.system} for "
            f"{m.num_heads // tp} heads/GPU, kv {kv}, these shapes; corrected roofline used"
        )
        return None, None
    dec, (rows, cols, us), src = kern
    heads = m.num_heads // tp
    n_up = heads * (m.qk_nope_head_dim + m.v_head_dim)
    up = Curve([float(t) for t in dep.tokens],
               dep.gemm(m.gemm_quant, n_up, m.kv_lora_rank, "attention_prefill_kv_up"))  # fmt: skip
    pre = rows, cols, [
        [None if v is None else v + up.at(b * s) for s, v in zip(cols, row, strict=True)]
        for b, row in zip(rows, us, strict=True)
    ]
    dep.parts["attention_decode"] = dep.parts["attention_prefill"] = src
    return dec, pre


def _hybrid(dep: Deployment) -> tuple[Grid | None, Grid | None]:
    m, tp = dep.model, dep.tp
    q, kv, d = m.num_heads // tp, max(m.num_kv_heads // tp, 1), m.d_head
    dec, pre = attention_grids(dep.ts, q, kv, d, dep._kv_dtype())
    gdn = gdn_grids(dep.ts, m, tp)
    if gdn is None:
        dep.notes.append(f"attention: no {dep.ts.engine} Gated DeltaNet table on "
                         f"{dep.ts.system} for these shapes; corrected roofline used")  # fmt: skip
        return None, None
    share = m.num_linear_layers / m.num_layers
    dec, pre = mix(dec, gdn[0], share), mix(pre, gdn[1], share)
    src = f"{gdn[2]} + engine:attention/{dep.ts.engine}-{dep.ts.family_version('attention')}"
    for key, g in (("attention_decode", dec), ("attention_prefill", pre)):
        if g is not None:
            dep.parts[key] = src
    return dec, pre
