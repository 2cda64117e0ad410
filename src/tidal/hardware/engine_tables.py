"""Operator curves of one deployment cut from the engine's measured tables (:mod:`engine_data`).

Each function returns grid points (x ascending, latency in **microseconds**) that the step
model turns into monotone curves; None when the table has no row for the shape, so the caller
falls back to the corrected roofline for that part and says so.

* :func:`gemm_us` — an (m×k)·(k×n) GEMM of one dtype against m (tokens). A shape between the
  measured n and k values is interpolated bilinearly in (n, k) at each measured m (latency is
  close to affine in n·k at fixed m, which bilinear interpolation reproduces exactly); beyond
  the largest measured n or k the time scales in proportion (an LM head of 152k columns is
  2.3 GEMMs of 65k), below the smallest it is held at the smallest's.
* :func:`attention_grids` — per-layer attention of one per-GPU head shape: decode (rows: batch,
  cols: context per request) and prefill (rows: prompts in the batch, cols: prompt length).
* :func:`moe_us` — a fused MoE layer against the tokens entering it.
* :func:`allreduce_us` — one all-reduce against its message bytes.

The communication tables' ``message_size`` counts **elements** of the row's dtype
(``allreduce_dtype`` / ``nccl_dtype``), not bytes: the package's collectives are queried with
tokens × hidden elements, and read as elements its H100 rows give the bus bandwidths an
NVSwitch system reaches (NCCL all-reduce, 8 GPUs, 2^28 half elements in 2.11 ms: 445 GB/s bus
bandwidth; read as bytes 222 GB/s, half of what NVLink 4 sustains). :func:`allreduce_us` and
:func:`nccl_us` return bytes (:data:`ELEMENT_BYTES`).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from functools import lru_cache

import numpy as np
import polars as pl

from tidal.hardware.engine_data import TableSet, nccl_table, table

Points = tuple[list[float], list[float]]

ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "int8": 1,
                 "fp8": 1}  # fmt: skip
"""Bytes per element of a communication table's dtype column."""


def _message_bytes(df: pl.DataFrame, dtype_col: str) -> pl.DataFrame:
    """The rows with ``message_size`` turned from elements into bytes (their dtype's width;
    a table without the dtype column holds bf16 elements)."""
    if dtype_col in df.columns:
        dtypes = set(df[dtype_col].unique().to_list())
        unknown = dtypes - set(ELEMENT_BYTES)
        if unknown:
            raise ValueError(f"communication table dtype {sorted(unknown)}: element size unknown")
        width = pl.col(dtype_col).replace_strict(ELEMENT_BYTES, return_dtype=pl.Int64)
    else:
        width = pl.lit(2, dtype=pl.Int64)
    return df.with_columns(pl.col("message_size") * width)


# ------------------------------------------------------------------------------- GEMM
@lru_cache(maxsize=16)
def _gemm_index(ts: TableSet, dtype: str) -> dict[tuple[int, int], dict[int, float]] | None:
    df = table(ts, "gemm", "gemm_perf.parquet")
    if df is None:
        return None
    df = df.filter(pl.col("gemm_dtype") == dtype)
    if df.height == 0:
        return None
    out: dict[tuple[int, int], dict[int, float]] = {}
    for n, k, m, lat in df.select("n", "k", "m", "latency").iter_rows():
        out.setdefault((n, k), {})[m] = lat
    return out


def _bracket(grid: list[int], x: int) -> list[tuple[int, float]]:
    """Grid values around ``x`` with their linear weights (extrapolating past either end)."""
    if x in grid:
        return [(x, 1.0)]
    if x < grid[0]:
        return [(grid[0], 1.0)]  # a kernel is never faster than its smallest measured size
    if x > grid[-1]:
        return [(grid[-1], x / grid[-1])]  # proportional: work grows with the dimension
    i = bisect_left(grid, x)
    lo, hi = grid[i - 1], grid[i]
    w = (x - lo) / (hi - lo)
    return [(lo, 1.0 - w), (hi, w)]


def gemm_us(ts: TableSet, dtype: str, n: int, k: int) -> Points | None:
    """Latency (µs) of an (m×k)·(k×n) GEMM of ``dtype`` against m (module docstring)."""
    idx = _gemm_index(ts, dtype)
    if idx is None or n < 1 or k < 1:
        return None
    ns = sorted({a for a, _ in idx})
    ks = sorted({b for _, b in idx})
    corners = [(a, wa * wb, b) for a, wa in _bracket(ns, n) for b, wb in _bracket(ks, k)]
    rows = [idx.get((a, b)) for a, _, b in corners]
    if any(r is None for r in rows):
        return None
    ms = sorted(set.intersection(*(set(r) for r in rows if r is not None)))
    ys = [sum(w * r[m] for (_, w, _), r in zip(corners, rows, strict=True) if r) for m in ms]
    keep = [(float(m), 1e3 * y) for m, y in zip(ms, ys, strict=True) if y > 0]
    if not keep:
        return None
    return [m for m, _ in keep], [y for _, y in keep]


# ------------------------------------------------------------------------------- attention
def _heads_filter(df: pl.DataFrame, q: int, kv: int, d: int, kv_dtype: str, window: int
                  ) -> pl.DataFrame:  # fmt: skip
    return df.filter(
        (pl.col("num_heads") == q)
        & (pl.col("num_key_value_heads") == kv)
        & (pl.col("head_dim") == d)
        & (pl.col("kv_cache_dtype") == kv_dtype)
        # tables without the column (A100's vLLM 0.14) hold full attention only
        & ((pl.col("window_size") == window) if "window_size" in df.columns else window == 0)
    )


Grid = tuple[list[int], list[int], list[list[float | None]]]
"""(rows, cols, cells in µs; None where not measured)."""


def _grid(df: pl.DataFrame, row: str, col: str) -> Grid:
    """A (row × col) grid of the minimum latency per cell, in µs (None: not measured)."""
    g = df.group_by(row, col).agg(pl.col("latency").min())
    rows = sorted(g[row].unique().to_list())
    cols = sorted(g[col].unique().to_list())
    cell = {(r, c): 1e3 * v for r, c, v in g.select(row, col, "latency").iter_rows()}
    return rows, cols, [[cell.get((r, c)) for c in cols] for r in rows]


def attention_grids(
    ts: TableSet, q: int, kv: int, d: int, kv_dtype: str = "bfloat16", window: int = 0
) -> tuple[Grid | None, Grid | None]:
    """(decode, prefill) grids of one layer's attention for per-GPU heads (q, kv, d).

    Decode: rows = batch size, cols = context per request (the table's ``isl + step``).
    Prefill: rows = prompts in the batch, cols = prompt length (no cached prefix)."""
    gen = table(ts, "attention", "generation_attention_perf.parquet")
    ctx = table(ts, "attention", "context_attention_perf.parquet")
    dec = pre = None
    if gen is not None:
        g = _heads_filter(gen, q, kv, d, kv_dtype, window)
        if g.height:
            g = g.with_columns((pl.col("isl") + pl.col("step")).alias("ctx"))
            dec = _grid(g, "batch_size", "ctx")
    if ctx is not None:
        c = _heads_filter(ctx, q, kv, d, kv_dtype, window)
        if c.height:
            pre = _grid(c, "batch_size", "isl")
    return dec, pre


# ------------------------------------------------------------------------------- MoE
MOE_DISTRIBUTIONS = ("power_law_1.01", "balanced", "power_law_1.2")


def moe_us(
    ts: TableSet, dtype: str, hidden: int, inter: int, topk: int, experts: int,
    moe_tp: int, moe_ep: int, distribution: str = "power_law_1.01", kernel: str | None = None,
) -> tuple[Points, str] | None:  # fmt: skip
    """Latency (µs) of one fused MoE layer against its input tokens, and which rows gave it:
    the routing distribution (``distribution`` first, then the others) and, where the table
    lacks the (MoE TP, EP) split: a MoE TP degree without EP from the two measured degrees
    nearest it (:func:`_tp_two_point`, ``tpN from tpA,tpB``), else ``scaled from tpXepY``: the
    measured split of the nearest group size, its time scaled by the ratio of group sizes
    (each GPU then holds that much more or less of every expert's weights and work).
    ``kernel``: only rows whose ``kernel_source`` contains it (None: all)."""
    df = table(ts, "moe", "moe_perf.parquet")
    if df is None:
        return None
    if kernel is not None:
        if "kernel_source" not in df.columns:
            return None
        df = df.filter(pl.col("kernel_source").str.contains(kernel, literal=True))
    df = df.filter(
        (pl.col("moe_dtype") == dtype)
        & (pl.col("hidden_size") == hidden)
        & (pl.col("inter_size") == inter)
        & (pl.col("topk") == topk)
        & (pl.col("num_experts") == experts)
    )
    if df.height == 0:
        return None
    exact = df.filter((pl.col("moe_tp_size") == moe_tp) & (pl.col("moe_ep_size") == moe_ep))
    scale, how = 1.0, ""
    if exact.height == 0 and moe_ep == 1:
        got = _tp_two_point(df, moe_tp, [distribution, *MOE_DISTRIBUTIONS])
        if got is not None:
            return got
    if exact.height == 0:
        group = moe_tp * moe_ep
        splits = df.select("moe_tp_size", "moe_ep_size").unique().rows()
        same_kind = [s for s in splits if (s[1] > 1) == (moe_ep > 1)] or splits
        t, e = min(same_kind, key=lambda s: (abs(math.log(s[0] * s[1] / group)), s))
        exact = df.filter((pl.col("moe_tp_size") == t) & (pl.col("moe_ep_size") == e))
        scale, how = t * e / group, f"/scaled from tp{t}ep{e}"
    order = [distribution, *(x for x in MOE_DISTRIBUTIONS if x != distribution)]
    for dist in order:
        sub = exact.filter(pl.col("distribution") == dist)
        if sub.height:
            g = sub.group_by("num_tokens").agg(pl.col("latency").min()).sort("num_tokens")
            xs = [float(v) for v in g["num_tokens"]]
            return (xs, [1e3 * scale * v for v in g["latency"]]), dist + how
    return None


def _tp_two_point(df: pl.DataFrame, tp: int, order: list[str]) -> tuple[Points, str] | None:
    """A MoE TP degree the table lacks, from the two measured TP degrees nearest it (g1 < g2,
    no EP), token count by token count: t(g) = a + b/g through both — the part of the layer
    that every GPU pays whatever its share (routing, launches, all tokens' rows of every
    sharded GEMM) plus the part that shrinks with its share of each expert — kept between the
    nearest measurement and its time scaled by the group ratio. None: fewer than two degrees."""
    degrees = sorted({t for t, e in df.select("moe_tp_size", "moe_ep_size").unique().rows()
                      if e == 1})  # fmt: skip
    if len(degrees) < 2:
        return None
    g1, g2 = sorted(sorted(degrees, key=lambda g: (abs(math.log(g / tp)), g))[:2])
    near = g1 if abs(math.log(g1 / tp)) < abs(math.log(g2 / tp)) else g2
    for dist in dict.fromkeys(order):
        sub = df.filter((pl.col("moe_ep_size") == 1) & (pl.col("distribution") == dist))
        t1, t2 = (_by_tokens(sub.filter(pl.col("moe_tp_size") == g)) for g in (g1, g2))
        xs = sorted(t1.keys() & t2.keys())
        if not xs:
            continue
        ys = []
        for x in xs:
            b = (t1[x] - t2[x]) / (1 / g1 - 1 / g2)
            v = t2[x] - b / g2 + b / tp
            tn = t1[x] if near == g1 else t2[x]
            lo, hi = sorted((tn, tn * near / tp))
            ys.append(1e3 * min(max(v, lo), hi))
        return ([float(x) for x in xs], ys), f"{dist}/tp{tp} from tp{g1},tp{g2}"
    return None


def _by_tokens(df: pl.DataFrame) -> dict[int, float]:
    g = df.group_by("num_tokens").agg(pl.col("latency").min())
    return {int(n): float(v) for n, v in g.iter_rows()}


# ------------------------------------------------------------------------------- comm
def allreduce_us(ts: TableSet, tp: int) -> Points | None:
    """One all-reduce across ``tp`` GPUs against message bytes (the engine's custom
    all-reduce in CUDA-graph mode where measured, else its eager mode; the table's element
    counts times the element size)."""
    df = table(ts, "comm", "custom_allreduce_perf.parquet")
    if df is None or tp < 2:
        return None
    df = df.filter(pl.col("num_gpus") == tp)
    if "kernel_source" in df.columns:
        graph = df.filter(pl.col("kernel_source").str.contains("graph"))
        df = graph if graph.height else df
    if df.height == 0:
        return None
    df = _message_bytes(df, "allreduce_dtype")
    g = df.group_by("message_size").agg(pl.col("latency").min()).sort("message_size")
    return [float(v) for v in g["message_size"]], [1e3 * v for v in g["latency"]]


def nccl_us(system: str, op: str, gpus: int) -> Points | None:
    """One NCCL collective (``all_gather``, ``reduce_scatter``, ``all_reduce``, ``alltoall``)
    across ``gpus`` GPUs against message bytes, from the NCCL version the GPU's system file
    names (else the newest measured), fp16/bf16 rows; message bytes (the table's half
    elements × 2)."""
    df = nccl_table(system)
    if df is None:
        return None
    df = df.filter((pl.col("op_name") == op) & (pl.col("num_gpus") == gpus)
                   & (pl.col("nccl_dtype") == "half"))  # fmt: skip
    if df.height == 0:
        return None
    df = _message_bytes(df, "nccl_dtype")
    g = df.group_by("message_size").agg(pl.col("latency").min()).sort("message_size")
    return [float(v) for v in g["message_size"]], [1e3 * v for v in g["latency"]]


def running_max(ys: list[float]) -> list[float]:
    """The running maximum: a cost curve that never falls as its size grows."""
    return list(np.maximum.accumulate(np.asarray(ys, dtype=float)))
