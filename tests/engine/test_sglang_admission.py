"""SGLang's admission by KV reservation (batching ``sglang``): ``PrefillAdder.add_one_req``'s
test (a prompt's tokens + ``min(max_new − output, 4096)`` below the free KV tokens less
``new_token_ratio`` × the decoding requests' remaining output and the step's own prompts'
``max_new``), ``batch_is_full``, the ratio's decay and its reset on retraction, worked by
hand; KV never over-committed and fast-forward exact under hypothesis."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.conftest import request_set, simulate
from tidal.core.errors import ConfigError
from tidal.core.kv import KVBlockManager
from tidal.core.request import Request
from tidal.engine.build import build_scheduler
from tidal.engine.plan import StepOutput, StepPlan
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.engine.sglang_batching import SGLangBatching, SGLangOptions
from tidal.sim.config import load_config

BS = 4  # tokens per KV block in these tests


def sched(blocks: int, cons: float = 1.0, mixed: bool = False, budget: int = 256) -> Scheduler:
    opts = SGLangOptions(enable_mixed_chunk=mixed, schedule_conservativeness=cons)
    kv = KVBlockManager(blocks, BS, 0.0)
    return build_scheduler(SchedulerConfig(budget, 16, options=opts), kv, "sglang")


def policy(s: Scheduler) -> SGLangBatching:
    assert isinstance(s.policy, SGLangBatching)
    return s.policy


def step(s: Scheduler, now: int) -> StepPlan:
    """Schedule at ``now`` and commit the step (1 µs long)."""
    plan = s.schedule(now)
    s.update(plan, StepOutput(duration_ns=1000), now + 1000)
    return plan


def ids(plan: StepPlan) -> list[int]:
    return [r.request_id for r, _ in plan.prefills]


def _one_decoding(cons: float = 1.0) -> Scheduler:
    """100 blocks (400 tokens); request 0 (prompt 40, output 100) prefilled alone: it holds 10
    blocks, has sampled 1 token and decodes next."""
    s = sched(100, cons)
    s.add_request(Request(0, 0, 40, 100))
    assert ids(step(s, 0)) == [0]
    return s


def test_a_new_prompt_passes_below_the_free_tokens_less_the_reservation() -> None:
    """Free 90 blocks = 360 tokens; request 0 reserves 0.7 × (100 − 1) = 69.3: 290.7 left.
    Request 1 (100 + 100 = 200 < 290.7) is admitted; its 25 blocks leave 260 tokens and it
    reserves its whole 100: 260 − 69.3 − 100 = 90.7. Request 2 (40 + 60 = 100) is refused,
    which sets batch_is_full."""
    s = _one_decoding()
    for rid, (p, o) in enumerate([(100, 100), (40, 60)], start=1):
        s.add_request(Request(rid, 1000, p, o))
    plan = step(s, 1000)
    assert ids(plan) == [1]
    assert policy(s).batch_is_full


def test_schedule_conservativeness_scales_the_reservation() -> None:
    """Conservativeness 0.5: ratio 0.35, request 0 reserves 34.65, so request 2 meets
    260 − 34.65 − 100 = 125.35 > 100 and joins the step."""
    s = _one_decoding(cons=0.5)
    for rid, (p, o) in enumerate([(100, 100), (40, 60)], start=1):
        s.add_request(Request(rid, 1000, p, o))
    assert ids(step(s, 1000)) == [1, 2]
    assert not policy(s).batch_is_full


def test_a_refusal_holds_admission_until_a_request_leaves() -> None:
    """Request 1 (100 + 3) is admitted; request 2 (200 + 60 = 260 ≥ 260 − 69.3 − 3) is
    refused. No admission is tried after that — not for a 1-token prompt that would fit —
    while the decodes run (the ratio falls meanwhile); the step after request 1 finishes
    admits request 2 (≈ 356 free − 0.7 · 97 ≈ 288 > 260) and the small one behind it."""
    s = _one_decoding()
    for rid, (p, o) in enumerate([(100, 3), (200, 60)], start=1):
        s.add_request(Request(rid, 1000, p, o))
    assert ids(step(s, 1000)) == [1]
    assert policy(s).batch_is_full
    s.add_request(Request(3, 2000, 1, 1))
    now = 2000
    for _ in range(2):  # request 1 samples tokens 2 and 3 in these decodes, then finishes
        plan = step(s, now)
        assert not plan.prefills
        assert plan.num_decodes == 2
        now += 1000
    assert not policy(s).batch_is_full
    assert ids(step(s, now)) == [2, 3]


def test_the_ratio_decays_per_pure_decode_step_to_its_floor() -> None:
    """0.7 at start, − (0.7 − 0.098) / 600 per decode step (a prefill step does not count),
    never below 0.14 × 0.7 = 0.098."""
    s = _one_decoding()
    p = policy(s)
    assert p.new_token_ratio == pytest.approx(0.7)
    step(s, 1000)
    step(s, 2000)
    assert p.new_token_ratio == pytest.approx(0.7 - 2 * (0.7 - 0.098) / 600)
    s.add_request(Request(1, 3000, 10, 5))
    assert ids(step(s, 3000)) == [1]
    assert p.new_token_ratio == pytest.approx(0.7 - 2 * (0.7 - 0.098) / 600)
    p.new_token_ratio = 0.0985
    step(s, 4000)
    assert p.new_token_ratio == pytest.approx(0.098)


def test_a_request_reserves_at_most_4096_output_tokens() -> None:
    """Request 0 (output 5,000) and request 1 (output 20) decode: after the prefill step
    (output 1 each) they reserve min(4,999, 4,096) + 19; after k more decode steps
    min(4,999 − k, 4,096) + max(19 − k, 0) (request 1 leaves after 19)."""
    s = sched(3000)
    s.add_request(Request(0, 0, 10, 5000))
    s.add_request(Request(1, 0, 10, 20))
    plan = step(s, 0)
    p = policy(s)
    assert p.reserved_by_running(plan) == (4096 + 19) * p.new_token_ratio
    now = 1000
    for k in range(1, 1001):
        plan = step(s, now)
        now += 1000
        want = min(4999 - k, 4096) + max(19 - k, 0)
        assert p.reserved_by_running(plan) == want * p.new_token_ratio, k


def test_a_retraction_resets_the_ratio_from_the_requests_left() -> None:
    """40 blocks (160 tokens), conservativeness 0.3 (ratio 0.21). Request 0 (20 + 200)
    prefilled, then request 1 (28 + 60 = 88 < 35·4 − 0.21·199 = 98.2) admitted; a decode step
    runs out of blocks (at about 56 decodes) and retracts request 1 (the newest). The ratio
    becomes (output of request 0 + 20) / (200 + 1) — SGLang's re-estimate over the one
    request left, here ≈ 0.38."""
    s = sched(40, cons=0.3)
    s.add_request(Request(0, 0, 20, 200))
    step(s, 0)
    s.add_request(Request(1, 1000, 28, 60))
    assert ids(step(s, 1000)) == [1]
    now = 2000
    while True:
        plan = step(s, now)
        now += 1000
        if plan.preempted:
            break
    assert [r.request_id for r in plan.preempted] == [1]
    req0 = s.state.running[0]
    s.state.pool.materialize(req0)
    # the step's token is sampled after the re-estimate: output before it
    out = req0.num_output_tokens - 1
    assert 40 < out < 70
    assert policy(s).new_token_ratio == pytest.approx((out + 20) / 201)


def test_engine_sglang_selects_its_admission_and_dp_attention_scales_it() -> None:
    """``engine: sglang`` runs batching ``sglang``; ``--schedule-conservativeness`` is its
    option, × 0.3 with data-parallel attention (``_handle_data_parallelism``); refused for
    vLLM, naming the flag."""
    wl = {"num_requests": 4, "prompt_len": 100, "output_len": 10, "concurrency": 2}
    base = {"engine": "sglang", "model": "qwen3-8b", "gpu": "h200", "workload": wl}
    cfg = load_config({**base, "scheduler": {"schedule_conservativeness": 2.0}})
    assert cfg.scheduler.batching == "sglang"
    assert cfg.scheduler.options == {"schedule_conservativeness": 2.0}
    dp = load_config({**base, "tp": 1, "data_parallel_size": 2})
    assert dp.scheduler.options == {"schedule_conservativeness": pytest.approx(0.3)}
    again = load_config(dp.model_dump(mode="json"))  # the recorded config reruns as it ran
    assert again.scheduler.options == dp.scheduler.options
    with pytest.raises(ConfigError, match="--schedule-conservativeness"):
        load_config({"workload": wl, "scheduler": {"schedule_conservativeness": 2.0}})


def _reservation_holds(s: Scheduler, plan: StepPlan, ran_before: bool, ratio: float) -> int:
    """A step that admitted a prompt while others ran holds at most the pool: the KV it
    allocated + ratio × the decoding requests' remaining output + each completed prompt's
    output, with one block of rounding per admitted prompt."""
    pool, kv = s.state.pool, s.state.kv
    decoding = 0
    for r in pool.members.values():
        decoding += min(r.max_output_len - (pool.computed(r) + 1 - r.prompt_len), 4096)
    # the policy's incremental sum is this sum
    assert policy(s).reserved_by_running(plan) == decoding * policy(s).new_token_ratio
    new = [r for r, _ in plan.prefills if r.num_computed_tokens == 0 and r.num_preemptions == 0]
    if not new or not ran_before:
        return 0
    held = (kv.num_blocks - kv.num_free_blocks) * BS
    own = sum(
        min(r.max_output_len, 4096)
        for r, n in plan.prefills
        if r.num_computed_tokens + n >= r.num_tokens
    )
    mixed = plan.num_decodes
    assert held + ratio * decoding + own + mixed <= kv.num_blocks * BS + BS * len(new)
    return len(new)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(1, 60), st.integers(1, 60)),
             min_size=1, max_size=12),  # outputs under the 4,096 clip: see the test below
    st.integers(40, 90),
    st.booleans(),
    st.sampled_from([0.3, 1.0, 1.5]),
)  # fmt: skip
def test_kv_never_over_committed(reqs, blocks, mixed, cons) -> None:
    """Requests arriving over time: every admission keeps the reservation within the pool,
    the block manager's invariants hold every step, and every request finishes."""
    s = sched(blocks, cons, mixed, budget=64)
    pending = sorted(((t * 1000, i, p, o) for i, (t, p, o) in enumerate(reqs)))
    now = admitted = 0
    for _ in range(20000):
        while pending and pending[0][0] <= now:
            t, i, p, o = pending.pop(0)
            s.add_request(Request(i, t, p, o))
        if not s.state.has_work():
            if not pending:
                break
            now = pending[0][0]
            continue
        ran_before, ratio = bool(s.state.running), policy(s).new_token_ratio
        plan = s.schedule(now)
        admitted += _reservation_holds(s, plan, ran_before, ratio)
        s.update(plan, StepOutput(duration_ns=1000), now + 1000)
        s.check()
        now += 1000
    assert not pending  # every request finished
    assert not s.state.has_work()
    event(f"admitted beside running requests: {min(admitted, 1)}")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 0.05), st.integers(1, 120), st.integers(1, 80)),
             min_size=1, max_size=14),
    st.integers(50, 120),  # ≥ 200 tokens: the longest request fits an empty instance
    st.booleans(),
    st.sampled_from([0.5, 1.0]),
)  # fmt: skip
def test_fast_forward_is_exact_with_the_reservation(reqs, blocks, mixed, cons) -> None:
    arrivals = sorted(r[0] for r in reqs)
    rs = request_set(arrivals, [r[1] for r in reqs], [r[2] for r in reqs])
    runs = []
    for ff in (True, False):
        s = sched(blocks, cons, mixed, budget=64)
        rec, _, _ = simulate(rs, s, fast_forward=ff)
        runs.append((rec.first_token_ns.copy(), rec.finish_ns.copy(), policy(s).new_token_ratio))
    assert np.array_equal(runs[0][0], runs[1][0])
    assert np.array_equal(runs[0][1], runs[1][1])
    assert runs[0][2] == runs[1][2]
    assert (runs[0][1] >= 0).all()
