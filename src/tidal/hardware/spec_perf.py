"""Step time of speculative decoding: the target's verification of k + 1 rows per decoding
request plus the drafting cost (docs/design/disaggregation-speculation.md §2.4).

* **Verification.** n decoding requests, each fed q = k + 1 query rows at contexts
  ctx … ctx + q − 1, are timed as the wrapped model's decode of ``n·q`` rows (GEMMs and the LM
  head see every row: AIConfigurator scales its MTP decode batch by ``nextn + 1`` the same
  way). The attended context: ``attention="once"`` (default) charges each request's KV read
  once, Σ context ``Σctx + n·(q − 1)`` — verification runs as a short causal chunk
  (FlashAttention's varlen path loads a request's KV blocks once for all q query rows, and
  decode attention is bound by those reads); ``"per-row"`` charges every row its own read,
  ``q·Σctx + n·q(q − 1)/2`` (AIConfigurator's scaling applied to attention too: q times the KV
  traffic). Any step model works unchanged; prefill chunks of a mixed step pass as they are.
* **Drafting.** ``mtp`` / ``eagle3``: k sequential passes of the draft layers at batch n, each
  priced as ``draft_layers / L`` of the target's own decode step at the same contexts (the
  per-layer share of the target's curve; the draft's smaller vocabulary and the drafts' shared
  host time are not modelled). ``draft_model``: k decode steps of the draft model's own step
  model (its GPU and TP). ``ngram``: a host lookup per request per step,
  :data:`NGRAM_HOST_S_PER_REQUEST` (an assumption until measured on the real engine).
  Draft work over prefill tokens (EAGLE/MTP read the prompt's hidden states) is not charged.

Exactness: a pure-decode step's seconds are one float expression of the total context, the
same on a scalar (:meth:`step_ns`) and on a run's context array (:meth:`decode_run_ctx_ns`), so
fast-forwarded runs give the durations of single steps bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tidal.hardware.perf import PerfModel

NGRAM_HOST_S_PER_REQUEST = 5e-6
"""Host time of one n-gram (prompt lookup) proposal per request and step, in seconds: an
assumption of the order of vLLM's numba-compiled lookup over a few thousand tokens, to be
replaced by the real engine's measurement (design §3)."""


_UNKNOWN = object()

SpecSegment = tuple[float, float, float, int, int, float, float, float, float]
"""``(c, a, y_end, mul, shift, scale, c_d, a_d, x_end)``: :meth:`SpecPerfModel.spec_segment`."""


def _piece(model: PerfModel, num_decodes: int, ctx: int) -> tuple[float, float, float] | None:
    """``(c, a, ctx_end)``: ``model``'s pure-decode step of ``num_decodes`` requests takes
    ``c + a·x`` seconds for ``ctx ≤ x < ctx_end`` (its ``decode_affine``, else its
    ``decode_segment``), bit for bit; None when it has neither."""
    aff = model.decode_affine(num_decodes)
    if aff is not None:
        return aff[0], aff[1], math.inf
    segment = getattr(model, "decode_segment", None)
    return None if segment is None else segment(num_decodes, ctx)  # type: ignore[no-any-return]


class SpecPerfModel(PerfModel):
    """``base`` verifying ``k`` drafts per decoding request, plus the drafting time."""

    def __init__(
        self,
        base: PerfModel,
        k: int,
        method: str,
        draft: PerfModel | None = None,
        draft_fraction: float = 0.0,
        attention: str = "once",
    ) -> None:
        if k < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1, got {k}")
        self.base = base
        self.k = k
        self.q = k + 1
        self.method = method
        if attention not in ("once", "per-row"):
            raise ValueError(f"attention must be 'once' or 'per-row', got {attention!r}")
        self.per_row = attention == "per-row"
        self.name = base.name
        self.draft = draft
        """The model whose decode step prices a draft pass (None: ``ngram``, host only)."""
        self.draft_scale = float(k) * draft_fraction
        """k passes × the share of a ``draft`` step one pass costs."""
        self.host_s = NGRAM_HOST_S_PER_REQUEST if draft is None else 0.0
        self._draft_affine: dict[int, Any] = {}
        """``draft.decode_affine(n)`` by batch size n."""
        self._draft_piece: dict[int, list[tuple[int, float, float, float]]] = {}
        """By batch size n: the draft's last pieces, newest first, at most 4 (each
        ``(lo, c, a, end)``: ``c + a·x`` is its step time, bit for bit, for ``lo ≤ x < end``;
        one entry per piece: a piece taken again replaces its older entry, whose ``lo`` is
        higher). Mixed steps of one batch size move between pieces."""

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
        if not num_decodes:
            return self.base.step_seconds(
                0, decode_ctx, prefill_tokens, prefill_attn, prefill_ctx, num_prefills, mx
            )
        q = self.q
        rows = num_decodes * q
        if self.per_row:  # :meth:`verify_ctx`, inline
            ctx = decode_ctx * q + (rows * (q - 1)) // 2
        else:
            ctx = decode_ctx + num_decodes * (q - 1)
        s = self.base.step_seconds(
            rows, ctx, prefill_tokens, prefill_attn, prefill_ctx, num_prefills, mx
        )
        return s + self.draft_seconds(num_decodes, decode_ctx, mx)

    def verify_ctx(self, num_decodes: int, decode_ctx: Any) -> Any:
        """The Σ context the wrapped model is asked for (integers: exact on scalars and arrays)."""
        q = self.q
        if self.per_row:
            return decode_ctx * q + (num_decodes * q * (q - 1)) // 2
        return decode_ctx + num_decodes * (q - 1)

    def draft_seconds(
        self, num_decodes: int, decode_ctx: Any, mx: Callable[[Any, Any], Any]
    ) -> Any:
        """Drafting time of a step with ``num_decodes`` speculating requests."""
        if self.draft is None:
            return self.host_s * num_decodes
        pieces = self._draft_piece.get(num_decodes)
        if pieces is not None and type(decode_ctx) is int:
            for lo, c, a, end in pieces:
                if lo <= decode_ctx < end:
                    return self.draft_scale * (c + a * decode_ctx)
        form = self._draft_affine.get(num_decodes, _UNKNOWN)
        if form is _UNKNOWN:
            form = self._draft_affine[num_decodes] = self.draft.decode_affine(num_decodes)
        if form is not None:  # the same float operations as the draft's step_seconds
            return self.draft_scale * (form[0] + form[1] * decode_ctx)
        if type(decode_ctx) is int:  # a scalar step: keep its piece for the next ones
            seg = _piece(self.draft, num_decodes, decode_ctx)
            if seg is not None:
                c, a, end = seg
                kept = [p for p in pieces if p[3] != end][:3] if pieces else []
                self._draft_piece[num_decodes] = [(decode_ctx, c, a, end), *kept]
                return self.draft_scale * (c + a * decode_ctx)
        d = self.draft.step_seconds(num_decodes, decode_ctx, 0, 0, 0, 0, mx)
        return self.draft_scale * d

    def verification_seconds(self, num_decodes: int, decode_ctx: int) -> float:
        """The verification part of a pure-decode step (tests and reports)."""
        ctx = self.verify_ctx(num_decodes, decode_ctx)
        return float(self.base.step_seconds(num_decodes * self.q, ctx, 0, 0, 0, 0))

    def spec_affine(
        self, num_decodes: int
    ) -> tuple[float, float, int, int, float, float, float] | None:
        """``(c, a, mul, shift, scale, c_d, a_d)`` such that a pure-decode step of
        ``num_decodes`` requests with Σ context ``x`` takes exactly
        ``(c + a * (mul * x + shift)) + scale * (c_d + a_d * x)`` seconds — the float
        operations of :meth:`step_seconds`, in its order (the wrapped models'
        ``decode_affine`` contract) — or None when a wrapped model is not affine. Lets the
        executor time short runs inline, without arrays."""
        n, q = num_decodes, self.q
        verify = self.base.decode_affine(n * q)
        if verify is None:
            return None
        mul, shift = (q, n * q * (q - 1) // 2) if self.per_row else (1, n * (q - 1))
        if self.draft is None:  # host time: scale · (h + 0.0 · x) is h exactly
            return (*verify, mul, shift, 1.0, self.host_s * n, 0.0)
        draft = self.draft.decode_affine(n)
        if draft is None:
            return None
        return (*verify, mul, shift, self.draft_scale, *draft)

    def spec_segment(self, num_decodes: int, decode_ctx: int) -> SpecSegment | None:
        """The piece of the pure-decode step time around Σ context ``decode_ctx``:
        ``(c, a, y_end, mul, shift, scale, c_d, a_d, x_end)`` such that a step with Σ context
        ``x`` (``decode_ctx ≤ x < x_end`` and ``y = mul·x + shift < y_end``) takes exactly
        ``(c + a·y) + scale·(c_d + a_d·x)`` seconds — :meth:`spec_affine` for piecewise-affine
        wrapped models (``decode_segment``: the measured tables), whose verification and
        draft pieces end where their curves turn; None when a wrapped model is neither."""
        n, q = num_decodes, self.q
        mul, shift = (q, n * q * (q - 1) // 2) if self.per_row else (1, n * (q - 1))
        verify = _piece(self.base, n * q, mul * decode_ctx + shift)
        if verify is None:
            return None
        if self.draft is None:  # host time: 1.0 · (h + 0.0 · x) is h exactly
            return (*verify, mul, shift, 1.0, self.host_s * n, 0.0, math.inf)
        draft = _piece(self.draft, n, decode_ctx)
        if draft is None:
            return None
        return (*verify, mul, shift, self.draft_scale, *draft)

    def idle_penalty_ns(self, idle_ns: int) -> int:
        return self.base.idle_penalty_ns(idle_ns)

    def decode_run_ctx_ns(self, num_decodes: int, ctx: np.ndarray) -> np.ndarray:
        """Durations of pure-decode steps whose Σ contexts are ``ctx`` (one per step): the
        expression of :meth:`step_ns` on an array."""
        s = self.step_seconds(num_decodes, ctx, 0, 0, 0, 0, np.maximum)
        ns = np.floor(s * 1e9 + 0.5).astype(np.int64)
        return np.maximum(ns, 1)

    def describe(self) -> dict[str, Any]:
        return {**self.base.describe(), "speculative": self.method, "k": self.k}
