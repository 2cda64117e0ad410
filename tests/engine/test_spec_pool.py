"""The speculative decode pool against a per-member reference: contexts, block needs,
departures and counters under random joins, steps and removals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.core.request import Request
from tidal.engine.acceptance import AcceptanceModel
from tidal.engine.spec_pool import SpecDecodePool


def blocks_for(c: int, bs: int) -> int:
    return -(-c // bs)


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(st.tuples(st.sampled_from("jar"), st.integers(1, 6), st.integers(1, 200)),
                 min_size=1, max_size=60),
    k=st.integers(1, 4),
    alpha=st.floats(0.0, 1.0),
    bs=st.sampled_from([1, 3, 4, 16]),
    initial=st.sampled_from([1, 3, 256]),
)  # fmt: skip
def test_pool_matches_a_per_member_reference(ops, k, alpha, bs, initial):
    """``initial``: the level array's first size (small ones make it grow often)."""
    acc = AcceptanceModel([alpha] * k, 17)
    pool = type("Pool", (SpecDecodePool,), {"initial_steps": initial})(bs, acc)
    ref: dict[int, tuple[Request, list[int]]] = {}  # rid → (req, remaining accepted lengths)
    next_rid = 0
    accepted = drafts = 0
    for op, a, b in ops:
        if op == "j" or not pool.members:
            req = Request(next_rid, 0, b, a + b % 50)
            req.num_computed_tokens = req.prompt_len  # caught up after the prefill
            req.num_output_tokens = 1
            left = req.max_output_len - 1
            if left < 1:
                next_rid += 1
                continue
            pool.join(req, req.max_output_len)
            ref[next_rid] = (req, acc.lengths_until(next_rid, 0, left).tolist())
            next_rid += 1
        elif op == "a":
            steps = min(a, pool.steps_to_departure())
            # contexts and blocks of the coming steps, from the reference
            ctx = []
            need = []
            comp = {rid: pool.computed(r) for rid, (r, _) in ref.items()}
            for i in range(steps):
                ctx.append(sum(comp[rid] + 1 for rid in ref))
                need.append(sum(blocks_for(comp[rid] + seq[i], bs) - blocks_for(comp[rid], bs)
                                for rid, (_, seq) in ref.items()))  # fmt: skip
                for rid, (_, seq) in ref.items():
                    comp[rid] += seq[i]
            np.testing.assert_array_equal(pool.ctx_run(0, steps), ctx)
            assert [pool.blocks_needed(i) for i in range(steps)] == need
            assert pool.blocks_needed_range(0, steps) == sum(need)
            left = pool.advance(steps)
            for rid, (r, seq) in list(ref.items()):
                drafts += min(steps, len(seq))
                accepted += sum(seq[:steps]) - min(steps, len(seq))
                ref[rid] = (r, seq[steps:])
                if not ref[rid][1]:
                    del ref[rid]
                    assert r in left
                    assert r.num_output_tokens == r.max_output_len
            assert len(left) == len(set(left))
        else:
            rid = sorted(ref)[a % len(ref)]
            req = ref.pop(rid)[0]
            pool.remove(req)
            assert not req.in_pool
        for r, _ in ref.values():
            c = pool.computed(r)
            pool.materialize(r)
            assert r.num_computed_tokens == c == r.num_tokens - 1
            assert r.num_blocks == blocks_for(c, bs)
        assert pool.decode_ctx() == sum(pool.computed(r) + 1 for r, _ in ref.values())
    for r, _ in list(ref.values()):
        pool.remove(r)
    assert pool.num_drafts == drafts  # every member-step, counted when the member left
    assert pool.num_accepted_tokens == accepted
    assert pool.num_draft_tokens == k * drafts
    assert pool.accepted_per_pos.sum() == accepted


def test_steps_until_full_stops_before_a_shortage():
    acc = AcceptanceModel([1.0, 1.0], 0)  # 3 tokens per step
    pool = SpecDecodePool(4, acc)
    req = Request(0, 0, 4, 100)
    req.num_computed_tokens, req.num_output_tokens = 4, 1
    pool.join(req, 100)
    # computed 4, 7, 10, 13, 16, 19, 22 → blocks 1, 2, 3, 4, 4, 5, 6
    assert [pool.blocks_needed(i) for i in range(6)] == [1, 1, 1, 0, 1, 1]
    assert pool.steps_until_departure_or_full(2) == 4  # steps 1–3 need 1 + 1 + 0 blocks
    assert pool.steps_until_departure_or_full(0) == 1
    assert pool.steps_to_departure() == 33  # ⌈99 / 3⌉


def test_a_request_too_long_for_the_packed_levels_is_refused():
    pool = type("Pool", (SpecDecodePool,), {"max_tokens_blocks": 64})(16, AcceptanceModel([0.5], 0))
    req = Request(0, 0, 4, 10)
    req.num_computed_tokens, req.num_output_tokens = 4, 1
    with pytest.raises(ValueError, match="max_output_len"):
        pool.join(req, 10)  # 9 tokens left × 16 ≥ 64
    req.max_output_len = 4
    pool.join(req, 4)  # 3 × 16 < 64
    assert req.in_pool
