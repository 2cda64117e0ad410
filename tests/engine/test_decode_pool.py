"""The decode pool's O(1) range sum of new KV blocks against the per-offset definition."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidal.core.request import Request
from tidal.engine.decode_pool import DecodePool


@given(
    block_size=st.sampled_from([1, 2, 3, 16, 256]),
    members=st.lists(st.tuples(st.integers(1, 3000), st.integers(1, 500)), max_size=40),
    advance=st.lists(st.integers(0, 700), min_size=1, max_size=4),
    ranges=st.lists(st.tuples(st.integers(0, 900), st.integers(0, 900)), min_size=1, max_size=6),
)
def test_blocks_needed_range_is_the_sum_over_offsets(block_size, members, advance, ranges):
    pool = DecodePool(block_size)
    for rid, (prompt, out) in enumerate(members):
        req = Request(rid, 0, prompt, out + 1)
        req.num_computed_tokens = prompt + pool.steps % 7  # varied residues
        req.num_output_tokens = 1 + pool.steps % 7
        pool.join(req, out + 1 + pool.steps % 7)
    for a in advance:
        for start, stop in ranges:
            want = sum(pool.blocks_needed(i) for i in range(start, stop))
            assert pool.blocks_needed_range(start, stop) == want
        pool.advance(min(a, pool.steps_to_departure()))


@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["join", "remove", "advance"]), st.integers(1, 400)),
        max_size=40,
    )
)
def test_max_age_is_the_oldest_members_age_through_joins_removals_and_steps(ops):
    pool = DecodePool(16)
    rid = 0
    for op, x in ops:
        if op == "join":
            req = Request(rid, 0, x, 1000)
            req.num_computed_tokens = x + rid % 5  # resumed requests join older
            req.num_output_tokens = 1 + rid % 5
            pool.join(req, 1000)
            rid += 1
        elif op == "remove" and len(pool):
            pool.remove(list(pool.members.values())[x % len(pool)])
        elif op == "advance" and len(pool):
            pool.advance(min(x, pool.steps_to_departure()))
        _, ages = pool.tokens_and_ages()
        assert pool.max_age() == (int(ages.max()) if len(ages) else -1)
