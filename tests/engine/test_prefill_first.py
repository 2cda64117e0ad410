"""Prefill-first batching (SGLang's default): exclusive steps, prefill whenever possible."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import make_scheduler, request_set, simulate
from tidal.engine.prefill_first import PrefillFirst

MS, US = 1_000_000, 1_000


def test_a_later_prompt_stalls_the_running_decode_for_its_prefill_step() -> None:
    """unit_perf: 1 ms per step + 1 µs per prefill token or decode request. Request 0 (10
    tokens, 4 outputs) arrives at 0; request 1 (100 tokens) at 1.5 ms, while 0 decodes.

    prefill-first: [0, 1.010] prefill 0 (first token), [1.010, 2.011] decode 0 (1.5 ms has
    not yet passed at its start), [2.011, 3.111] prefill 1 alone (1 ms + 100 µs; 0 waits),
    [3.111, 4.113] decode both (2 requests), [4.113, 5.115] decode both: 0 has its 4 tokens.
    Mixed batching would have decoded 0 inside the step that prefilled 1."""
    reqs = request_set([0.0, 0.0015], [10, 100], [4, 3])
    rec, _, _ = simulate(reqs, make_scheduler(batching="prefill-first"))
    assert rec.first_token_ns[0] == 1 * MS + 10 * US
    assert rec.first_token_ns[1] == 3 * MS + 111 * US
    assert rec.finish_ns[0] == 5 * MS + 115 * US
    mixed, _, _ = simulate(reqs, make_scheduler(batching="mb"))
    assert mixed.finish_ns[0] < rec.finish_ns[0]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 0.05), st.integers(1, 120), st.integers(1, 40)),
             min_size=1, max_size=14),
    st.integers(40, 120),
    st.integers(2, 8),
)  # fmt: skip
def test_fast_forward_is_exact_and_no_step_mixes(reqs, blocks, max_seqs) -> None:
    arrivals = sorted(r[0] for r in reqs)
    rs = request_set(arrivals, [r[1] for r in reqs], [r[2] for r in reqs])
    runs = []
    for ff in (True, False):
        sched = make_scheduler(num_blocks=blocks, block_size=4, token_budget=64,
                               max_seqs=max_seqs, batching="prefill-first")  # fmt: skip
        assert isinstance(sched.policy, PrefillFirst)
        original = sched.schedule

        def checked(now_ns: int, original=original):  # type: ignore[no-untyped-def]
            plan = original(now_ns)
            assert not (plan.prefills and plan.num_decodes), "a step mixed prefill and decode"
            return plan

        sched.schedule = checked  # type: ignore[method-assign]
        rec, _, _ = simulate(rs, sched, fast_forward=ff)
        runs.append((rec.first_token_ns.copy(), rec.finish_ns.copy()))
    assert np.array_equal(runs[0][0], runs[1][0])
    assert np.array_equal(runs[0][1], runs[1][1])
    assert (runs[0][1] >= 0).all()
