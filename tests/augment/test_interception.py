"""Pause/resume under Preserve, Discard and Swap: hand-computed timelines, conservation of
tokens, KV blocks and host swap space."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.augment.helpers import MS, US, augmented_workloads, make, run, spec, workload

# unit_perf: a step with prefill costs 1 ms + 1 µs per token; a decode-only step 1 ms + 1 µs
# per request. Request: prompt 100, decode 3, call 10 ms returning 5 tokens, decode 2.
PROMPT = 100
ONE = spec((3, 10.0, 5), final=2)
PAUSE = (1 * MS + 100 * US) + 2 * (1 * MS + 1 * US)  # prefill, then 2 decodes: 3 tokens
RESUME = PAUSE + 10 * MS


@pytest.mark.parametrize(
    ("intercept", "resume_prefill", "stall"),
    [
        ("preserve", 1 + 5, 0),  # the last sampled token + the returned ones
        ("discard", 100 + 3 + 5, 0),  # the whole context is recomputed
        # 102 computed tokens = 7 blocks of 16 moved at 1 µs/token in a transfer-only step
        ("swap", 1 + 5, 7 * 16 * US),
    ],
)
def test_single_call_timeline_matches_hand_computation(intercept, resume_prefill, stall):
    s = make("vllm", intercept=intercept)
    rec, _ = run(workload([0.0], [PROMPT], [ONE]), s)
    first = 1 * MS + 100 * US
    resumed = RESUME + stall + (1 * MS + resume_prefill * US)
    assert rec.first_token_ns[0] == first
    assert rec.finish_ns[0] == resumed + (1 * MS + 1 * US)
    assert rec.output_tokens[0] == 5
    m = s.extra_metrics()
    assert m["num_intercepts"] == 1
    assert m["recompute_tokens"] == (102 if intercept == "discard" else 0)
    key = {"preserve": "intercepts_preserved", "discard": "intercepts_discarded"}.get(
        intercept, "intercepts_swapped"
    )
    assert m[key] == 1
    if intercept == "swap":
        assert m["swap_out_tokens"] == m["swap_in_tokens"] == 7 * 16
    # nothing leaked: every GPU block and host block is free again
    assert s.kv.num_free_blocks == s.kv.num_blocks
    assert s.kv.num_free_host_blocks == s.kv.num_host_blocks


def test_preserve_waste_is_the_idle_context_times_the_call():
    s = make("vllm", intercept="preserve")
    run(workload([0.0], [PROMPT], [ONE]), s)
    # 102 computed tokens = 7 blocks held for the 10 ms call, 16 000 bytes per block
    assert s.augmentation.idle_block_ns == 7 * 10 * MS
    assert s.extra_metrics()["waste_preserve_gb_s"] == pytest.approx(7 * 16 * 1000 * 0.010 / 1e9)


POLICIES = [
    ("vllm", None),
    ("infercept", None),
    ("augserve", None),
    ("vllm", "preserve"),
    ("vllm", "swap"),
    ("augserve-budget", "swap"),
]


@given(
    rs=augmented_workloads(),
    policy=st.sampled_from(POLICIES),
    spare=st.integers(0, 60),
    host=st.integers(0, 80),
    block_size=st.sampled_from([4, 16]),
    max_seqs=st.integers(1, 8),
    batching=st.sampled_from(["mb", "eb", "ebplus"]),
)
def test_tokens_blocks_and_swap_space_are_conserved(
    rs, policy, spare, host, block_size, max_seqs, batching
):
    """Whatever happens to a context during its calls, every request generates exactly its
    decode tokens, gets exactly its returned tokens, and every GPU and host block comes back
    (the invariants are also checked after every step by ``CheckedScheduler``)."""
    longest = int((rs.prompt_len + rs.output_len + rs.extra["return_tokens"]).max())
    blocks = -(-longest // block_size) + 2 + spare
    name, intercept = policy
    s = make(
        name,
        intercept=intercept,
        num_blocks=blocks,
        block_size=block_size,
        host_blocks=host,
        max_seqs=max_seqs,
        token_budget=max(64, max_seqs),
        predictor="oracle",
        batching=batching,
    )
    finished = []
    rec, _ = run(rs, s)
    finished = rec.finish_ns >= 0
    assert finished.all()
    np.testing.assert_array_equal(rec.output_tokens, rs.output_len)
    assert s.kv.num_free_blocks == s.kv.num_blocks
    assert s.kv.num_free_host_blocks == s.kv.num_host_blocks
    assert not s.augmentation.runs
    assert not s.augmentation.paused
    assert not s.augmentation.swap_in_q
    assert not s.augmentation.swap_out_q
    m = s.extra_metrics()
    assert m["num_intercepts"] == int(rs.extra["num_calls"].sum())
    assert (
        m["intercepts_preserved"] + m["intercepts_discarded"] + m["intercepts_swapped"]
        == (m["num_intercepts"])
    )
    assert m["swap_out_tokens"] >= m["swap_in_tokens"]
    # each request spent at least its call time between arrival and finish
    e2e = rec.finish_ns - rec.arrival_ns
    assert (e2e >= rs.extra["call_ns"]).all()


def test_same_output_under_every_intercept_choice():
    specs = [spec((5, 3.0, 20), (7, 50.0, 2), final=9), spec((2, 0.001, 0), final=4)]
    rs = workload([0.0, 0.001], [80, 33], specs)
    outs = []
    for intercept in ("preserve", "discard", "swap", "infercept"):
        s = make("vllm", intercept=intercept)
        rec, _ = run(rs, s)
        outs.append(rec.output_tokens.tolist())
        assert s.kv.num_free_blocks == s.kv.num_blocks
    assert all(o == [5 + 7 + 9, 2 + 4] for o in outs)


def test_abort_frees_a_request_in_a_call_and_ignores_its_return():
    s = make("vllm", intercept="swap")
    rs = workload([0.0, 0.0], [100, 50], [spec((3, 10.0, 5), final=2), spec(final=30)])
    from tests.conftest import unit_perf
    from tidal.sim.instance import SimInstance
    from tidal.sim.recorder import RequestRecorder
    from tidal.sim.simulator import Simulation

    inst = SimInstance(0, s, unit_perf(), True)
    sim = Simulation([inst], rs, RequestRecorder(rs))
    victim = []
    orig = s.on_pause

    def on_pause(req, t):
        victim.append(req)
        orig(req, t)
        sim.call_at(t + 1, lambda now: s.abort(req, now))  # abort during the call

    s.on_pause = on_pause
    sim.run()
    assert victim[0].state.name == "ABORTED"
    assert s.kv.num_free_blocks == s.kv.num_blocks
    assert s.kv.num_free_host_blocks == s.kv.num_host_blocks
    assert not s.augmentation.paused
    assert not s.augmentation.runs
