"""Stop rules are the scheduler's: ``update(plan, output, now)`` ends a request whose
:class:`StopRule` matches a sampled token (before its length limit), every ending is an event
the batching policy hears, and each rule sees every token of its request exactly once.

The executor here stands in for a model runner: it samples, for each request that computes its
last token, the token ``script[request][k]`` (k = outputs so far), from the plan alone."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.batching.eb_helpers import make_eb
from tests.conftest import make_scheduler
from tidal.core.clock import VirtualClock
from tidal.core.request import Request, RequestState, StopRule
from tidal.engine.engine import Engine
from tidal.engine.events import StateListener
from tidal.engine.plan import StepOutput, StepPlan

STOP = 7


class ScriptedExecutor:
    """Samples scripted tokens; appends them to ``token_ids`` as the runtime's runner does."""

    fast_forward = False

    def __init__(self, script: dict[int, list[int]]) -> None:
        self.script = script

    def execute(self, plan: StepPlan, now_ns: int, idle_ns: int = -1, *_: object) -> StepOutput:
        samplers = [r for r, n in plan.prefills if r.num_computed_tokens + n >= r.num_tokens]
        if plan.num_decodes:
            assert plan.decodes is not None
            samplers += list(plan.decodes.members.values())
        sampled = []
        for req in samplers:
            assert req.token_ids is not None
            tok = self.script[req.request_id][len(req.token_ids) - req.prompt_len]
            req.token_ids.append(tok)
            sampled.append((req, tok))
        return StepOutput(1000, sampled)


class Heard(StateListener):
    def __init__(self) -> None:
        self.finished: list[tuple[int, RequestState]] = []
        self.aborted: list[int] = []

    def on_finished(self, req: Request, now_ns: int) -> None:
        self.finished.append((req.request_id, req.state))

    def on_aborted(self, req: Request, now_ns: int) -> None:
        self.aborted.append(req.request_id)


class Counting:
    """A stop check that counts the tokens it saw (stop strings accumulate text)."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def __call__(self, token: int) -> bool:
        self.seen.append(token)
        return token == STOP + 1


def _run(sched, reqs, script):
    heard = Heard()
    sched.state.add_listener(heard)
    eng = Engine(sched, ScriptedExecutor(script), VirtualClock())
    for r in reqs:
        sched.add_request(r)
    steps = 0
    while sched.has_work():
        eng.step()
        sched.check()
        steps += 1
        assert steps < 10_000
    return heard


@given(
    outs=st.lists(
        st.tuples(st.integers(1, 30), st.lists(st.integers(0, 9), min_size=30, max_size=30)),
        min_size=1,
        max_size=12,
    ),
    batching=st.sampled_from(["mb", "eb", "ebplus"]),
    block_size=st.sampled_from([1, 4, 16]),
)
def test_every_request_ends_at_its_first_stop_or_its_length_and_is_heard(
    outs, batching, block_size
):
    sched = (
        make_scheduler(block_size=block_size, token_budget=64, max_seqs=4)
        if batching == "mb"
        else make_eb(block_size=block_size, token_budget=64, max_seqs=4, batching=batching)
    )
    script = {i: toks for i, (_, toks) in enumerate(outs)}
    checks = [Counting() for _ in outs]
    reqs = [
        Request(i, 0, 5 + i, n, token_ids=[1] * (5 + i), stop=StopRule(frozenset({STOP}), c))
        for i, ((n, _), c) in enumerate(zip(outs, checks, strict=True))
    ]
    heard = _run(sched, reqs, script)
    assert sorted(rid for rid, _ in heard.finished) == list(range(len(reqs)))
    assert not heard.aborted
    for req, (n, toks), check in zip(reqs, outs, checks, strict=True):
        hits = [k for k, t in enumerate(toks[:n]) if t in (STOP, STOP + 1)]
        expect = hits[0] + 1 if hits else n
        assert req.num_output_tokens == expect
        assert req.token_ids[req.prompt_len :] == toks[:expect]
        assert req.finish_reason == ("stop" if hits else "length")
        # the check saw every token once, in order, except those the stop ids caught first
        assert check.seen == [t for t in toks[:expect] if t != STOP]
    assert sched.kv.num_free_blocks == sched.kv.num_blocks


def test_a_stop_on_the_last_allowed_token_is_a_stop_and_eb_learns_the_output_length():
    sched = make_eb(token_budget=64, max_seqs=4)
    learned = []
    ctl = sched.policy.ctl
    observe = ctl.observe
    ctl.observe = lambda p, o, t: (learned.append((p, o)), observe(p, o, t))
    reqs = [
        Request(0, 0, 4, 3, token_ids=[1] * 4, stop=StopRule(frozenset({STOP}))),
        Request(1, 0, 4, 9, token_ids=[1] * 4, stop=StopRule(frozenset({STOP}))),
        Request(2, 0, 4, 1, token_ids=[1] * 4, stop=StopRule(frozenset({STOP}))),
    ]
    script = {0: [1, 2, STOP], 1: [3, STOP, 5, 6], 2: [STOP]}
    heard = _run(sched, reqs, script)
    assert dict(heard.finished) == {
        0: RequestState.STOPPED,  # the stop wins over the length limit
        1: RequestState.STOPPED,
        2: RequestState.STOPPED,  # its first token, sampled by the prefill, stops it
    }
    assert sorted(learned) == [(4, 1), (4, 2), (4, 3)]


def test_an_abort_is_an_event_and_frees_the_request():
    sched = make_scheduler(token_budget=64, max_seqs=1)
    heard = Heard()
    sched.state.add_listener(heard)
    running, queued = Request(0, 0, 8, 50), Request(1, 0, 8, 50)
    sched.add_request(running)
    sched.add_request(queued)
    plan = sched.schedule(0)
    sched.update(plan, StepOutput(1), 1)
    sched.abort(queued, 2)
    sched.abort(running, 3)
    assert heard.aborted == [1, 0]
    assert (running.finish_reason, running.finish_ns) == ("abort", 3)
    assert not sched.has_work()
    assert sched.kv.num_free_blocks == sched.kv.num_blocks
