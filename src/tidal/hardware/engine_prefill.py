"""Prefill attention of chunks that follow cached context, read from fresh-prompt tables.

The engines' context-attention tables (and the MLA/DSA module and Gated DeltaNet grids beside
them) are timed on *fresh* prompts: ``k`` prompts of ``s`` tokens, nothing cached, ``T(k, s)``.
A chunk of ``c`` new tokens after ``p`` cached ones (a prefix-cache hit, or the 2nd+ chunk of
a chunked prefill) runs the same varlen kernel (vLLM's FlashAttention reads every key from the
paged cache, fresh or not) on ``c`` query rows over ``p + c`` keys, causal within the chunk:
exactly the last ``c`` rows of a fresh causal prompt of ``p + c`` tokens. The kernel's work is
a sum over query-row tiles, so with ``g(x)`` the table's marginal cost of the query row at
position ``x`` (its slope in ``s``) and ``G`` its integral,

    chunk(k; c after p) = T(k, c) + [G(p + c) − G(p)] − [G(c) − G(0)]

the fresh chunk plus what its rows cost more for sitting after the prefix (= T(p + c) − T(p)
plus the fixed cost, for a convex ``T``). It is exact at ``p = 0``; over the chunks of a
chunked prompt it sums to ``T(P)`` plus one fixed cost per extra chunk; it holds for whatever
the grid holds per query row (sliding windows, a module's projections, a linear layer's scan).
``g`` is made non-decreasing (each segment's slope is the least of its own and the later
ones': a row never gets cheaper further along the prompt, so more cached context never makes a
chunk cheaper), and beyond the table's last column it grows in proportion to the position (the
row's keys), continuing the last segment's slope: ``T`` goes on as a square there, not as a
line (a hybrid model's linear-attention layers keep a constant marginal: their share of the
layers is taken as their share of the last slope). A chunk of few tokens after a long prefix
is bound by reading the prefix's KV instead; that read is a decode's, so with a cached prefix
the result is floored at the decode table at (k, p + c). AIConfigurator reads
``T(p + c)·((p + c)² − p²)/(p + c)²`` instead, which agrees where ``T`` grows as the square
and has no floor.

A step keeps only sums over its chunks (tokens ``C``, context ``C + S``, ``Σ c·(2p + c)``), so
the table is read at the mean chunk and mean prefix and the part above the fixed cost scaled
by ρ = Σ c·(2p + c) / (k·c̄·(2p̄ + c̄)), the step's causal work over that of ``k`` equal chunks
(1 for equal chunks; without it fresh prompts of 8000 and 192 tokens cost two of 4096: half
the work). Derivation, sources, hand-checked numbers: ``docs/design/prefill-with-context.md``.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Protocol


class Table(Protocol):
    """A monotone (rows × cols) table in µs (:class:`~tidal.hardware.measured._Table2D`)."""

    rows: list[float]
    cols: list[float]
    us: list[list[float]]

    def at(self, r: float, c: float) -> float: ...


def work_ratio(chunks: int, tokens: int, cached: int, prefill_attn: int) -> float:
    """ρ: the step's causal work Σ c·(2p + c) over ``chunks`` equal chunks' (exactly 1.0 when
    they are equal or the sum is unknown, ``prefill_attn`` ≤ 0)."""
    den = tokens * (2 * cached + tokens)
    num = chunks * prefill_attn
    if prefill_attn <= 0 or den <= 0 or num == den:
        return 1.0
    return num / den


def kv_read_us(dec: Table, chunks: float, ctx: float) -> float:
    """The decode table at ``chunks`` requests of ``ctx`` context (beyond its largest batch in
    proportion, as the decode curves extend)."""
    top = dec.rows[-1]
    scale = chunks / top if chunks > top else 1.0
    return scale * dec.at(chunks, ctx)


class RowCost:
    """``G``, the integral of the non-decreasing marginal row cost ``g``, of each table row
    (module docstring); between rows linear, as the table's bilinear reading."""

    def __init__(self, tab: Table, measured_cols: int | None = None, growing: float = 1.0) -> None:
        """``measured_cols``: how many of ``tab``'s columns were measured (the rest, virtual
        columns of its linear extension, are left to the square's growth); ``growing``: the
        share of the last marginal that grows with the position beyond them (attention's;
        the rest, a linear layer's scan, stays constant)."""
        n = len(tab.cols) if measured_cols is None else measured_cols
        self.growing = growing
        self.rows, self.xs = list(tab.rows), list(tab.cols[:n])
        self.g: list[list[float]] = []  # per row: g on each segment
        self.acc: list[list[float]] = []  # per row: G at each column
        xs = self.xs
        for r in tab.us:
            slopes = [(r[j + 1] - r[j]) / (xs[j + 1] - xs[j]) for j in range(len(xs) - 1)]
            for j in range(len(slopes) - 2, -1, -1):
                slopes[j] = min(slopes[j], slopes[j + 1])
            acc = [0.0]
            for j, s in enumerate(slopes):
                acc.append(acc[-1] + s * (xs[j + 1] - xs[j]))
            self.g.append(slopes)
            self.acc.append(acc)

    def _row(self, i: int, x: float) -> float:
        xs, g, acc = self.xs, self.g[i], self.acc[i]
        if len(xs) < 2 or x <= xs[0]:
            return 0.0
        last = xs[-1]
        if x >= last:  # g(x) = g_last·x / x_mid: the square's slope, through the last segment's
            mid, a = 0.5 * (xs[-2] + last), self.growing
            grow = (x * x - last * last) / (2.0 * mid)
            return acc[-1] + g[-1] * (a * grow + (1.0 - a) * (x - last) if a < 1.0 else grow)
        j = bisect_right(xs, x) - 1
        return acc[j] + g[j] * (x - xs[j])

    def extra(self, r: float, c: float, p: float) -> float:
        """[G(p + c) − G(p)] − [G(c) − G(0)] on row ``r``: what rows p…p + c cost more than
        rows 0…c (0.0 exactly at p = 0; the rows bracketed once)."""
        if p <= 0.0:
            return 0.0
        rows, row = self.rows, self._row

        def on(i: int) -> float:
            return (row(i, p + c) - row(i, p)) - row(i, c)  # G(0) = 0

        if len(rows) == 1 or r <= rows[0]:
            return on(0)
        i = min(bisect_right(rows, r) - 1, len(rows) - 2)
        w = (r - rows[i]) / (rows[i + 1] - rows[i])
        a, b = on(i), on(i + 1)
        return a + w * (b - a)


def chunk_attention_us(
    pre: Table, rc: RowCost, dec: Table | None, chunks: int, tokens: int, cached: int,
    prefill_attn: int = -1,
) -> float:  # fmt: skip
    """Per-layer attention (µs) of ``chunks`` prefill chunks holding ``tokens`` new tokens after
    ``cached`` cached ones in all (module docstring); ``rc`` is :class:`RowCost` of ``pre``;
    ``prefill_attn``: Σ c·(2p + c) over the chunks (≤ 0: equal chunks assumed)."""
    c = tokens / chunks
    p = cached / chunks
    fresh = pre.at(chunks, c)
    extra = rc.extra(chunks, c, p)
    rho = work_ratio(chunks, tokens, cached, prefill_attn)
    if rho == 1.0:
        t = fresh + extra  # = fresh exactly at p = 0 (extra is 0.0 there)
    else:
        base = pre.at(chunks, pre.cols[0])
        t = base + (fresh + extra - base) * rho
    if cached > 0 and dec is not None:
        t = max(t, kv_read_us(dec, chunks, p + c))
    return t
