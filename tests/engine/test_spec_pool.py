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
    k=st.sampled_from([1, 2, 3, 4, 9]),  # 9: the counters' bincount path
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


@settings(max_examples=40, deadline=None)
@given(
    reqs=st.lists(st.tuples(st.integers(1, 300), st.integers(2, 600), st.integers(0, 3)),
                  min_size=1, max_size=40),
    k=st.integers(1, 4),
    alpha=st.floats(0.0, 1.0),
    bs=st.sampled_from([1, 3, 16]),
    base=st.sampled_from([0, 250]),
)  # fmt: skip
def test_announced_requests_give_the_same_pool(reqs, k, alpha, bs, base):
    """With the requests announced (:meth:`AcceptanceModel.expect`: rows drawn to each one's
    need, first joins' levels precomputed per block) the pool's levels, contexts, block needs
    and departures are those of the unannounced pool; announcements that are wrong (``miss``
    1: another length, 2: another prompt) or rows that fall short take the general path.
    ``base``: the first request id (250: the requests straddle two blocks)."""
    n = base + len(reqs)
    prompts = np.ones(n, dtype=np.int64)
    outs = np.full(n, 2, dtype=np.int64)
    for i, (p, o, _) in enumerate(reqs):
        prompts[base + i], outs[base + i] = p, o
    pools = []
    for announce in (False, True):
        acc = AcceptanceModel([alpha] * k, 23)
        if announce:
            said = outs.copy()
            said[base:] += [(m == 1) * 7 for _, _, m in reqs]
            acc.expect(prompts + [(m == 2) for m in [0] * base + [m for _, _, m in reqs]],
                       said - 1)  # fmt: skip
        pools.append(SpecDecodePool(bs, acc))
    gone: list[list[int]] = [[], []]
    for i, (p, o, m) in enumerate(reqs):
        for pool, out in zip(pools, gone, strict=True):
            req = Request(base + i, 0, p, o)
            req.num_computed_tokens, req.num_output_tokens = p, 1
            pool.join(req, o)
            if m == 3:
                out += [r.request_id for r in pool.advance(min(3, pool.steps_to_departure()))]
        plain, told = pools
        np.testing.assert_array_equal(plain._lev[plain.steps - plain._origin :][:400],
                                      told._lev[told.steps - told._origin :][:400])  # fmt: skip
        assert plain.decode_ctx() == told.decode_ctx()
        assert [plain.blocks_needed(j) for j in range(5)] == [
            told.blocks_needed(j) for j in range(5)
        ]
    assert gone[0] == gone[1]
    assert all(b.extra for b in pools[1].acceptance._blocks.values())  # precomputed levels
    assert not any(b.extra for b in pools[0].acceptance._blocks.values())
    while pools[0].members:
        steps = pools[0].steps_to_departure()
        np.testing.assert_array_equal(pools[0].ctx_run(0, steps), pools[1].ctx_run(0, steps))
        for pool, out in zip(pools, gone, strict=True):
            out += [r.request_id for r in pool.advance(steps)]
        assert gone[0] == gone[1]
    assert pools[0].spec_counters() == pools[1].spec_counters()


def test_a_request_past_the_announced_ones_takes_the_general_path():
    """Announced ids 0 … 9: request 300 (another block) and 5 (announced otherwise) join by
    the per-join path with the unannounced pool's levels."""
    pools = []
    for announce in (False, True):
        acc = AcceptanceModel([0.7, 0.5], 3)
        if announce:
            acc.expect(np.full(10, 40), np.full(10, 99))
        pools.append(SpecDecodePool(16, acc))
        for rid, out in ((300, 120), (5, 80), (6, 100)):
            req = Request(rid, 0, 40, out)
            req.num_computed_tokens, req.num_output_tokens = 40, 1
            pools[-1].join(req, out)
    plain, told = pools
    np.testing.assert_array_equal(plain._lev, told._lev)
    assert plain.steps_to_departure() == told.steps_to_departure()
