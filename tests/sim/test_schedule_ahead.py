"""An engine that plans step N + 1 while step N runs (vLLM's async scheduling, SGLang's overlap
scheduler) schedules a request that arrived during step N into step N + 2, one step later than
a synchronous engine; an idle engine, or one whose next planned step is empty, takes it at
once (``tidal.engine.engine``; docs/design/ttft_gap.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import make_scheduler, request_set, simulate, unit_perf
from tidal.hardware.engine_host import schedules_ahead as engine_schedules_ahead
from tidal.hardware.perf import LinearPerfModel, PerfModel, schedules_ahead
from tidal.hardware.pipeline import PipelinePerfModel

STEP_S = 0.010


class FlatPerf(PerfModel):
    """Every step takes 10 ms, whatever it holds."""

    name = "flat"

    def __init__(self, ahead: bool) -> None:
        self.schedules_ahead = ahead

    def step_seconds(self, num_decodes: int, decode_ctx: Any, *args: Any, **kw: Any) -> Any:
        if isinstance(decode_ctx, np.ndarray):  # a fast-forwarded decode run
            return np.full(decode_ctx.shape, STEP_S)
        return STEP_S


class AheadUnitPerf(LinearPerfModel):
    """``unit_perf`` (fast-forwardable) on an engine that schedules ahead."""

    schedules_ahead = True


def first_tokens_ms(arrival_s: list[float], output: list[int], ahead: bool) -> list[float]:
    rs = request_set(arrival_s, [16] * len(arrival_s), output)
    rec, _, _ = simulate(rs, make_scheduler(), FlatPerf(ahead))
    return (rec.first_token_ns / 1e6).tolist()


@pytest.mark.parametrize(("ahead", "b_first_ms"), [(False, 30.0), (True, 40.0)])
def test_arrival_during_a_step_waits_for_the_step_already_planned(ahead, b_first_ms):
    """A arrives at 0 on an idle engine: prefill [0, 10] ms, decodes [10, 20], [20, 30], ….
    B arrives at 15 ms, during the step [10, 20]. Synchronous: the schedule at 20 sees it,
    prefill [20, 30], first token at 30 (TTFT 15 ms). Ahead: the step [20, 30] was planned at
    10, before B came; B enters the queue at 20 and is scheduled at 30, first token at 40
    (TTFT 25 ms: one step more)."""
    assert first_tokens_ms([0.0, 0.015], [10, 2], ahead) == [10.0, b_first_ms]


@pytest.mark.parametrize("ahead", [False, True])
def test_an_empty_planned_step_takes_the_arrival_at_once(ahead):
    """A (2 output tokens) ends with the step [10, 20]; the step planned for [20, …] is empty,
    so the engine core blocks on its input queue and schedules B (arrived at 15) at 20 in both
    modes: first token at 30. An arrival at an idle engine (C at 50) starts a step at once."""
    assert first_tokens_ms([0.0, 0.015, 0.050], [2, 2, 2], ahead) == [10.0, 30.0, 60.0]


@settings(max_examples=30, deadline=None)
@given(
    arrivals=st.lists(st.integers(0, 400), min_size=1, max_size=12),
    outputs=st.lists(st.integers(1, 120), min_size=12, max_size=12),
    prompts=st.lists(st.integers(1, 700), min_size=12, max_size=12),
    seqs=st.integers(1, 6),
)
def test_fast_forward_equals_stepping_when_scheduling_ahead(arrivals, outputs, prompts, seqs):
    """Held arrivals cut fast-forwarded decode runs where stepping would first see them, also
    when the running set is full (a run that no arrival could change without the lag)."""
    n = len(arrivals)
    rs = request_set(np.sort(np.array(arrivals)) / 1e3, prompts[:n], outputs[:n])
    base = unit_perf()
    cols = []
    for ff in (False, True):
        perf = AheadUnitPerf(1e-3, 1e-6, 1e-3, 1e-6, kappa=0.0)
        assert perf.describe() == base.describe() | perf.describe()
        rec, _, _ = simulate(rs, make_scheduler(max_seqs=seqs, token_budget=512), perf, ff)
        cols.append(rec)
    for col in ("first_scheduled_ns", "first_token_ns", "finish_ns"):
        np.testing.assert_array_equal(getattr(cols[0], col), getattr(cols[1], col), col)


def test_which_engines_schedule_ahead():
    """vLLM: async scheduling, the default from 0.14.0 (a nightly or unknown version: the
    newest); the flags override it. SGLang: the overlap scheduler (its default)."""
    assert not engine_schedules_ahead("vllm", "0.12.0", None)
    assert engine_schedules_ahead("vllm", "0.14.0", None)
    assert engine_schedules_ahead("vllm", None, None)
    assert not engine_schedules_ahead("vllm", "0.19.0", False)
    assert engine_schedules_ahead("vllm", "0.11.2", True)
    assert engine_schedules_ahead("sglang", "0.5.1.post1", None)


def test_wrappers_report_the_base_models_mode():
    perf = AheadUnitPerf(1e-3, 1e-6, 1e-3, 1e-6, kappa=0.0)
    assert schedules_ahead(perf)
    assert schedules_ahead(PipelinePerfModel(perf, 2, lambda tokens: 0.0))
    assert not schedules_ahead(unit_perf())
