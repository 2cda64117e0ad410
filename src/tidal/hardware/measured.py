"""Step times summed from measured GPU operator profiles (``tidal-gpu-profile/1``).

For a step of T tokens, n decode requests with Σctx context, m prefill chunks and S = n + m
sequences on L layers (Vidur's sum, ``docs/research/gpu-profiles.md``):

    t = L·Σ_ops op(T) + emb(T) + 2L·AR(T·hidden·dtype) + L·attn_p + L·attn_d + head(S) + host(S)

* ``op(T)``, ``emb(T)``: the profile's per-layer and per-step operator medians, linear between
  measured token counts (:class:`~tidal.hardware.interp.Curve`);
* ``AR(bytes)``: the all-reduce sweep of the deployment's link and TP, median-smoothed in
  quarter octaves (the raw sweep is bimodal at small sizes);
* ``attn_d``: the decode table at batch n (rows mixed linearly between measured batches,
  scaled by n/n_max beyond them) and the mean context Σctx/n; ``attn_p``: m chunks of the mean
  size P/m after the mean cached context (C − P)/m, bilinear in the prefill table (the step
  shape keeps only sums over chunks, so equal chunks are assumed);
* ``host(S)``: with ``host="vidur"`` the profile's measured host times (schedule, sampler —
  which includes the LM head — input preparation, output processing) of Vidur's older vLLM;
  by default (``vllm-v1``) and without them, the LM head and the corrected roofline's host
  term of the chosen engine.

Robustness: every measured curve is its isotonic envelope (:func:`~tidal.hardware.interp.
isotonic`), so step time never falls as tokens, requests or context grow, and the
context-independent part is floored at the weight-read time at the GPU's peak bandwidth
(:func:`~tidal.hardware.corrected.weight_read_floor_s`).

Parts the profile lacks (attention for other head shapes, an all-reduce sweep, the host) come
from :class:`~tidal.hardware.corrected.CorrectedRooflinePerfModel`; :attr:`parts` says which.
Exactness: everything but the decode attention is a Python float of (T, S, prefill sums); the
decode context enters through one curve evaluated by the same IEEE operations on a scalar or an
array (:mod:`tidal.hardware.interp`), so ``decode_run_ns`` equals per-step ``step_ns``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from typing import Any

import numpy as np

from tidal.hardware.corrected import (
    DEFAULT_HOST,
    CorrectedRooflinePerfModel,
    check_host,
    weight_read_floor_s,
)
from tidal.hardware.gpus import GPUSpec
from tidal.hardware.interp import Curve, binned_median, fill_row, isotonic
from tidal.hardware.models import ModelSpec
from tidal.hardware.opprofile import Deployment, Grid2D
from tidal.hardware.perf import PerfModel


def _monotone_row(values: list[float | None]) -> list[float]:
    """The isotonic envelope of a row's measured cells, then its gaps filled."""
    idx = [i for i, v in enumerate(values) if v is not None]
    iso = isotonic([v for v in values if v is not None])
    out: list[float | None] = [None] * len(values)
    for i, v in zip(idx, iso, strict=True):
        out[i] = v
    return fill_row(out)


def _extend(xs: list[float], us: list[list[float]]) -> tuple[list[float], list[list[float]]]:
    """Append a virtual last column whose slope from the last real one is the running maximum,
    down the rows, of the rows' last slopes: beyond the grid each row then rises at least as
    fast as the rows below it, so linear extension keeps the table monotone in both axes."""
    if len(xs) < 2:
        return xs, us
    dx = xs[-1] - xs[-2]
    top, out = 0.0, []
    for r in us:
        top = max(top, (r[-1] - r[-2]) / dx)
        out.append([*r, r[-1] + top * dx])
    return [*xs, xs[-1] + dx], out


class _Table2D:
    """Bilinear interpolation on a filled grid made monotone in both axes (isotonic rows, then
    columns); flat below the first row and column, linear extension beyond the last ones
    (through virtual cells that keep it monotone, :func:`_extend`; beyond the last row only
    when ``extend_rows``)."""

    def __init__(self, grid: Grid2D, extend_rows: bool = True) -> None:
        self.rows = [float(r) for r in grid.rows]
        filled = [_monotone_row(list(r)) for r in grid.us]
        cols = [isotonic(c) for c in zip(*filled, strict=True)]
        back = [list(r) for r in zip(*cols, strict=True)]
        self.cols, us = _extend([float(c) for c in grid.cols], back)
        if extend_rows:
            self.rows, t = _extend(self.rows, [list(c) for c in zip(*us, strict=True)])
            us = [list(r) for r in zip(*t, strict=True)]
        self.us = us

    @staticmethod
    def _bracket(xs: list[float], x: float) -> tuple[int, float]:
        if len(xs) == 1:
            return 0, 0.0
        x = max(x, xs[0])
        j = min(bisect_right(xs, x) - 1, len(xs) - 2)
        return j, (x - xs[j]) / (xs[j + 1] - xs[j])

    def row_mix(self, r: float) -> list[float]:
        """The table's row at ``r`` (mixed between the two nearest measured rows)."""
        if len(self.rows) == 1:
            return list(self.us[0])
        i, w = self._bracket(self.rows, r)
        a, b = self.us[i], self.us[i + 1]
        return [x + w * (y - x) for x, y in zip(a, b, strict=True)]

    def at(self, r: float, c: float) -> float:
        """Bilinear in the four cells around (r, c) (inlined brackets: a hot path)."""
        rows, cols, us = self.rows, self.cols, self.us
        nr, nc = len(rows), len(cols)
        if r < rows[0]:
            r = rows[0]
        if c < cols[0]:
            c = cols[0]
        i = bisect_right(rows, r) - 1 if nr > 1 else 0
        if i > nr - 2:
            i = max(nr - 2, 0)
        j = bisect_right(cols, c) - 1 if nc > 1 else 0
        if j > nc - 2:
            j = max(nc - 2, 0)
        i1, j1 = min(i + 1, nr - 1), min(j + 1, nc - 1)
        wr = (r - rows[i]) / (rows[i1] - rows[i]) if i1 != i else 0.0
        wc = (c - cols[j]) / (cols[j1] - cols[j]) if j1 != j else 0.0
        a, b = us[i], us[i1]
        lo = a[j] + wc * (a[j1] - a[j])
        hi = b[j] + wc * (b[j1] - b[j])
        return lo + wr * (hi - lo)


_TABLES: dict[tuple[int, bool], tuple[Grid2D, _Table2D]] = {}


def _table(grid: Grid2D, extend_rows: bool = True) -> _Table2D:
    """The monotone table of ``grid``, built once per grid object (the bundled profiles are
    loaded once; the isotonic passes over a large attention table cost more than a short
    simulation). The grid is kept beside its table, so its id cannot be reused."""
    key = (id(grid), extend_rows)
    hit = _TABLES.get(key)
    if hit is None or hit[0] is not grid:
        if len(_TABLES) > 256:
            _TABLES.clear()
        hit = _TABLES[key] = (grid, _Table2D(grid, extend_rows))
    return hit[1]


_BLOCK = 512
"""Token counts whose linear-part times :meth:`MeasuredPerfModel.tokens_s` evaluates at once."""


class MeasuredPerfModel(PerfModel):
    name = "measured"

    def __init__(
        self,
        dep: Deployment,
        model: ModelSpec,
        gpu: GPUSpec,
        tp: int = 1,
        fallback: CorrectedRooflinePerfModel | None = None,
        host: str = DEFAULT_HOST,
    ) -> None:
        self.dep, self.model, self.gpu, self.tp = dep, model, gpu, tp
        self.host = check_host(host)
        self.fb = fallback or CorrectedRooflinePerfModel(model, gpu, tp, host=host)
        lin = dep.linear
        L = model.num_layers
        layer = np.sum([np.asarray(v, dtype=float) for v in lin.layer_us.values()], axis=0)
        total = L * layer + np.asarray(lin.step_us.get("emb", [0.0] * len(lin.tokens)))
        self._tok = Curve(lin.tokens, isotonic(total * 1e-6))
        head = lin.step_us.get("lm_head")
        self._head = Curve(lin.tokens, isotonic([v * 1e-6 for v in head])) if head else None
        self._ar: Curve | None = None
        if tp > 1 and dep.all_reduce is not None:
            x, y = binned_median(dep.all_reduce.bytes, dep.all_reduce.us)
            self._ar = Curve(x, [v * 1e-6 for v in y])
        self._host: Curve | None = None
        if dep.host is not None and host == "vidur":
            keys = ("schedule", "sampler", "prepare_inputs", "process_outputs")
            ms = np.sum([np.asarray(dep.host.ms[k]) for k in keys if k in dep.host.ms], axis=0)
            self._host = Curve(dep.host.batch, isotonic(ms * 1e-3))
        a = dep.attention
        self._dec = _table(a.decode, False) if a is not None and a.decode is not None else None
        self._pre = _table(a.prefill) if a is not None and a.prefill is not None else None
        self._floor = weight_read_floor_s(model, gpu, tp)
        self._dec_curves: dict[int, Curve] = {}
        self._seg_cache: dict[int, tuple[float, Curve]] = {}
        self._pre_cache: dict[tuple[int, int, int, int], float] = {}
        self._tok_cache: dict[int, float] = {}
        self._seq_cache: dict[int, float] = {}
        self._tok_blocks: dict[int, list[float]] = {}
        self._fb_dec, self._fb_slope = self.fb._dec_cache, self.fb.ctx_slope

    @property
    def parts(self) -> dict[str, str]:
        """Which step components come from measured data and which from the fallback."""
        src = self.dep.key
        fb = self.fb.name

        def pick(ok: bool) -> str:
            return f"measured:{src}" if ok else fb

        return {
            "linear": f"measured:{src}",
            "all_reduce": "none (tp 1)" if self.tp == 1 else pick(self._ar is not None),
            "attention_decode": pick(self._dec is not None),
            "attention_prefill": pick(self._pre is not None),
            "host": pick(self._host is not None),
            "lm_head": pick(self._head is not None or self._host is not None),
        }

    @property
    def source(self) -> str:
        return f"measured:{self.dep.key}"

    # ---------------------------------------------------------------- components (seconds)
    def tokens_s(self, tokens: int) -> float:
        t = self._tok_cache.get(tokens)
        if t is None:
            b, i = divmod(tokens, _BLOCK)
            blk = self._tok_blocks.get(b)
            if blk is None:  # Curve.many equals Curve.at element by element (interp.py)
                xs = np.arange(b * _BLOCK, (b + 1) * _BLOCK, dtype=np.float64)
                blk = self._tok_blocks[b] = self._tok.many(xs).tolist()
            t = blk[i]
            if self.tp > 1:
                m = self.model
                nbytes = tokens * m.hidden_size * m.dtype_bytes
                ar = self._ar.at(nbytes) if self._ar is not None else self.fb.allreduce_s(nbytes)
                t += 2 * m.num_layers * ar
            if len(self._tok_cache) < 65536:
                self._tok_cache[tokens] = t
        return t

    def seqs_s(self, seqs: int) -> float:
        t = self._seq_cache.get(seqs)
        if t is None:
            if self._host is not None:
                t = self._host.at(seqs)  # the measured sampler includes the LM head
            else:
                head = self._head.at(seqs) if self._head is not None else self.fb.head_s(seqs)
                t = head + self.fb.host_s(seqs)
            self._seq_cache[seqs] = t
        return t

    def _dec_curve(self, n: int) -> Curve:
        c = self._dec_curves.get(n)
        if c is None:
            assert self._dec is not None
            top = self._dec.rows[-1]
            row = self._dec.row_mix(min(float(n), top))
            scale = n / top if n > top else 1.0
            L = self.model.num_layers
            # in the step's total context Σctx = n × (context per request), all L layers
            c = Curve([x * n for x in self._dec.cols], [L * scale * v * 1e-6 for v in row])
            self._dec_curves[n] = c
        return c

    def attn_prefill_s(
        self, prefill_tokens: int, prefill_ctx: int, num_prefills: int, prefill_attn: int = -1
    ) -> float:
        """``prefill_attn`` (Σ c·(2s + c) over the chunks) is unused here: the profile's
        prefill table is keyed by (chunk, cached context)."""
        if num_prefills == 0:
            return 0.0
        if self._pre is None:
            return -1.0  # use the fallback (needs prefill_attn)
        chunk = prefill_tokens / num_prefills
        cached = (prefill_ctx - prefill_tokens) / num_prefills
        return self.model.num_layers * num_prefills * self._pre.at(chunk, cached) * 1e-6

    # ---------------------------------------------------------------- the step
    def step_seconds(
        self,
        num_decodes: int,
        decode_ctx: Any,
        prefill_tokens: int,
        prefill_attn: int,
        prefill_ctx: int,
        num_prefills: int,
        mx: Callable[[Any, Any], Any] = max,
    ) -> Any:
        tokens = num_decodes + prefill_tokens
        if tokens == 0:
            return 0.0
        seqs = num_decodes + num_prefills
        tok = self._tok_cache.get(tokens)
        sq = self._seq_cache.get(seqs)
        const = (self.tokens_s(tokens) if tok is None else tok) + (
            self.seqs_s(seqs) if sq is None else sq
        )
        if num_prefills:
            if self._pre is None:  # the fallback's closed form: cheaper than a cache lookup
                const += self.fb.attn_prefill_s(prefill_attn, prefill_ctx, num_prefills)
            else:
                key = (prefill_tokens, prefill_ctx, num_prefills, prefill_attn)
                pre = self._pre_cache.get(key)
                if pre is None:
                    pre = self.attn_prefill_s(
                        prefill_tokens, prefill_ctx, num_prefills, prefill_attn
                    )
                    if len(self._pre_cache) < 65536:
                        self._pre_cache[key] = pre
                const += pre
        if const < self._floor:
            const = self._floor
        if num_decodes == 0:
            return const
        if self._dec is None:
            fixed = self._fb_dec.get(num_decodes)
            if fixed is None:
                fixed = self.fb._dec_fixed(num_decodes)
            return const + fixed + self._fb_slope * decode_ctx
        curve = self._dec_curves.get(num_decodes) or self._dec_curve(num_decodes)
        return curve.plus(const, decode_ctx)

    def kernel_seconds(
        self, num_decodes: int, decode_ctx: int, prefill_tokens: int, prefill_ctx: int = 0,
        num_prefills: int = 0, prefill_attn: int = 0, attention: bool = True,
    ) -> float:  # fmt: skip
        """GPU kernel time of the layers (no LM head, no host): what the profiles measure."""
        t = self.tokens_s(num_decodes + prefill_tokens)
        if not attention:
            return t
        s0 = self.seqs_s(num_decodes + num_prefills)
        full = self.step_seconds(
            num_decodes, decode_ctx, prefill_tokens, prefill_attn, prefill_ctx, num_prefills
        )
        return float(full - s0)

    def decode_segment(self, num_decodes: int, decode_ctx: int) -> tuple[float, float, float]:
        """``(c, a, ctx_end)``: a pure-decode step of total context x takes exactly
        ``c + a·x`` seconds for ``decode_ctx ≤ x < ctx_end`` (one segment of the measured
        decode-attention curve); lets the simulator time runs without the vector path."""
        if self._dec is None:
            aff = self.decode_affine(num_decodes)
            assert aff is not None
            return aff[0], aff[1], float("inf")
        hit = self._seg_cache.get(num_decodes)
        if hit is None:
            const = self.tokens_s(num_decodes) + self.seqs_s(num_decodes)
            if const < self._floor:
                const = self._floor
            hit = self._seg_cache[num_decodes] = (const, self._dec_curve(num_decodes))
        return hit[1].segment(hit[0], decode_ctx)

    def decode_affine(self, num_decodes: int) -> tuple[float, float] | None:
        if self._dec is not None or num_decodes == 0:
            return None
        # step_seconds ends with "+ a·decode_ctx" on a constant: c + a·0 returns c unchanged.
        return self.step_seconds(num_decodes, 0, 0, 0, 0, 0), self.fb.ctx_slope

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "parts": self.parts, "host": self.host}
