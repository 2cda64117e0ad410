"""N-gram (prompt lookup) speculative decoding in the real engine (issue 29, item 3).

The proposer is checked against vLLM's rule written out by brute force; the engine must produce,
token for token, the greedy output it produces without speculation — on prompts with repeats,
where drafts are accepted (asserted, so that the comparison cannot pass vacuously), with prefix
caching on and off, with staggered arrivals, and when a stop token, a stop check or max_tokens
falls inside an accepted run (the run is cut there and the tokens after it discarded)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.core.request import Request, RequestState, StopRule
from tidal.runtime.ngram import NgramProposer


# ---------------------------------------------------------------------------------- proposer
def test_the_longest_suffix_match_proposes_the_tokens_after_it():
    p = NgramProposer(k=3, min_n=2, max_n=3, max_model_len=1000)
    assert p.propose([1, 2, 3, 4, 1, 2, 3]) == [4, 1, 2]


def test_the_window_bounds_the_match():
    toks = [7, 2, 3, 5, 1, 2, 3, 6, 1, 2, 3]
    # [1, 2, 3] occurs at 4…6 (followed by 6); [2, 3] also at 1…2 (followed by 5)
    assert NgramProposer(3, 2, 3, 1000).propose(toks) == [6, 1, 2]
    # capped at 2 tokens both occurrences match equally long: vLLM takes the earliest
    assert NgramProposer(3, 2, 2, 1000).propose(toks) == [5, 1, 2]
    # a match shorter than prompt_lookup_min proposes nothing
    assert NgramProposer(3, 2, 5, 1000).propose([5, 6, 7, 5]) == []
    assert NgramProposer(3, 1, 5, 1000).propose([5, 6, 7, 5]) == [6, 7, 5]


def test_no_match_and_short_contexts_propose_nothing():
    p = NgramProposer(4, 1, 3, 1000)
    assert p.propose([1, 2, 3, 4, 5]) == []
    assert p.propose([9]) == []
    assert NgramProposer(4, 3, 3, 1000).propose([1, 1]) == []


def test_fewer_than_k_when_the_context_or_the_model_length_ends():
    assert NgramProposer(5, 2, 2, 1000).propose([1, 2, 3, 1, 2]) == [3, 1, 2]
    assert NgramProposer(5, 2, 2, 6).propose([1, 2, 3, 1, 2]) == [3]  # max_model_len 6
    assert NgramProposer(5, 2, 2, 5).propose([1, 2, 3, 1, 2]) == []


def _brute(toks: list[int], k: int, lo: int, hi: int, max_len: int) -> list[int]:
    """vLLM's rule: the longest suffix (lo…hi tokens) with an earlier occurrence ending before
    the last token; the earliest such occurrence; up to k tokens after it."""
    t = len(toks)
    k = min(k, max_len - t)
    if t < lo or k <= 0:
        return []
    for n in range(min(hi, t - 1), lo - 1, -1):
        suffix = toks[t - n :]
        for i in range(0, t - n):
            if toks[i : i + n] == suffix:
                return toks[i + n : i + n + k]
    return []


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=0, max_size=40),
    st.integers(1, 5),
    st.integers(1, 4),
    st.integers(0, 3),
    st.integers(0, 50),
)
def test_the_proposer_is_vllms_rule(toks, k, lo, extra, max_len):
    hi = lo + extra
    assert NgramProposer(k, lo, hi, max_len).propose(toks) == _brute(toks, k, lo, hi, max_len)


# ---------------------------------------------------------------------------------- engine
PROMPTS = (
    "the tide, the tide, the tide comes in; the tide",
    "abcabcabcabcabc",
    "hello world, hello world, hello",
    "no repeats here",
)


def _spec(**kw):
    from tidal.engine.spec_config import SpeculativeConfig

    kw.setdefault("num_speculative_tokens", 4)
    kw.setdefault("prompt_lookup_min", 1)
    kw.setdefault("prompt_lookup_max", 3)
    return SpeculativeConfig(method="ngram", **kw)


def _prompts() -> list[list[int]]:
    from tidal.runtime.tokenizer import ByteTokenizer

    return [ByteTokenizer(512).encode(p) for p in PROMPTS]


def _generate(rt, prompt_ids, max_tokens, stops=None, arrive=None):
    """Greedy generation with per-request stop rules; returns outputs, requests and, per step,
    the tokens each request sampled before the scheduler's update (the verified runs)."""
    n = len(prompt_ids)
    reqs = [Request(i, 0, len(p), max_tokens, token_ids=list(p)) for i, p in enumerate(prompt_ids)]
    for i, rule in (stops or {}).items():
        reqs[i].stop = rule
    executor = rt.engine.executor
    real = executor.execute
    runs: list[dict[int, list[int]]] = []

    def execute(plan, *a, **kw):
        out = real(plan, *a, **kw)
        got: dict[int, list[int]] = {}
        for r, t in out.sampled:
            got.setdefault(r.request_id, []).append(t)
        runs.append(got)
        return out

    executor.execute = execute
    arrive = arrive or [0] * n
    pending, step = sorted(range(n), key=lambda i: arrive[i]), 0
    sched = rt.scheduler
    while pending or sched.has_work():
        while pending and arrive[pending[0]] <= step:
            sched.add_request(reqs[pending.pop(0)])
        rt.engine.step()
        sched.check()
        step += 1
    assert sched.kv.num_free_blocks == sched.kv.num_blocks
    return [r.token_ids[r.prompt_len :] for r in reqs], reqs, runs


def _inside_runs(runs, rid) -> list[int]:
    """Output indices that a verification step sampled after the run's first token and before
    its last (a stop there cuts the run and discards tokens)."""
    idx, inside = 0, []
    for got in runs:
        toks = got.get(rid, [])
        inside.extend(idx + j for j in range(1, len(toks) - 1))
        idx += len(toks)
    return inside


@pytest.fixture
def engine():
    pytest.importorskip("torch")
    from tests.runtime.helpers import tiny_engine

    return tiny_engine


@pytest.mark.engine
@pytest.mark.parametrize("prefix_caching", [True, False])
def test_greedy_output_is_identical_with_and_without_speculation(engine, prefix_caching):
    ps = _prompts()
    kw = {"prefix_caching": prefix_caching, "token_budget": 32, "max_seqs": 8}
    ref, _, ref_runs = _generate(engine(**kw), ps, 40, arrive=[0, 0, 2, 5])
    rt = engine(speculative_config=_spec(), **kw)
    out, reqs, runs = _generate(rt, ps, 40, arrive=[0, 0, 2, 5])
    assert out == ref
    assert all(len(o) == 40 for o in out)
    assert all(r.state == RequestState.FINISHED for r in reqs)
    stats = rt.runner.spec_stats
    assert stats.num_accepted_tokens > 0  # not vacuous: drafts were accepted
    assert stats.num_accepted_tokens <= stats.num_draft_tokens
    assert sum(stats.accepted_per_pos) == stats.num_accepted_tokens
    assert len(runs) < len(ref_runs)  # fewer steps: several tokens per verification
    assert max(len(t) for got in runs for t in got.values()) > 1


@pytest.mark.engine
def test_a_tight_kv_cache_and_budget_cut_drafts_not_correctness(engine):
    """Few free blocks (lookahead cut to them, preemptions) and a budget that drafts exhaust."""
    ps = _prompts()
    kw = {"num_kv_blocks": 40, "token_budget": 12, "max_seqs": 4}
    ref, _, _ = _generate(engine(**kw), ps, 40)
    rt = engine(speculative_config=_spec(), **kw)
    out, reqs, _ = _generate(rt, ps, 40)
    assert out == ref
    assert rt.runner.spec_stats.num_accepted_tokens > 0
    assert sum(r.num_preemptions for r in reqs) > 0  # the cache was tight


@pytest.mark.engine
@pytest.mark.parametrize("how", ["stop_id", "stop_check", "max_tokens"])
def test_an_ending_inside_an_accepted_run_cuts_it(engine, how):
    # a copy task: each prompt, its own greedy continuation, the prompt again — the model
    # continues as before and the drafts copy tokens not yet in the output
    ps = _prompts()
    ps = [p + o + p for p, o in zip(ps, _generate(engine(), ps, 40)[0], strict=True)]
    free, _, runs = _generate(engine(speculative_config=_spec()), ps, 40)
    cut = None  # (request, output index) of a stop inside a verified run
    for rid, o in enumerate(free):
        for j in _inside_runs(runs, rid):
            # a stop id must occur there first
            if j < len(o) and (how != "stop_id" or o.index(o[j]) == j):
                cut = (rid, j)
                break
        if cut:
            break
    assert cut is not None, "no verified run to cut: the test would be vacuous"
    rid, j = cut
    seen: list[int] = []
    stops, max_tokens = {}, 40
    if how == "stop_id":
        stops = {rid: StopRule(frozenset({free[rid][j]}))}
    elif how == "stop_check":
        stops = {rid: StopRule(check=lambda t: seen.append(t) or len(seen) == j + 1)}
    else:
        max_tokens = j + 1
    rt = engine(speculative_config=_spec())
    out, reqs, _ = _generate(rt, ps, max_tokens, stops)
    assert out[rid] == free[rid][: j + 1]  # ended there, the run's later tokens discarded
    want = RequestState.FINISHED if how == "max_tokens" else RequestState.STOPPED
    assert reqs[rid].state == want
    assert reqs[rid].num_output_tokens == j + 1
    if how == "stop_check":
        assert seen == free[rid][: j + 1]  # each kept token checked once, in order
    for i, o in enumerate(out):  # the others are unaffected
        if i != rid:
            assert o == free[i][: len(o)]


@pytest.mark.engine
def test_non_greedy_requests_do_not_speculate(engine):
    from tidal.runtime.sampling import SamplingParams

    rt = engine(speculative_config=_spec())
    req = Request(0, 0, 15, 20, token_ids=_prompts()[1])
    rt.runner.set_sampling(req, SamplingParams(temperature=1.0, seed=3))
    rt.scheduler.add_request(req)
    while rt.scheduler.has_work():
        rt.engine.step()
    assert req.num_output_tokens == 20
    assert rt.runner.spec_stats.num_drafts == 0


@pytest.mark.engine
def test_the_engine_refuses_what_it_cannot_run(engine):
    from tidal.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"speculative_config\.method.*ngram"):
        engine(speculative_config=_spec().model_copy(update={"method": "eagle3"}))
    with pytest.raises(ConfigError, match="batching"):
        engine(speculative_config=_spec(), batching="eb", profile="x.json")
