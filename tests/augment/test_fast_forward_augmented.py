"""Exact fast-forward with augmented requests: identical per-request timestamps with and
without it under every serving policy (docs/DESIGN.md §2)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tests.augment.helpers import augmented_workloads, make, run, spec, workload
from tidal.hardware.calibration import build_perf_model
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model

PERFS = [
    ("gpt-j-6b", "a100-80gb", "roofline", 1),
    ("qwen3-8b", "h200", "linear", 1),
    # INFERCEPT's measured profiles; the 13B one is floored above ≈ 630 tokens per step
    ("gpt-j-6b", "a100-80gb", "linear", 1),
    ("vicuna-13b", "a100-80gb", "linear", 2),
    # today's default: vLLM's operator tables (piecewise-linear in the context)
    ("vicuna-13b", "a100-80gb", "auto", 2),
]
POLICIES = [
    ("vllm", None),
    ("infercept", None),
    ("augserve", None),
    ("augserve-ordering", None),
    ("augserve-budget", None),
    ("vllm", "swap"),
    ("vllm", "preserve"),
]


@given(
    rs=augmented_workloads(
        max_requests=25,
        max_gap_s=0.3,
        max_calls=5,
        max_decode=120,
        max_call_ms=400.0,
        max_return=150,
        max_prompt=500,
        max_final=200,
    ),
    policy=st.sampled_from(POLICIES),
    predictor=st.sampled_from(["oracle", "noisy", "mean", "none"]),
    spare=st.integers(0, 300),
    host=st.sampled_from([0, 40, 10_000]),
    block_size=st.sampled_from([4, 16]),
    max_seqs=st.integers(1, 16),
    perf_idx=st.integers(0, len(PERFS) - 1),
    batching=st.sampled_from(["mb", "eb", "ebplus"]),
)
def test_fast_forward_is_exact_for_augmented_requests(
    rs, policy, predictor, spare, host, block_size, max_seqs, perf_idx, batching
):
    """Also with interception composed over EB and EB⁺ (their phase machine and mode
    switches must stop a fast-forwarded run exactly where stepping would change)."""
    longest = int((rs.prompt_len + rs.output_len + rs.extra["return_tokens"]).max())
    blocks = -(-longest // block_size) + 2 + spare
    m, g, kind, tp = PERFS[perf_idx]
    perf = build_perf_model(kind, get_model(m), get_gpu(g), tp)
    name, intercept = policy
    runs = []
    for ff in (False, True):
        s = make(
            name,
            intercept=intercept,
            num_blocks=blocks,
            block_size=block_size,
            host_blocks=host,
            max_seqs=max_seqs,
            token_budget=max(256, max_seqs),
            predictor=predictor,
            perf=perf,
            swap_ns_per_token=20_000.0,
            starvation_ns=50_000_000,
            budget_min=64,
            budget_max=2048,
            budget_reserve=16,
            checked=False,
            batching=batching,
            deployment=(m, g, tp),
        )
        rec, sim = run(rs, s, perf, fast_forward=ff)
        runs.append((rec, sim, s))
    (a, sa, s1), (b, sb, s2) = runs
    for col in ("first_scheduled_ns", "first_token_ns", "finish_ns", "num_preemptions"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    assert s1.num_steps == s2.num_steps
    assert sb.num_events <= sa.num_events
    for attr in (
        "idle_block_ns",
        "swapin_block_ns",
        "stall_block_ns",
        "recompute_tokens",
        "recompute_ns",
        "forward_ns",
    ):
        assert getattr(s1.augmentation, attr) == getattr(s2.augmentation, attr), attr
    assert s2.kv.num_free_blocks == s2.kv.num_blocks


def test_fast_forward_skips_steps_of_long_decode_segments():
    specs = [spec((400, 2000.0, 10), final=1500) for _ in range(4)]
    rs = workload([0.0] * 4, [64] * 4, specs)
    perf = build_perf_model("roofline", get_model("gpt-j-6b"), get_gpu("a100-80gb"))
    events = []
    for ff in (False, True):
        s = make("infercept", predictor="oracle", perf=perf, checked=False)
        _, sim = run(rs, s, perf, fast_forward=ff)
        events.append(sim.num_events)
    assert events[0] > 1900
    assert events[1] < 60


def test_values_of_requests_arriving_mid_run_are_those_of_the_step_in_flight():
    """Regression (a random search found it; the property above had seen it once): AugServe
    values a request when it enters the ready queue, from the engine's state (the running
    batch's KV, the step's dynamic budget). R2 and R3 (the same prompt) arrive while R0 and
    R1 decode in a full running set; stepping, each is valued from the state of the step in
    flight, and R3 comes out cheaper. A fast-forwarded run used to be committed only at its
    end, so both were valued from the state of the run's first step, and R2 went first. Runs
    now end at the last step boundary before an arrival or a return that reads that state."""
    specs = [spec(final=36), spec(final=30), spec(final=1), spec(final=1)]
    rs = workload([0.029458389, 0.036, 0.053550223, 0.065], [1, 82, 107, 107], specs)
    runs = []
    for ff in (False, True):
        s = make(
            "augserve",
            num_blocks=37,
            host_blocks=0,
            max_seqs=2,
            predictor="mean",
            checked=False,
            starvation_ns=50_000_000,
            budget_min=64,
            budget_max=2048,
            budget_reserve=16,
        )
        runs.append(run(rs, s, fast_forward=ff))
    (a, sa), (b, sb) = runs
    assert a.first_scheduled_ns[3] < a.first_scheduled_ns[2]  # R3 is the cheaper one
    for col in ("first_scheduled_ns", "first_token_ns", "finish_ns"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    assert sb.num_events < sa.num_events
