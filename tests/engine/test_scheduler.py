"""The vLLM-v1 / Sarathi mixed-batching scheduler: timelines derived by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import make_request, make_scheduler, request_set, simulate, unit_perf
from tidal.core.clock import VirtualClock
from tidal.engine.engine import Engine
from tidal.engine.executor import ModelledExecutor
from tidal.engine.plan import StepOutput

MS = 1_000_000
US = 1_000


def test_single_request_timeline_matches_hand_computation():
    # unit_perf: prefill step 1 ms + 1 µs/token; decode step 1 ms + 1 µs/request.
    rec, _, _ = simulate(request_set([0.0], [100], [5]), make_scheduler())
    ttft = 1 * MS + 100 * US
    assert rec.first_token_ns[0] == ttft
    assert rec.finish_ns[0] == ttft + 4 * (1 * MS + 1 * US)
    assert rec.output_tokens[0] == 5


def test_long_prompt_is_chunked_within_the_token_budget():
    s = make_scheduler(token_budget=128)
    s.add_request(make_request(0, 300, 2))
    chunks = []
    for t in range(3):
        plan = s.schedule(t)
        chunks.append([n for _, n in plan.prefills])
        s.update(plan, StepOutput(1), t + 1)
    assert chunks == [[128], [128], [44]]
    req = next(iter(s.running.values()))
    assert req.num_output_tokens == 1
    assert req.first_token_ns == 3


def test_decodes_go_first_and_new_prompts_take_the_rest_of_the_budget():
    s = make_scheduler(token_budget=100)
    s.add_request(make_request(0, 50, 10))
    s.update(s.schedule(0), StepOutput(1), 1)  # request 0 prefilled, now decoding
    s.add_request(make_request(1, 500, 10))
    plan = s.schedule(1)
    assert plan.num_decodes == 1
    assert [(r.request_id, n) for r, n in plan.prefills] == [(1, 99)]


def test_max_seqs_caps_the_running_set():
    s = make_scheduler(max_seqs=2, token_budget=1000)
    for i in range(4):
        s.add_request(make_request(i, 10, 5))
    plan = s.schedule(0)
    assert len(plan.prefills) == 2
    assert s.num_running == 2
    assert s.num_waiting == 2


def test_kv_exhaustion_preempts_the_newest_request_and_it_recomputes():
    # 6 blocks of 4 tokens. Two requests of prompt 8 (2 blocks each) growing to 8 + 7 tokens.
    s = make_scheduler(num_blocks=6, block_size=4, token_budget=64)
    for i in range(2):
        s.add_request(make_request(i, 8, 8))
    clock = VirtualClock()
    eng = Engine(s, ModelledExecutor(unit_perf()), clock)
    preempted_ids = []
    while s.has_work():
        plan = eng.step()
        assert plan is not None
        preempted_ids += [r.request_id for r in plan.preempted]
        s.check()
    assert preempted_ids
    assert set(preempted_ids) == {1}
    assert s.num_preemptions == len(preempted_ids)
    assert s.kv.num_free_blocks == 6


def test_finished_requests_release_every_block_and_keep_their_token_counts():
    rng = np.random.default_rng(1)
    n = 50
    rs = request_set(
        np.sort(rng.uniform(0, 0.05, n)), rng.integers(1, 200, n), rng.integers(1, 60, n)
    )
    s = make_scheduler(num_blocks=80, block_size=8, token_budget=256, max_seqs=16)
    rec, _, _ = simulate(rs, s)
    assert (rec.finish_ns >= 0).all()
    np.testing.assert_array_equal(rec.output_tokens, rs.output_len)
    assert s.kv.num_free_blocks == s.kv.num_blocks
    assert (rec.first_token_ns >= rec.arrival_ns).all()
    assert (rec.finish_ns >= rec.first_token_ns).all()


def test_scheduler_config_refuses_budget_below_max_seqs():
    from tidal.engine.scheduler import SchedulerConfig

    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        SchedulerConfig(max_num_batched_tokens=8, max_num_seqs=16)


def test_closed_loop_keeps_concurrency_requests_in_flight():
    rs = request_set([0.0] * 6, [10] * 6, [3] * 6)
    rec, _, _ = simulate(rs, make_scheduler(), concurrency=2)
    # Requests 2 and 3 are sent when 0 and 1 finish, and so on.
    assert rec.arrival_ns[2] == rec.finish_ns[0]
    assert rec.arrival_ns[3] == rec.finish_ns[1]
    assert rec.arrival_ns[4] == rec.finish_ns[2]
    in_flight_at = lambda t: int(((rec.arrival_ns <= t) & (rec.finish_ns > t)).sum())  # noqa: E731
    assert max(in_flight_at(t) for t in rec.arrival_ns) == 2
