"""Scheduler invariants under random workloads and configurations (hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import make_request, make_scheduler, unit_perf
from tidal.core.clock import VirtualClock
from tidal.engine.engine import Engine
from tidal.engine.executor import ModelledExecutor


@given(
    lengths=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 120)), min_size=1, max_size=25),
    block_size=st.sampled_from([1, 4, 16]),
    spare_blocks=st.integers(0, 200),
    budget=st.integers(1, 600),
    max_seqs=st.integers(1, 20),
    late=st.integers(0, 25),
)
def test_invariants_hold_at_every_step(lengths, block_size, spare_blocks, budget, max_seqs, late):
    longest = max(p + o for p, o in lengths)
    blocks = -(-longest // block_size) + spare_blocks
    budget = max(budget, max_seqs)
    s = make_scheduler(blocks, block_size, budget, max_seqs)
    eng = Engine(s, ModelledExecutor(unit_perf()), VirtualClock())
    reqs = [make_request(i, p, o) for i, (p, o) in enumerate(lengths)]
    finished = []
    s.on_finish = finished.append
    for r in reqs[: len(reqs) - late % len(reqs)]:
        s.add_request(r)
    pending = reqs[len(reqs) - late % len(reqs) :]
    steps = 0
    while s.has_work() or pending:
        if pending and steps % 3 == 0:
            s.add_request(pending.pop(0))
        plan = eng.step()
        steps += 1
        assert steps < 100_000
        if plan is None:
            continue
        assert plan.num_tokens <= budget
        assert plan.num_decodes <= max_seqs
        # a request is never both preempted and scheduled in the same step
        assert not {r.request_id for r in plan.preempted} & {r.request_id for r, _ in plan.prefills}
        s.check()
    assert sorted(r.request_id for r in finished) == list(range(len(reqs)))
    assert all(r.num_output_tokens == r.max_output_len for r in reqs)
    assert s.kv.num_free_blocks == s.kv.num_blocks
    # FCFS without preemption: requests finish their prefill in arrival order per admission
    firsts = [r.first_scheduled_ns for r in reqs]
    if s.num_preemptions == 0 and late == 0:
        assert firsts == sorted(firsts)
