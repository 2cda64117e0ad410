"""One step loop for both backends (docs/DESIGN.md §1): the simulator's event-driven path
(``Engine.start`` / ``Engine.on_step_end``) and the synchronous ``Engine.step`` the runtime calls
are the same loop, and the cost-model executor's step rule (compute + idle penalty + stall) is
the one both see."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import make_request, make_scheduler, request_set, simulate, unit_perf
from tidal.core.clock import VirtualClock
from tidal.engine.engine import Engine
from tidal.engine.executor import ModelledExecutor
from tidal.engine.plan import StepPlan
from tidal.hardware.perf import LinearPerfModel

MS = 1_000_000
US = 1_000


class _IdlePenalty(LinearPerfModel):
    """``unit_perf`` plus a 5 µs penalty per ms the engine sat idle."""

    def __init__(self) -> None:
        super().__init__(1e-3, 1e-6, 1e-3, 1e-6, kappa=0.0)

    def idle_penalty_ns(self, idle_ns: int) -> int:
        return 5 * (idle_ns // MS) * US


def _batch(prompts, outputs, fast_forward: bool):
    # 60 blocks of 4 tokens: a dozen requests of up to 100 tokens preempt one another
    s = make_scheduler(num_blocks=60, block_size=4, token_budget=64, max_seqs=8)
    reqs = [make_request(i, p, o) for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))]
    for r in reqs:
        s.add_request(r)
    return reqs, Engine(s, ModelledExecutor(unit_perf(), fast_forward), VirtualClock())


def _times(reqs):
    return [(r.first_token_ns, r.finish_ns, r.num_preemptions) for r in reqs]


def _synchronous(prompts, outputs, fast_forward: bool):
    """A batch present at t = 0 through ``Engine.step`` on a virtual clock (the runtime's
    driver)."""
    reqs, eng = _batch(prompts, outputs, fast_forward)
    plans = 0
    while eng.scheduler.has_work():
        assert eng.step() is not None
        plans += 1
    return _times(reqs), plans, eng


def _event_driven(prompts, outputs, fast_forward: bool):
    """The same batch through ``Engine.start`` and ``Engine.on_step_end`` (the simulator's
    driver: each step's end is an event)."""
    reqs, eng = _batch(prompts, outputs, fast_forward)
    end = eng.start(0)
    while end is not None:
        end = eng.on_step_end(end)
    assert not eng.scheduler.has_work()
    return _times(reqs)


@given(
    prompts=st.lists(st.integers(1, 60), min_size=1, max_size=12),
    data=st.data(),
)
def test_synchronous_loop_equals_the_simulators_event_loop(prompts, data):
    outputs = data.draw(st.lists(st.integers(1, 40), min_size=len(prompts), max_size=len(prompts)))
    stepped, n_stepped, _ = _synchronous(prompts, outputs, fast_forward=False)
    jumped, n_jumped, _ = _synchronous(prompts, outputs, fast_forward=True)
    assert jumped == stepped  # fast-forward through Engine.step is exact
    assert n_jumped <= n_stepped
    assert _event_driven(prompts, outputs, True) == stepped
    assert _event_driven(prompts, outputs, False) == stepped
    if len(prompts) == 1:  # one request: the full simulation takes the same steps
        rec, _, _ = simulate(
            request_set([0.0], prompts, outputs),
            make_scheduler(num_blocks=60, block_size=4, token_budget=64, max_seqs=8),
        )
        assert (rec.first_token_ns[0], rec.finish_ns[0]) == stepped[0][:2]


def test_the_generated_batches_preempt():
    times, _, eng = _synchronous([60] * 12, [40] * 12, fast_forward=True)
    assert eng.scheduler.num_preemptions > 0
    assert times == _event_driven([60] * 12, [40] * 12, False)


def test_fast_forward_commits_a_run_in_one_step_of_the_loop():
    # one request, prompt 10, 6 outputs: a prefill step, then 5 identical decode steps
    times, plans, eng = _synchronous([10], [6], fast_forward=True)
    assert plans == 2
    assert times[0][1] == (1 * MS + 10 * US) + 5 * (1 * MS + 1 * US)
    assert eng.busy_ns == times[0][1]
    assert eng.executor.itl.total_weight == 5  # the run's five decode steps, one token each


def test_step_rule_compute_plus_stall_and_a_stall_alone():
    ex = ModelledExecutor(unit_perf())
    stall = StepPlan(stall_ns=7 * US)
    assert ex.execute(stall, 0, -1).duration_ns == 7 * US
    assert ex.execute(stall, 0, 10 * MS).duration_ns == 7 * US  # no compute, no idle penalty
    mixed = StepPlan(num_decodes=3, decode_ctx=30, stall_ns=7 * US)
    assert ex.execute(mixed, 0, -1).duration_ns == 1 * MS + 3 * US + 7 * US


def test_idle_penalty_on_the_first_step_after_idle_and_not_fast_forwarded():
    perf = _IdlePenalty()
    rec, _, inst = simulate(request_set([0.0, 0.010], [10, 10], [4, 4]), make_scheduler(), perf)
    step = 1 * MS + 1 * US
    first = 1 * MS + 10 * US
    # request 0: no idle time before t = 0 (penalty of 0 ms idle = 0)
    assert rec.first_token_ns[0] == first
    assert rec.finish_ns[0] == first + 3 * step
    idle_ms = (10 * MS - rec.finish_ns[0]) // MS
    # request 1 arrives at 10 ms to an idle engine: its prefill carries the penalty
    assert rec.first_token_ns[1] == 10 * MS + first + 5 * idle_ms * US
    assert rec.finish_ns[1] == rec.first_token_ns[1] + 3 * step
    assert inst.engine.busy_ns == (rec.finish_ns[0]) + (rec.finish_ns[1] - 10 * MS)


def test_the_engine_goes_idle_and_reports_it():
    s = make_scheduler()
    eng = Engine(s, ModelledExecutor(unit_perf()))
    seen = []
    eng.on_idle = seen.append
    assert eng.start(5) is None
    assert seen == [5]
    assert not eng.busy
    s.add_request(make_request(0, 10, 1))
    end = eng.start(7)
    assert end == 7 + 1 * MS + 10 * US
    assert eng.busy
    assert eng.on_step_end(end) is None  # finished: the next schedule is empty
    assert seen == [5, end]
    assert eng.idle_since == end
    assert eng.busy_ns == end - 7
