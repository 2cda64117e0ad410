"""The decode pool: running requests whose prefill is done, each computing one token per step.

Members are advanced lazily. The pool keeps a step counter ``steps``; a member's computed-token
count is ``pool_base + steps`` and is written back to the request only when it leaves. A decode
step therefore costs O(1) however large the batch, and the simulator can jump many steps at once:

* Σ attended context = Σ(pool_base) + n·(steps + 1), kept as one running sum;
* KV growth: a member needs a new block before a step iff its computed count is a multiple of
  the block size, i.e. iff ``pool_base ≡ −(steps + i) (mod block_size)`` at step offset i. A
  histogram of ``pool_base mod block_size`` answers "blocks needed at offset i" in O(1), and a
  sum over a range of offsets with whole cycles counted at once and at most two slice sums;
* departures (last output token, or the token before an external call) are known when a request
  joins: a heap of (departure step, request id) yields the next one.
* per-member arrays (a slot per member: ``pool_base`` and prompt + extra tokens) give the
  members' token counts and ages as numpy arrays without a Python loop (the KV forecast).
Invariant while pooled: ``computed = num_tokens − 1`` and ``num_blocks = ceil(computed / bs)``.
"""

from __future__ import annotations

import heapq

import numpy as np

from tidal.core.request import Request


class DecodePool:
    speculative = False
    """Members verify drafts (:class:`~tidal.engine.spec_pool.SpecDecodePool`)."""
    rows_per_decode = 1
    """Tokens of the step budget one member's decode takes (k + 1 when speculating)."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.steps = 0
        self.members: dict[int, Request] = {}
        self._base_sum = 0
        self._residue = [0] * block_size
        self._leave: list[tuple[int, int, int]] = []  # (departure step, request id, join id)
        self._join_id: dict[int, int] = {}
        self._joins = 0
        self._slot: dict[int, int] = {}
        self._free_slots: list[int] = []
        self._slot_base = np.zeros(64, dtype=np.int64)
        self._slot_input = np.zeros(64, dtype=np.int64)
        """Prompt + extra tokens of the member in each slot."""
        self._slot_used = np.zeros(64, dtype=bool)
        self._age_key = (-1, -1)
        self._age_off = 0
        self._rank_key = (-1, -1, -1)
        self._rank_off = 0

    def __len__(self) -> int:
        return len(self.members)

    # ------------------------------------------------------------------ membership
    def join(self, req: Request, target_output: int) -> None:
        """Add ``req`` (caught up: computed == num_tokens − 1); it departs after the step that
        samples output token number ``target_output``."""
        base = req.num_computed_tokens - self.steps
        fresh = self._age_key == (self._joins, len(self.members))
        req.pool_base = base
        req.in_pool = True
        self.members[req.request_id] = req
        self._base_sum += base
        self._residue[base % self.block_size] += 1
        target_computed = target_output + req.prompt_len + req.num_extra_tokens - 1
        self._joins += 1
        self._join_id[req.request_id] = self._joins
        if self._free_slots:
            slot = self._free_slots.pop()
        else:
            slot = len(self._slot)
            if slot == len(self._slot_used):
                grow = len(self._slot_used)
                self._slot_base = np.concatenate([self._slot_base, np.zeros(grow, np.int64)])
                self._slot_input = np.concatenate([self._slot_input, np.zeros(grow, np.int64)])
                self._slot_used = np.concatenate([self._slot_used, np.zeros(grow, bool)])
        self._slot[req.request_id] = slot
        self._slot_base[slot] = base
        self._slot_input[slot] = req.prompt_len + req.num_extra_tokens
        self._slot_used[slot] = True
        heapq.heappush(self._leave, (target_computed - base, req.request_id, self._joins))
        if fresh:  # the maximum age offset, kept without a re-scan
            self._age_off = max(self._age_off, base - int(self._slot_input[slot]))
            self._age_key = (self._joins, len(self.members))

    def computed(self, req: Request) -> int:
        return req.pool_base + self.steps

    def materialize(self, req: Request) -> None:
        """Write the lazily advanced counters and block count back to ``req``."""
        c = req.pool_base + self.steps
        req.num_computed_tokens = c
        req.num_output_tokens = c + 1 - req.prompt_len - req.num_extra_tokens
        req.num_blocks = -(-c // self.block_size)

    def remove(self, req: Request) -> None:
        self.materialize(req)
        fresh = self._age_key == (self._joins, len(self.members))
        i = self._slot[req.request_id]
        off = int(self._slot_base[i] - self._slot_input[i])
        del self.members[req.request_id]
        if fresh and off < self._age_off:  # not the oldest: the maximum stands
            self._age_key = (self._joins, len(self.members))
        del self._join_id[req.request_id]
        slot = self._slot.pop(req.request_id)
        self._slot_used[slot] = False
        self._free_slots.append(slot)
        self._base_sum -= req.pool_base
        self._residue[req.pool_base % self.block_size] -= 1
        req.in_pool = False

    def materialize_all(self) -> None:
        for req in self.members.values():
            self.materialize(req)

    # ------------------------------------------------------------------ aggregates
    def tokens_and_ages(self) -> tuple[np.ndarray, np.ndarray]:
        """Every member's tokens after the next step's input (``computed + 1``) and its
        generated output tokens (``tokens − prompt − extra``), in slot order."""
        used = self._slot_used
        tokens = self._slot_base[used] + (self.steps + 1)
        return tokens, tokens - self._slot_input[used]

    def max_age(self) -> int:
        """The oldest member's age as :meth:`tokens_and_ages` gives it (−1 when empty):
        ``max(base − input) + steps + 1``; a join raises the kept maximum, a removal of a
        member younger than it keeps it, and only the oldest's removal (or an empty pool)
        makes the next call re-scan the slots."""
        if not self.members:
            return -1
        key = (self._joins, len(self.members))
        if self._age_key != key:
            used = self._slot_used
            self._age_off = int((self._slot_base[used] - self._slot_input[used]).max())
            self._age_key = key
        return self._age_off + self.steps + 1

    def age_rank(self, q: int) -> int:
        """The ``q``-th oldest member's age (``q`` = 1: :meth:`max_age`; −1 when fewer than
        ``q`` members), re-ranked only after a membership change, as :meth:`max_age`."""
        n = len(self.members)
        if q <= 1:
            return self.max_age()
        if n < q:
            return -1
        key = (self._joins, n, q)
        if self._rank_key != key:
            used = self._slot_used
            off = self._slot_base[used] - self._slot_input[used]
            self._rank_off = int(np.partition(off, n - q)[n - q])
            self._rank_key = key
        return self._rank_off + self.steps + 1

    def decode_ctx(self) -> int:
        """Σ attended context of the next step: Σ(computed + 1)."""
        n = len(self.members)
        return self._base_sum + n * (self.steps + 1)

    def blocks_needed(self, offset: int = 0) -> int:
        """New KV blocks the members need for the step ``offset`` steps from now."""
        return self._residue[(-(self.steps + offset)) % self.block_size]

    def blocks_needed_range(self, start: int, stop: int) -> int:
        """Σ blocks_needed(i) for start ≤ i < stop (each member needs one per block_size steps).

        The ``p = count mod block_size`` offsets left after whole cycles read residues
        j0, j0 − 1, …, j0 − p + 1 (mod block_size), with j0 = −(steps + first) mod block_size:
        one cyclic range, summed as at most two slices (no Python loop)."""
        bs = self.block_size
        count = stop - start
        if count <= 0:
            return 0
        full, part = divmod(count, bs)
        total = full * len(self.members)
        if part:
            res = self._residue
            j0 = (-(self.steps + start + full * bs)) % bs
            lo = j0 - part + 1
            if lo >= 0:
                total += sum(res[lo : j0 + 1])
            else:
                total += sum(res[: j0 + 1]) + sum(res[bs + lo :])
        return total

    def needs_block(self, req: Request) -> int:
        """New KV blocks ``req`` needs for the next step (0 or 1 here)."""
        return (req.pool_base + self.steps) % self.block_size == 0

    def steps_until_departure_or_full(self, free_blocks: int) -> int:
        """Steps (≥ 1) a pure-decode plan can repeat: until the first departure, and no further
        than the last step whose new KV blocks (counted from the next step on) fit in
        ``free_blocks`` (bisection on the monotone :meth:`blocks_needed_range`)."""
        m = self.steps_to_departure()
        # each member needs at most one block per block_size steps: ⌈(m − 1)/bs⌉ in m − 1 steps
        bound = -(-(m - 1) // self.block_size) * len(self.members)
        if bound > free_blocks and self.blocks_needed_range(1, m) > free_blocks:
            lo, hi = 1, m  # lo fits, hi does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self.blocks_needed_range(1, mid) <= free_blocks:
                    lo = mid
                else:
                    hi = mid
            m = lo
        return m

    def steps_to_departure(self) -> int:
        """Steps until the earliest departure (≥ 1), or a huge number when empty."""
        heap = self._leave
        joins = self._join_id
        while heap:
            step, rid, jid = heap[0]
            if joins.get(rid) == jid:
                return step - self.steps
            heapq.heappop(heap)
        return 1 << 60

    # ------------------------------------------------------------------ time
    def advance(self, num_steps: int) -> list[Request]:
        """Run ``num_steps`` decode steps; return the members that depart (removed)."""
        self.steps += num_steps
        out: list[Request] = []
        heap = self._leave
        members = self.members
        joins = self._join_id
        while heap and heap[0][0] <= self.steps:
            step, rid, jid = heapq.heappop(heap)
            if joins.get(rid) != jid:
                continue
            req = members[rid]
            if step < self.steps:
                raise AssertionError(f"request {rid} overshot its departure step")
            self.remove(req)
            out.append(req)
        return out
