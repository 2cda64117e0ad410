"""Accepted lengths of speculative decoding: one seeded draw per (request, verification step).

A verification step of request ``rid`` keeps ``a`` tokens: the accepted prefix of its k drafts
plus the target's own token. With per-position conditional rates α_i and
``A_i = Π_{m≤i} α_m`` (P(drafts 1…i all accepted)), ``a = 1 + #{i ≤ k : U < A_i}`` for one
uniform U — the accepted length is one categorical variable, so one uniform per step suffices
(``P(a ≥ i + 1) = A_i``, hence ``E[a] = 1 + Σ A_i``:
:func:`~tidal.engine.spec_config.expected_tokens`).

The uniform of the j-th verification step of ``rid`` is counter-based (docs/DESIGN.md §3: no
shared generator whose consumption order could depend on batching):
``U = splitmix64(s_rid + (j + 1)·φ) / 2⁶⁴`` (the top 53 bits) with the request's stream state
``s_rid = splitmix64(key ⊕ splitmix64(rid))`` — splitmix64's own sequence, started per request.
``j`` is the request's own step counter (it survives preemption), so a request's accepted
lengths are a function of (seed, rid) alone: never of batch composition, stepping or
fast-forward. The last step of a request is clipped to the tokens it has left (vLLM discards
accepted tokens past ``max_tokens``); counters count the clipped value.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np

_PHI = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_INV53 = 2.0**-53


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on a uint64 array (wrapping arithmetic, in place: ``x`` is
    consumed; numpy array arithmetic wraps without a warning)."""
    z = x
    z ^= z >> _S30
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


_MASK = (1 << 64) - 1


def _mix(z: int) -> int:
    """:func:`splitmix64` on one Python integer (the same values, no array overhead)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def stream_state(key: int, rid: int) -> int:
    """``s_rid = splitmix64(key ⊕ splitmix64(rid))``: request ``rid``'s stream under ``key``."""
    return _mix((key & _MASK) ^ _mix(rid & _MASK))


_STEPS_PHI = np.arange(1, 1 << 12, dtype=np.uint64) * _PHI
"""(j + 1)·φ mod 2⁶⁴ for j = 0, 1, …: the counter part of every draw (grown on demand)."""


def _top_bits(key: int, rid: int, j0: int, count: int) -> np.ndarray:
    """The top 53 bits of the draws of steps ``j0 … j0 + count − 1`` (U = bits · 2⁻⁵³)."""
    global _STEPS_PHI
    if j0 + count > len(_STEPS_PHI):
        size = max(j0 + count, 2 * len(_STEPS_PHI))
        _STEPS_PHI = np.arange(1, size + 1, dtype=np.uint64) * _PHI
    z = _STEPS_PHI[j0 : j0 + count] + np.uint64(stream_state(key, rid))
    z = splitmix64(z)
    z >>= _S11
    return z


def uniforms(key: int, rid: int, j0: int, count: int) -> np.ndarray:
    """U of steps ``j0 … j0 + count − 1`` of request ``rid`` under ``key`` (floats in [0, 1))."""
    return _top_bits(key, rid, j0, count).astype(np.float64) * _INV53


BLOCK_REQUESTS = 256
"""Requests (consecutive ids) whose first steps are drawn together."""
BLOCK_STEPS = 256
"""Steps drawn ahead per request in the first block; later blocks draw the 99th percentile of
the steps the requests joined since needed (:meth:`AcceptanceModel._next_block_steps`), or,
where the requests' lengths are known (:meth:`AcceptanceModel.expect`), each row what its
request is expected to need; a longer request draws the rest on its own. The values never
depend on the block's widths."""
_CHUNK_ROWS = 32
"""Rows of a block drawn per pass (scratch arrays of 32 rows stay in cache: several times
faster than whole-block passes)."""
_COMPARE_K = 8
"""Up to this many drafts, accepted lengths are counted by k comparisons (cheaper than a
binary search on small k)."""


class DrawBlock:
    """The first steps' draws of requests ``b·BLOCK_REQUESTS …``, rows laid end to end.

    Row r occupies ``starts[r] … starts[r] + widths[r]`` of the flat arrays: ``a`` (int8)
    holds 0 then the accepted lengths of steps 0 … widths[r] − 1, ``cum`` (int64) their
    prefix sums (0 first). ``totals[r]`` is the row's last prefix sum. ``scaled`` caches
    ``cum · scale`` by scale and ``extra`` what a user derives from the block (the
    speculative pool's levels): both go when the block is dropped. Read-only."""

    __slots__ = ("a", "cum", "extra", "run", "scaled", "starts", "totals", "widths")

    def __init__(self, a: np.ndarray, cum: np.ndarray, starts: list[int], widths: list[int],
                 totals: list[int]) -> None:  # fmt: skip
        self.a, self.cum, self.starts, self.widths, self.totals = a, cum, starts, widths, totals
        self.run: np.ndarray | None = None
        """The running sum of ``a`` over the flat array (non-decreasing): row r's prefix
        sums plus its base ``run[starts[r]]``; None until computed (:meth:`running`)."""
        self.scaled: dict[int, np.ndarray] = {}
        self.extra: dict[Any, Any] = {}


    def running(self) -> np.ndarray:
        """:attr:`run`, computed on first use."""
        if self.run is None:
            self.run = np.cumsum(self.a, dtype=np.int64)
        return self.run


def _counters(states: np.ndarray, widths: np.ndarray, starts: np.ndarray, w: int) -> np.ndarray:
    """The draws' counters of a block, rows end to end: slot s of row r holds
    ``states[r] + s·φ`` (slot s holds step s − 1's draw; slot 0 the leading 0), wrapping.
    ``w`` ≥ 0: every row is w steps wide (one broadcast addition); else a running sum of φ
    restarted at each row's state."""
    if w >= 0:
        if w > len(_STEPS_PHI):
            _top_bits(0, 0, 0, w)  # grows the counter table
        slots = np.concatenate([np.zeros(1, np.uint64), _STEPS_PHI[:w]])
        return (slots[None, :] + states[:, None]).ravel()
    z = np.full(int(starts[-1] + widths[-1] + 1), _PHI, dtype=np.uint64)
    prev = np.zeros_like(states)  # each row's predecessor's last counter
    prev[1:] = states[:-1] + widths[:-1].astype(np.uint64) * _PHI
    z[starts] = states - prev
    np.cumsum(z, out=z)
    return z


class AcceptanceModel:
    """Seeded accepted lengths for k drafts with per-position conditional rates ``alphas``."""

    def __init__(self, alphas: tuple[float, ...] | list[float], key: int) -> None:
        if not alphas:
            raise ValueError("speculation needs at least one draft position")
        self.k = len(alphas)
        self.key = int(key)
        self.survive = np.cumprod(np.asarray(alphas, dtype=np.float64))
        """A_i = Π_{m≤i} α_m, non-increasing in i."""
        scaled = np.ceil(self.survive[::-1] * 2.0**53).astype(np.uint64)
        self._thresholds = scaled
        """⌈A_i·2⁵³⌉ in increasing order: U = x·2⁻⁵³ < A_i ⟺ x < ⌈A_i·2⁵³⌉ for the integer
        x (the top 53 bits), so a = 1 + #{i : x < threshold_i} = k + 1 − #{i : threshold_i ≤
        x}: k integer comparisons, or one binary search (no float conversion)."""
        self._th_list = [np.uint64(t) for t in scaled.tolist()]
        self.mean = 1.0 + float(self.survive.sum())
        self._blocks: dict[int, DrawBlock] = {}
        self._block_steps = BLOCK_STEPS
        self._needs: list[int] = []
        """Steps the first joins since the last block was drawn needed (sizes the next)."""
        self.expected: tuple[np.ndarray, np.ndarray] | None = None
        """Per request id: (computed tokens, tokens left) expected at its first join
        (:meth:`expect`), or None."""

    def expect(self, computed: np.ndarray, left: np.ndarray) -> None:
        """Announce the requests (ids 0 … n − 1): the computed tokens and the tokens left to
        decode each is expected to join the pool with. A block then draws each row about
        what its request needs (``left / mean · 1.1 + 8`` steps) instead of the percentile
        width; users may precompute per-row work on it (:class:`DrawBlock`). Only widths
        change: a request that needs more draws the rest on its own, values are the same."""
        self.expected = (np.asarray(computed, np.int64), np.asarray(left, np.int64))
        self._blocks.clear()

    def _count(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Accepted lengths 1 + #{i : x < threshold_i} of the top bits ``x`` (int64; written
        into ``out`` when given). The comparisons add up in int8 (a ≤ k + 1 ≤ 9)."""
        if self.k > _COMPARE_K:
            a = np.searchsorted(self._thresholds, x, side="right")
            np.subtract(self.k + 1, a, out=a)
            if out is None:
                return a  # type: ignore[no-any-return]
            out[...] = a
            return out
        th = self._th_list
        small = (x < th[0]).view(np.int8) + np.int8(1)
        for t in th[1:]:
            small += (x < t).view(np.int8)
        if out is None:
            return small.astype(np.int64)
        out[...] = small
        return out

    def lengths(self, rid: int, j0: int, count: int) -> np.ndarray:
        """Unclipped accepted lengths (1 … k + 1) of steps ``j0 … j0 + count − 1``."""
        return self._count(_top_bits(self.key, rid, j0, count))

    def block(self, b: int) -> DrawBlock:
        """Block ``b``'s draws (:class:`DrawBlock`): the same values as :meth:`lengths`,
        drawn in one vectorised pass (a join then slices its row), :data:`_CHUNK_ROWS` rows
        at a time so that the scratch arrays stay in cache. The last few blocks are kept."""
        got = self._blocks.get(b)
        if got is not None:
            return got
        widths = self._widths(b)
        span = widths + 1
        ends = np.cumsum(span)
        starts = ends - span
        rids = np.arange(b * BLOCK_REQUESTS, (b + 1) * BLOCK_REQUESTS, dtype=np.uint64)
        states = splitmix64(splitmix64(rids) ^ np.uint64(self.key & _MASK))
        w = int(widths[0])
        uniform = bool((widths == w).all())
        z = _counters(states, widths, starts, w if uniform else -1)
        a = np.empty(len(z), dtype=np.int8 if self.k < 127 else np.int64)  # 1 ≤ a ≤ k + 1
        bounds = list(pairwise([*starts[::_CHUNK_ROWS].tolist(), len(z)]))
        tmp = np.empty(max(hi - lo for lo, hi in bounds), dtype=np.uint64)
        for lo, hi in bounds:
            zz, t = z[lo:hi], tmp[: hi - lo]
            for shift, mul in ((_S30, _M1), (_S27, _M2), (_S31, None)):  # splitmix64
                np.right_shift(zz, shift, out=t)
                zz ^= t
                if mul is not None:
                    zz *= mul
            zz >>= _S11
            self._count(zz, a[lo:hi])
        a[starts] = 0
        run = None
        if uniform:  # each row's prefix sums in one 2-D pass
            cum = np.cumsum(a.reshape(BLOCK_REQUESTS, w + 1), axis=1, dtype=np.int64).ravel()
        else:
            run = np.cumsum(a, dtype=np.int64)
            cum = run - np.repeat(run[starts], span)
        if len(self._blocks) >= 4:
            del self._blocks[next(iter(self._blocks))]
        got = self._blocks[b] = DrawBlock(
            a, cum, starts.tolist(), widths.tolist(), cum[ends - 1].tolist()
        )
        got.run = run
        return got

    def _widths(self, b: int) -> np.ndarray:
        """Steps drawn per row of block ``b``: each row its expected need where the requests
        were announced (:meth:`expect`; 8 past the last), else :meth:`_next_block_steps`."""
        lo = b * BLOCK_REQUESTS
        if self.expected is not None and lo < len(self.expected[1]):
            left = np.zeros(BLOCK_REQUESTS, dtype=np.int64)
            known = self.expected[1][lo : lo + BLOCK_REQUESTS]
            left[: len(known)] = np.maximum(known, 0)
            return (left * (1.1 / self.mean)).astype(np.int64) + 8
        return np.full(BLOCK_REQUESTS, self._next_block_steps(), dtype=np.int64)

    def _next_block_steps(self) -> int:
        """Steps of the next block: the 99th percentile of the steps the first joins since the
        last block needed (a multiple of 64 in [64, 2048]; :data:`BLOCK_STEPS` before any)."""
        needs = self._needs
        if len(needs) >= 16:
            want = sorted(needs)[len(needs) * 99 // 100]
            self._block_steps = min(max(-(-want // 64) * 64, 64), 2048)
            needs.clear()
        return self._block_steps

    def lengths_until(self, rid: int, j0: int, tokens_left: int) -> np.ndarray:
        """Accepted lengths from step ``j0`` until ``tokens_left`` tokens are reached, the last
        one clipped so that they sum to exactly ``tokens_left`` (≥ 1)."""
        return self.draw_until(rid, j0, tokens_left)[0]

    def draw_until(self, rid: int, j0: int, tokens_left: int) -> tuple[np.ndarray, np.ndarray]:
        """(:meth:`lengths_until`, its prefix sums with a leading 0): fresh arrays."""
        a, cum, last = self.draw_row(rid, j0, tokens_left)
        a = a[:last].copy()  # the drawn arrays may be a cached block's rows
        a[last - 1] -= int(cum[last]) - tokens_left
        cum = cum[: last + 1].copy()
        cum[last] = tokens_left
        return a, cum

    def draw_packed(
        self, rid: int, j0: int, tokens_left: int, scale: int
    ) -> tuple[np.ndarray, int, np.ndarray, int]:
        """``(a, i, y, last)``: :meth:`draw_row`'s lengths as ``a[i:]`` (a cached block's
        flat array, on a first join: no view made) and its prefix sums times ``scale`` as
        ``y`` (the speculative pool's packed levels: the whole block's at once on a first
        join, computed otherwise), ``last`` found on them."""
        if j0 == 0 and rid >= 0:
            b, r = divmod(rid, BLOCK_REQUESTS)
            block = self._blocks.get(b) or self.block(b)
            if block.totals[r] >= tokens_left:  # the common case: the row reaches it
                scaled = block.scaled.get(scale)
                if scaled is None:
                    scaled = block.scaled[scale] = block.cum * scale
                s0 = block.starts[r]
                y = scaled[s0 : s0 + block.widths[r] + 1]
                last = int(y.searchsorted(tokens_left * scale))
                if len(self._needs) < 4096:
                    self._needs.append(last)
                return block.a, s0 + 1, y, last
        a, cum, last = self.draw_row(rid, j0, tokens_left)
        return a, 0, cum * scale, last

    def draw_row(self, rid: int, j0: int, tokens_left: int) -> tuple[np.ndarray, np.ndarray, int]:
        """``(a, cum, last)``: unclipped accepted lengths ``a`` from step ``j0`` on, their
        prefix sums ``cum`` (leading 0) and the step count ``last`` that reaches
        ``tokens_left``: ``cum[last − 1] < tokens_left ≤ cum[last]`` (the pool's join; the
        last step keeps ``tokens_left − cum[last − 1]``). ``a`` and ``cum`` may be longer
        than ``last`` and may be views of a cached block: read-only."""
        if tokens_left < 1:
            raise ValueError(f"tokens_left must be >= 1, got {tokens_left}")
        if j0 == 0 and rid >= 0:  # a request's first join: its block's draws, drawn at once
            b, r = divmod(rid, BLOCK_REQUESTS)
            block = self._blocks.get(b) or self.block(b)
            s0, w = block.starts[r], block.widths[r]
            a, cum = block.a[s0 + 1 : s0 + 1 + w], block.cum[s0 : s0 + 1 + w]
            if block.totals[r] >= tokens_left:  # the common case: the row reaches it
                last = int(cum.searchsorted(tokens_left))
                if len(self._needs) < 4096:
                    self._needs.append(last)
                return a, cum, last
        else:
            count = int(tokens_left / self.mean * 1.1) + 8
            a = self.lengths(rid, j0, count)
            cum = np.zeros(count + 1, dtype=np.int64)
            np.cumsum(a, out=cum[1:])
        while cum[-1] < tokens_left:  # rare: draw more (the same values as one longer draw)
            more = self.lengths(rid, j0 + len(a), int((tokens_left - cum[-1]) / self.mean) + 8)
            a = np.concatenate([a, more])
            cum = np.concatenate([cum, cum[-1] + np.cumsum(more)])
        last = int(cum.searchsorted(tokens_left))  # cum[last] ≥ left > cum[last − 1]
        if j0 == 0 and len(self._needs) < 4096:
            self._needs.append(last)
        return a, cum, last


def accepted_per_position(lengths: np.ndarray, k: int) -> np.ndarray:
    """How many of the steps accepted draft i (i = 1 … k): #{steps with a ≥ i + 1}."""
    counts = np.bincount(np.asarray(lengths, dtype=np.int64) - 1, minlength=k + 1)
    return counts[::-1].cumsum()[::-1][1 : k + 1]
