"""The speculative decode pool: each member verifies k drafts per step and keeps a seeded number
of tokens (docs/design/disaggregation-speculation.md §2.3).

Same interface as :class:`~tidal.engine.decode_pool.DecodePool` (whose membership, departure
heap and step counter it shares), chosen by :class:`~tidal.engine.state.EngineState` only when
speculation is configured. At :meth:`join` a member's accepted lengths up to its departure are
drawn (:class:`~tidal.engine.acceptance.AcceptanceModel`: a function of (seed, request, the
request's own step counter), never of batching or fast-forward) and turned into

* its departure step (the step whose accepted tokens reach its target) on the shared heap;
* its packed level relative to its end, ``P(j) = (tokens(j) − left)·2³² + blocks(j) −
  blocks(last)`` at each of its steps j < last (``tokens(j) = cum[j]`` gained by then, its KV
  blocks then), added into the pool's level array ``lev`` over pool steps (0 from its
  departure on: a departed member leaves nothing to undo). Only differences at or after the
  current step are read: ``lev[t + 1] − lev[t]`` is the step's token gain times 2³² plus its
  new blocks (low 32 bits: a range's blocks are below 2³²) — the Σ context of a run, a
  step's or a range's KV need are two reads (:meth:`ctx_run`, :meth:`blocks_needed_range`),
  and a join is two vectorised operations on its row and one slice addition: with the
  draws' prefix sums scaled by ``2³²·bs + 1`` (done once per block of requests), one
  addition of a constant and one floor division by bs give both halves (:meth:`_levels`).

A member's computed count is ``c0 + cum[steps − join]`` (``cum``: prefix sums of its draws);
:meth:`remove` (preemption, stop) subtracts its levels still ahead. Invariant while
pooled, as in the plain pool: ``computed = num_tokens − 1``, ``num_blocks = ceil(computed/bs)``.

Counters (vLLM's names, counted when a member leaves; summed over the run):
``spec_decode_num_drafts`` (member-steps that proposed), ``…_num_draft_tokens`` (k each),
``…_num_accepted_tokens`` (Σ (a − 1), the last step clipped to the tokens left) and the
accepted count per draft position.

Simplification against vLLM: the KV slots of rejected drafts (vLLM allocates ``c + 1 + k`` slots
before the step, lookahead) are not held — at most one block per member less under KV pressure.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from tidal.core.request import Request
from tidal.engine.acceptance import BLOCK_REQUESTS, AcceptanceModel
from tidal.engine.decode_pool import DecodePool
from tidal.engine.spec_levels import first_join_levels

_LOW = (1 << 32) - 1

"""The block part of a packed level difference."""


class SpecDecodePool(DecodePool):
    speculative = True
    initial_steps = 256
    """Pool steps :attr:`_lev` holds at first and at least after a growth (tests shrink it to
    exercise growth)."""
    max_tokens_blocks = 1 << 30
    """Bound on ``left·bs`` (tokens a member has left × block size: 67 M tokens at block
    size 16): the packed levels (``cum·(2³²·bs + 1)``, ``left·2³²·bs``) then fit in int64."""

    def __init__(self, block_size: int, acceptance: AcceptanceModel) -> None:
        super().__init__(block_size)
        self.acceptance = acceptance
        self.k = acceptance.k
        self.rows_per_decode = self.k + 1
        self._shift = block_size.bit_length() - 1 if block_size & (block_size - 1) == 0 else -1
        """log2(block size) when it is a power of two, else −1."""
        self._scale = (block_size << 32) + 1
        self._k_box = np.zeros((), dtype=np.int64)
        """The constant of :meth:`_levels` as a 0-d array (a Python-int operand costs numpy
        a scalar conversion per call: ~3,000 more instructions under callgrind)."""
        self._div_box = np.array(
            self._shift if self._shift >= 0 else block_size, dtype=np.int64
        )  # fmt: skip
        """The shift (or the block size) as a 0-d array, for the same reason."""
        self._rec: dict[int, tuple[int, int, np.ndarray, int, np.ndarray, int, int, int]] = {}
        """rid → (join step, computed at join, ``a`` and ``i``: its unclipped accepted
        lengths are ``a[i:]``, ``y`` and ``o``: ``y[o:] = cum·_scale`` with cum their prefix
        sums (cum[0] = 0), steps to departure ``last``, tokens to gain ``left``): the member
        gains ``a[i + j]`` at its step j < last − 1 and ``left − cum[last − 1]`` at its last
        (the arrays may be longer and are read-only: a draw block's, shared)."""
        self._key = ("spec_pool_levels", block_size)
        """Where this pool's first-join levels of a draw block are kept (:meth:`_first`)."""
        self._origin = 0
        """Pool step of index 0 of :attr:`_lev`."""
        self._lev = np.zeros(self.initial_steps, dtype=np.int64)
        """The packed levels (module docstring); flat past its end."""
        self._ctx = 0
        """Σ (computed + 1) of the members at the current step."""
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self._ge = np.zeros(self.k, dtype=np.int64)
        """Verification steps that accepted draft i (a ≥ i + 1, i = 1 … k) of the members that
        left, but for the rows still in :attr:`_pending`."""
        self._pending: list[np.ndarray] = []
        """Unclipped lengths of departed members' steps, counted into :attr:`_ge` in one
        pass when there are many."""
        self._pending_excess: list[int] = []
        """Per pending row, what its last step was clipped by (0: not clipped or not run)."""
        self._pending_len = 0

    # ------------------------------------------------------------------ arrays
    def _span(self, stop: int) -> int:
        """Grow :attr:`_lev` to hold pool steps up to ``stop`` (exclusive; every level past
        the array is 0), first dropping the consumed prefix; returns :attr:`_origin`."""
        origin = self._origin
        lev = self._lev
        if stop - origin > len(lev):
            if self.steps - origin > len(lev) // 2:  # drop the consumed prefix first
                lev = lev[self.steps - origin :]
                origin = self._origin = self.steps
            size = max(2 * (stop - origin), self.initial_steps)  # twice the live span
            self._lev = np.concatenate([lev, np.zeros(size - len(lev), np.int64)])
        return origin

    def _levels(self, c0: int, left: int, y: np.ndarray) -> np.ndarray:
        """``P(j)`` from ``y = cum·(2³²·bs + 1)`` (prefix sums each below ``left``):
        ``(y + c0 + bs − 1 − blocks(last)·bs − left·2³²·bs) // bs`` — the floor division of
        ``cum·2³²·bs + cum + …`` keeps the multiples of bs whole (``cum·2³² − left·2³²``)
        and floors the blocks part, so one addition and one shift give both halves."""
        bs = self.block_size
        b0 = c0 + bs - 1
        box = self._k_box
        box[()] = b0 - (left + b0) // bs * bs - (left << 32) * bs
        lev = y + box
        if self._shift >= 0:  # a power of two: a shift (floor division), cheaper than //
            np.right_shift(lev, self._div_box, out=lev)
        else:
            np.floor_divide(lev, self._div_box, out=lev)
        return lev

    def _level(self, i: int) -> int:
        """The level at index ``i`` of :attr:`_lev` (0 past its end)."""
        lev = self._lev
        return lev.item(i) if i < len(lev) else 0

    @property
    def accepted_per_pos(self) -> np.ndarray:
        """Steps that accepted draft i (i = 1 … k), over the members that left."""
        self._flush()
        return self._ge.copy()

    def _flush(self) -> None:
        """Count the pending departed rows into :attr:`_ge`, each clipped last step at its
        clipped value (k ≤ 8: k counts of ``a > i`` on the bytes, cheaper than a bincount's
        conversion to int64)."""
        rows = self._pending
        if not rows:
            return
        flat = np.concatenate(rows)
        ends = np.cumsum([len(r) for r in rows]) - 1
        excess = np.array(self._pending_excess, dtype=flat.dtype)
        flat[ends] -= excess
        if self.k <= 8:
            self._ge += [np.count_nonzero(flat > i) for i in range(1, self.k + 1)]
        else:
            self._ge += np.bincount(flat, minlength=self.k + 2)[::-1].cumsum()[::-1][2:]
        rows.clear()
        self._pending_excess.clear()
        self._pending_len = 0

    # ------------------------------------------------------------------ membership
    def join(self, req: Request, target_output: int) -> None:
        """Add ``req`` (caught up: computed == num_tokens − 1); it departs after the step whose
        accepted tokens reach output token number ``target_output``."""
        rid = req.request_id
        c0 = req.num_computed_tokens
        left = target_output + req.prompt_len + req.num_extra_tokens - 1 - c0
        if left * self.block_size >= self.max_tokens_blocks:
            raise ValueError(
                f"request {rid}: {left} tokens to decode exceed what speculative decoding "
                f"simulates at block size {self.block_size} (fewer than "
                f"{self.max_tokens_blocks // self.block_size}); lower max_output_len"
            )
        got = self._first(rid, c0, left) if req.num_spec_steps == 0 else None
        if got is not None:  # the block's precomputed levels of the announced request
            lvl, a, i, y, o, last = got
        else:
            a, i, y, last = self.acceptance.draw_packed(rid, req.num_spec_steps, left, self._scale)
            lvl, o = self._levels(c0, left, y[:last]), 0
        steps = self.steps
        origin = self._origin
        if steps + last > origin + len(self._lev):
            origin = self._span(steps + last)
        lo = steps - origin
        ahead = self._lev[lo : lo + last]  # a view: added in place (no write-back copy)
        ahead += lvl[o : o + last]
        self._ctx += c0 + 1
        self._rec[rid] = (steps, c0, a, i, y, o, last, left)
        req.pool_base = c0
        req.in_pool = True
        self.members[rid] = req
        self._joins += 1
        self._join_id[rid] = self._joins
        heapq.heappush(self._leave, (steps + last, rid, self._joins))

    def _first(
        self, rid: int, c0: int, left: int
    ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray, int, int] | None:
        """``(levels, a, i, y, o, last)`` of a first join whose computed count and tokens left
        are those announced (:meth:`AcceptanceModel.expect`): its levels are
        ``levels[o : o + last]``, computed for the whole draw block at once (the same
        values as :meth:`_levels`: :func:`~tidal.engine.spec_levels.first_join_levels`);
        None otherwise."""
        acc = self.acceptance
        if acc.expected is None or not 0 <= rid < len(acc.expected[1]):
            return None
        b, r = divmod(rid, BLOCK_REQUESTS)
        block = acc._blocks.get(b) or acc.block(b)
        got = block.extra.get(self._key)
        if got is None:
            lo, (c0_all, left_all) = b * BLOCK_REQUESTS, acc.expected
            got = block.extra[self._key] = first_join_levels(
                block, c0_all[lo : lo + BLOCK_REQUESTS], left_all[lo : lo + BLOCK_REQUESTS],
                self.block_size, self.max_tokens_blocks,
            )  # fmt: skip
        lvl, y, c0s, lefts, lasts = got
        if r >= len(lasts) or lasts[r] < 0 or c0s[r] != c0 or lefts[r] != left:
            return None
        o = block.starts[r]
        return lvl, block.a, o + 1, y, o, lasts[r]

    def computed(self, req: Request) -> int:
        join, c0, _, _, y, o, last, left = self._rec[req.request_id]
        s = self.steps - join
        return c0 + (y.item(o + s) // self._scale if s < last else left)

    def materialize(self, req: Request) -> None:
        c = self.computed(req)
        req.num_computed_tokens = c
        req.num_output_tokens = c + 1 - req.prompt_len - req.num_extra_tokens
        req.num_blocks = -(-c // self.block_size)

    def remove(self, req: Request) -> None:
        """Take ``req`` out (departure, preemption, stop): write its counters back, withdraw
        its levels still ahead (none at its departure), count its verification steps."""
        rid = req.request_id
        join, c0, a, i, y, o, last, left = self._rec.pop(rid)
        s = self.steps - join
        gained = y.item(o + s) // self._scale if s < last else left
        c = c0 + gained
        req.num_computed_tokens = c
        req.num_output_tokens = c + 1 - req.prompt_len - req.num_extra_tokens
        req.num_blocks = -(-c // self.block_size)
        if s < last:  # steps it will not run: its level is 0 from now on
            lo = self.steps - self._origin
            ahead = self._lev[lo : lo + last - s]
            ahead -= self._levels(c0, left, y[o + s : o + last])
        self._ctx -= c + 1
        if s:
            self.num_drafts += s
            self.num_draft_tokens += s * self.k
            self.num_accepted_tokens += gained - s
            self._pending.append(a[i : i + s])
            self._pending_excess.append(y.item(o + last) // self._scale - left if s == last else 0)
            self._pending_len += s
            if self._pending_len > 1 << 16:
                self._flush()
        req.num_spec_steps += s
        del self.members[rid]
        del self._join_id[rid]
        req.in_pool = False

    # ------------------------------------------------------------------ aggregates
    def tokens_and_ages(self) -> tuple[np.ndarray, np.ndarray]:
        """Every member's tokens after the next step's input and its generated tokens."""
        reqs = list(self.members.values())
        tokens = np.array([self.computed(r) + 1 for r in reqs], dtype=np.int64)
        inputs = np.array([r.prompt_len + r.num_extra_tokens for r in reqs], dtype=np.int64)
        return tokens, tokens - inputs

    def max_age(self) -> int:
        return self.age_rank(1)

    def age_rank(self, q: int) -> int:
        """The ``q``-th oldest member's age (−1 when fewer than ``q`` members); O(members)."""
        n = len(self.members)
        q = max(q, 1)
        if n < q:
            return -1
        _, ages = self.tokens_and_ages()
        return int(np.partition(ages, n - q)[n - q])

    def decode_ctx(self) -> int:
        """Σ attended context of the next step: Σ(computed + 1) (each member's first row)."""
        return self._ctx

    def level_run(self, start: int, count: int) -> list[int]:
        """The packed levels of the steps ``start … start + count`` from now (``count + 1``
        values): step i's token gain is ``(v[i + 1] − v[i]) >> 32``, so the context of step
        i + 1 of a run is that of step i plus it (:meth:`ctx_run` as Python integers)."""
        i = self.steps - self._origin + start
        lev = self._lev
        if i + count >= len(lev):
            i = self.steps + start - self._span(self.steps + start + count + 1)
            lev = self._lev
        return lev[i : i + count + 1].tolist()  # type: ignore[no-any-return]

    def ctx_run(self, start: int, count: int) -> np.ndarray:
        """:meth:`decode_ctx` of the steps ``start … start + count − 1`` from now (a run)."""
        i = self.steps - self._span(self.steps + start + count)
        lev = self._lev
        out = lev[i + start : i + start + count] - lev[i]
        out >>= 32
        out += self._ctx
        return out

    def blocks_needed(self, offset: int = 0) -> int:
        i = self.steps + offset - self._origin
        lev = self._lev
        if i + 1 < len(lev):
            return (lev.item(i + 1) - lev.item(i)) & _LOW
        return (self._level(i + 1) - self._level(i)) & _LOW  # levels past the end are 0

    def blocks_needed_range(self, start: int, stop: int) -> int:
        if stop <= start:
            return 0
        i = self.steps - self._origin  # levels past the array's end are 0
        lev = self._lev
        if i + stop < len(lev):
            return (lev.item(i + stop) - lev.item(i + start)) & _LOW
        return (self._level(i + stop) - self._level(i + start)) & _LOW

    def needs_block(self, req: Request) -> int:
        join, c0, _, _, y, o, last, left = self._rec[req.request_id]
        s = self.steps - join
        if s >= last:
            return 0
        bs, sc = self.block_size, self._scale
        nxt = left if s + 1 == last else y.item(o + s + 1) // sc
        return (c0 + nxt + bs - 1) // bs - (c0 + y.item(o + s) // sc + bs - 1) // bs

    def steps_until_departure_or_full(self, free_blocks: int) -> int:
        """Steps (≥ 1) a pure-decode plan can repeat: until the first departure, and no further
        than the last step whose new blocks (from the next step on) fit in ``free_blocks``."""
        m = self.steps_to_departure()
        if m <= 1:
            return max(m, 1)
        # a member gains ≤ k + 1 tokens a step: ≤ ⌈(m − 1)(k + 1)/bs⌉ + 1 new blocks in m − 1
        bound = (-(-(m - 1) * (self.k + 1) // self.block_size) + 1) * len(self.members)
        if bound <= free_blocks:
            return m
        i = self.steps - self._span(self.steps + m + 1)
        lev = self._lev
        need = lev[i + 2 : i + m + 1] - lev[i + 1]  # blocks of steps 1 … j + 1, packed
        need &= _LOW
        if int(need[-1]) <= free_blocks:
            return m
        return 1 + int(np.searchsorted(need, free_blocks, side="right"))

    # ------------------------------------------------------------------ time
    def advance(self, num_steps: int) -> list[Request]:
        """Run ``num_steps`` verification steps; return the members that depart (removed)."""
        i = self.steps - self._origin  # levels past the array's end are 0
        lev = self._lev
        if i + num_steps < len(lev):
            self._ctx += (lev.item(i + num_steps) - lev.item(i)) >> 32
        else:
            self._ctx += (self._level(i + num_steps) - self._level(i)) >> 32
        heap = self._leave
        if heap and heap[0][0] <= self.steps + num_steps:  # a departure (or a stale entry)
            return super().advance(num_steps)
        self.steps += num_steps
        return []

    # ------------------------------------------------------------------ results
    def spec_counters(self) -> dict[str, int]:
        """vLLM's counters (summable over engines)."""
        out = {
            "spec_decode_num_drafts": self.num_drafts,
            "spec_decode_num_draft_tokens": self.num_draft_tokens,
            "spec_decode_num_accepted_tokens": self.num_accepted_tokens,
        }
        for i, v in enumerate(self.accepted_per_pos.tolist()):
            out[f"spec_decode_num_accepted_tokens_pos{i}"] = v
        return out


def spec_metrics(counters: dict[str, Any], k: int) -> dict[str, Any]:
    """``summary.json``'s speculation fields from summed counters: the three counters, the
    per-position list and the mean acceptance length ``1 + accepted / drafts``."""
    drafts = int(counters.get("spec_decode_num_drafts", 0))
    accepted = int(counters.get("spec_decode_num_accepted_tokens", 0))
    return {
        "spec_decode_num_drafts": drafts,
        "spec_decode_num_draft_tokens": int(counters.get("spec_decode_num_draft_tokens", 0)),
        "spec_decode_num_accepted_tokens": accepted,
        "spec_decode_num_accepted_tokens_per_pos": [
            int(counters.get(f"spec_decode_num_accepted_tokens_pos{i}", 0)) for i in range(k)
        ],
        "spec_decode_mean_acceptance_length": 1 + accepted / drafts if drafts else None,
    }


def make_pool(block_size: int, speculation: AcceptanceModel | None) -> DecodePool:
    """The engine state's decode pool: the plain one, or the speculative one when configured."""
    if speculation is None:
        return DecodePool(block_size)
    return SpecDecodePool(block_size, speculation)
