"""The engine core's host time by engine version (issue 28 item 5): synchronous scheduling
adds it to the step, async scheduling overlaps it (``max(gpu, cpu)``); exact under
fast-forward either way."""

from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidal.hardware.engine_host as engine_host_mod
from tidal.hardware.calibration import EngineChoice, build_perf_model, perf_model_tables
from tidal.hardware.engine_host import (
    VLLM_SYNC_HOST,
    async_scheduling_default,
    engine_host,
    first_at_least,
)
from tidal.hardware.engine_perf import EnginePerfModel
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.sim.config import load_config


@lru_cache(maxsize=16)
def perf(
    model: str, tp: int, version: str | None, async_: bool | None, async_cpu: bool = False
) -> EnginePerfModel:
    """``async_cpu``: async scheduling with the sync fit's CPU time (the ``max`` rule
    exercised; today's async default exposes none)."""
    with pytest.MonkeyPatch.context() as mp:
        if async_cpu:
            mp.setattr(engine_host_mod, "VLLM_ASYNC_HOST", VLLM_SYNC_HOST)
        p = build_perf_model(
            "engine", get_model(model), get_gpu("h100"), tp,
            engine=EngineChoice("vllm", version, async_scheduling=async_),
        )  # fmt: skip
    assert isinstance(p, EnginePerfModel)
    return p


@pytest.mark.parametrize(
    ("engine", "version", "expect"),
    [
        ("vllm", "0.11.2", False), ("vllm", "0.12.0", False), ("vllm", "0.13.0", False),
        ("vllm", "0.14.0", True), ("vllm", "0.19.0", True), ("vllm", "0.14.0rc1", True),
        ("vllm", "nightly-5b8c30d62b754b57", True), ("vllm", None, True),
        ("sglang", "0.5.1", True),
    ],
)  # fmt: skip
def test_async_scheduling_is_vllm_s_default_from_0_14(engine, version, expect) -> None:
    assert async_scheduling_default(engine, version) is expect


def test_sglang_has_no_engine_core_term_and_the_flag_overrides_the_version() -> None:
    assert engine_host("sglang", "0.5.1", None) is None
    assert engine_host("vllm", "0.19.0", False).overlapped is False  # type: ignore[union-attr]
    assert engine_host("vllm", "0.12.0", True).overlapped is True  # type: ignore[union-attr]


def test_sync_adds_the_cpu_time_to_a_step_by_hand() -> None:
    """Qwen3-32B TP 2, 8 decodes of 1,024 tokens: the GPU step (~15 ms) outlasts the CPU
    time, so async shows the GPU step alone and sync adds 748.9 + 8 × 41.74 = 1,082.82 µs."""
    qwen = "Qwen/Qwen3-32B"
    sync, over = perf(qwen, 2, "0.12.0", None), perf(qwen, 2, "0.12.0", True)
    step, per_seq = VLLM_SYNC_HOST
    cpu_ns = (step + per_seq * 8) * 1e3
    assert cpu_ns == pytest.approx(1_082_820.0)
    gpu = over.step_ns(8, 8 * 1024)
    assert gpu > cpu_ns  # the CPU time is hidden with async scheduling
    assert abs(sync.step_ns(8, 8 * 1024) - gpu - cpu_ns) <= 1
    # a newer version without the flag schedules asynchronously: its GPU step alone
    newer_sync = perf(qwen, 2, "0.19.0", False).step_ns(8, 8 * 1024)
    assert newer_sync - perf(qwen, 2, "0.19.0", None).step_ns(8, 8 * 1024) == pytest.approx(
        cpu_ns, abs=1
    )


def test_async_exposes_no_cpu_time_by_default() -> None:
    """No measured CPU time of an async version: the step is the GPU step alone."""
    over = perf("tiny-llama", 1, "0.19.0", None)
    assert over.step_seconds(256, 0, 0, 0, 0, 0) == MeasuredGPU(over, 256, 0)
    assert over.decode_affine(256) is not None  # fast-forward's affine path stays open


def test_async_shows_the_cpu_time_where_it_outlasts_the_gpu_step() -> None:
    """With an async CPU time equal to the sync fit (the rule, not today's default):
    TinyLlama-1.1B TP 1, 256 decodes at no context: a GPU step (~3.3 ms) below the CPU
    time's 748.9 + 256 × 41.74 µs = 11.43 ms, which is then the step."""
    over = perf("tiny-llama", 1, "0.19.0", None, async_cpu=True)
    gpu = MeasuredGPU(over, 256, 0)
    cpu_s = (VLLM_SYNC_HOST[0] + VLLM_SYNC_HOST[1] * 256) * 1e-6
    assert gpu < cpu_s
    assert over.step_seconds(256, 0, 0, 0, 0, 0) == cpu_s
    # and the GPU step again once the context makes it the longer
    long = 256 * 60_000
    assert over.step_seconds(256, long, 0, 0, 0, 0) == MeasuredGPU(over, 256, long) > cpu_s


def MeasuredGPU(p: EnginePerfModel, n: int, ctx: int) -> float:  # noqa: N802
    """The step without the overlapped CPU time (the measured model's own sum)."""
    return float(super(EnginePerfModel, p).step_seconds(n, ctx, 0, 0, 0, 0))


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([
        ("tiny-llama", 1, "0.19.0", None), ("llama-3.1-8b", 1, "0.12.0", None),
        ("Qwen/Qwen3-32B", 2, "0.12.0", None), ("Qwen/Qwen3-32B", 4, "0.12.0", True),
        ("llama-3.1-70b", 4, "0.19.0", False),
    ]),
    st.integers(1, 300), st.integers(0, 60_000), st.integers(1, 300),
)  # fmt: skip
def test_decode_runs_equal_stepping_one_by_one_bit_for_bit(case, n, ctx_per, steps) -> None:
    """Fast-forward's two paths (the vector run and the affine segments, which async
    scheduling cuts where the GPU step overtakes the CPU time) equal single steps; async
    with the sync fit's CPU time, so the cut is exercised."""
    p = perf(*case, async_cpu=True)
    ctx0 = n * ctx_per
    one = [p.step_ns(n, ctx0 + n * k) for k in range(steps)]
    assert p.decode_run_ns(n, ctx0, steps).tolist() == one
    x = ctx0
    while x < ctx0 + n * steps:
        c, a, end = p.decode_segment(n, x)
        assert end > x
        assert c + a * x == p.step_seconds(n, x, 0, 0, 0, 0)
        last = min(int(end) - 1, ctx0 + n * steps)
        assert c + a * last == p.step_seconds(n, last, 0, 0, 0, 0)
        x = int(end) if end < float("inf") else ctx0 + n * steps


@given(st.floats(0.0, 1.0), st.floats(1e-9, 1e-3), st.integers(0, 10**6), st.floats(0, 2.0))
def test_the_crossing_is_the_first_context_at_or_above_the_cpu_time(c, a, lo, level) -> None:
    hi = float(lo + 10**7)
    x = first_at_least(c, a, lo, hi, level)
    assert lo <= x <= hi
    if x < hi:
        assert c + a * x >= level
    if x > lo:
        assert c + a * (x - 1) < level


def test_the_flag_needs_the_engine_tables() -> None:
    wl = {"num_requests": 4, "rate": "inf"}
    cfg = load_config({"perf_model": "engine", "async_scheduling": False, "workload": wl})
    assert cfg.async_scheduling is False
    with pytest.raises(Exception, match="async_scheduling"):
        load_config({"perf_model": "corrected-roofline", "async_scheduling": True, "workload": wl})


def test_summary_records_the_scheduling_mode_and_the_cpu_time() -> None:
    rec = perf_model_tables(perf("llama-3.1-8b", 1, "0.12.0", None))["perf_model_tables"]
    assert rec["engine_host"]["scheduling"] == "sync"
    assert (rec["engine_host"]["step_us"], rec["engine_host"]["per_seq_us"]) == VLLM_SYNC_HOST
    rec = perf_model_tables(perf("tiny-llama", 1, "0.19.0", None))["perf_model_tables"]
    assert rec["engine_host"]["scheduling"] == "async"


@settings(max_examples=6, deadline=None)
@given(st.sampled_from(["0.19.0", "0.12.0"]), st.integers(60, 300), st.integers(0, 2**16))
def test_a_run_is_the_same_with_and_without_fast_forward(version, n, seed) -> None:
    """TinyLlama with async scheduling, whose CPU time outlasts its GPU decode steps at these
    batches (the crossing itself: the decode-run test above), and the synchronous version:
    fast-forward changes no number."""
    from tidal.sim.run import run_simulation  # a test of the whole run, above this layer

    def run(ff: bool) -> dict[str, list[int]]:
        cfg = load_config({
            "seed": seed, "model": "tiny-llama", "gpu": "h100", "perf_model": "engine",
            "engine_version": version, "fast_forward": ff,
            "workload": {"num_requests": n, "rate": "inf", "prompt_len": 64,
                         "output_len": 400},
        })  # fmt: skip
        res = run_simulation(cfg)
        return {k: list(res.columns[k]) for k in ("first_token_ns", "finish_ns")}

    with pytest.MonkeyPatch.context() as mp:  # an async CPU time that shows
        mp.setattr(engine_host_mod, "VLLM_ASYNC_HOST", VLLM_SYNC_HOST)
        assert run(True) == run(False)
    assert run(True) == run(False)  # today's async default: no CPU time
