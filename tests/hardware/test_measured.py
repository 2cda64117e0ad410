"""MeasuredPerfModel: hand-computed sums, interpolation, exact fast-forward, auto's choice."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.core.errors import ConfigError
from tidal.hardware.calibration import build_perf_model, perf_model_source
from tidal.hardware.corrected import CorrectedRooflinePerfModel
from tidal.hardware.gpus import get_gpu
from tidal.hardware.interp import Curve, binned_median, fill_row, isotonic
from tidal.hardware.measured import MeasuredPerfModel
from tidal.hardware.models import ModelSpec, get_model
from tidal.hardware.opprofile import (
    AllReduceOps,
    AttentionOps,
    Deployment,
    Grid2D,
    HostOps,
    LinearOps,
    ModelShape,
    deployment,
)
from tidal.hardware.perf import LinearPerfModel

TINY = ModelSpec("t", 2, 64, 4, 2, 128, 100)


def tiny_deployment(tp: int = 2) -> Deployment:
    lin = LinearOps(
        model="t", tp=tp, shape=ModelShape(hidden=64, q_heads=4, kv_heads=2, intermediate=128,
                                           vocab=100),
        tokens=[1, 3, 5], layer_us={"attn_pre_proj": [10, 14, 18], "add": [1, 1, 3]},
        step_us={"emb": [2, 2, 4]},
    )  # fmt: skip
    ar = AllReduceOps(link="dgx", tp=tp, bytes=[128, 1024], us=[20, 30])
    att = AttentionOps(
        q_heads=2, kv_heads=1, head_dim=16,
        decode=Grid2D(rows=[1, 2], cols=[10, 20], us=[[5, 7], [6, 10]]),
        prefill=Grid2D(rows=[2, 4], cols=[0, 8], us=[[8, 12], [16, None]]),
    )  # fmt: skip
    host = HostOps(model="t", tp=tp, batch=[1, 3], ms={"schedule": [0.1, 0.3],
                                                       "sampler": [0.2, 0.2]})  # fmt: skip
    return Deployment("h100", "test", lin, att, ar, host)


def test_step_is_the_hand_computed_sum_of_the_measured_operators() -> None:
    m = MeasuredPerfModel(tiny_deployment(), TINY, get_gpu("h100"), 2, host="vidur")
    # 2 decodes at contexts summing to 30 (mean 15) + one 2-token chunk, no cache: T = 4
    # linear per layer at T=4: (14+18)/2 + (1+3)/2 = 18 µs; emb 3 µs; 2 layers
    # AR bytes 4·64·2 = 512: binned medians → knots (128, 20), (1024, 30): 20 + 10·384/896
    ar = 20 + 10 * 384 / 896
    # decode table row b=2 at mean context 15: 8 µs; prefill chunk 2 at cached 0: 8 µs
    # host at 3 sequences: 0.3 + 0.2 ms
    want = (2 * 18 + 3 + 2 * 2 * ar + 2 * 8 + 2 * 8) * 1e-6 + 0.5e-3
    got = m.step_seconds(2, 30, 2, 4, 2, 1)
    assert got == pytest.approx(want, rel=1e-12)
    assert m.parts["attention_decode"].startswith("measured:test/h100/t/tp2")
    # a batch beyond the table scales the largest measured row: b = 4 → 2 × row 2
    assert m._dec_curve(4).at(4 * 15) == pytest.approx(2 * 2 * 8e-6)  # 2 layers, 2 × row 2
    # the unmeasured prefill cell (chunk 4, cached 8): its row's only measured value, flat
    assert m._pre is not None
    assert m._pre.us[1][:2] == [16.0, 16.0]
    # beyond the last cached column row 4 rises as fast as row 2 (0.5 µs per token): the
    # virtual column keeps the extension monotone in the chunk size
    assert m._pre.us[0][2] == 16.0
    assert m._pre.us[1][2] == 20.0


def test_grid_points_are_reproduced_exactly_and_the_fallback_fills_the_gaps() -> None:
    model = get_model("llama-2-7b")
    dep = deployment("a100-80gb", "llama-2-7b", 1, heads=(32, 32, 128))
    assert dep is not None
    assert dep.attention is None
    assert dep.host is not None
    m = MeasuredPerfModel(dep, model, get_gpu("a100-80gb"), 1, host="vidur")
    tot = [32 * sum(v[i] for v in dep.linear.layer_us.values()) + dep.linear.step_us["emb"][i]
           for i in range(len(dep.linear.tokens))]  # fmt: skip
    env = isotonic(tot)  # the monotone envelope: equal to the data where they rise
    i = dep.linear.tokens.index(256)
    assert m.tokens_s(256) == pytest.approx(env[i] * 1e-6, rel=1e-12)
    j = next(j for j in range(len(tot)) if env[j] == pytest.approx(tot[j], rel=1e-12))
    assert m.tokens_s(dep.linear.tokens[j]) == pytest.approx(tot[j] * 1e-6, rel=1e-12)
    parts = m.parts
    assert parts["attention_decode"] == "corrected-roofline"
    assert parts["host"].startswith("measured:")
    assert parts["all_reduce"] == "none (tp 1)"
    # decode with fallback attention is affine in the context, and exactly so
    c, a = m.decode_affine(16)  # type: ignore[misc]
    for ctx in (0, 1000, 123_457):
        assert c + a * ctx == m.step_seconds(16, ctx, 0, 0, 0, 0)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([("codellama-34b", 2), ("llama-2-7b", 1), ("llama-2-70b", 4)]),
    st.integers(1, 300),
    st.integers(0, 8000),
    st.integers(1, 400),
)
def test_decode_runs_equal_stepping_one_by_one_bit_for_bit(case, n, ctx_per, steps) -> None:
    name, tp = case
    perf = build_perf_model("auto", get_model(name), get_gpu("a100-80gb"), tp)
    assert isinstance(perf, MeasuredPerfModel)
    ctx0 = n * ctx_per
    run = perf.decode_run_ns(n, ctx0, steps)
    one = [perf.step_ns(n, ctx0 + n * k) for k in range(steps)]
    assert run.tolist() == one
    # the piecewise-affine form the simulator times runs with repeats every step exactly
    for k in range(steps):
        x = ctx0 + n * k
        c, a, end = perf.decode_segment(n, x)
        assert end > x
        assert c + a * x == perf.step_seconds(n, x, 0, 0, 0, 0)
        if end < float("inf"):
            assert c + a * (int(end) - 1) == perf.step_seconds(n, int(end) - 1, 0, 0, 0, 0)
    aff = perf.decode_affine(n)
    if aff is not None:
        c, a = aff
        assert [max(1, int(np.floor((c + a * (ctx0 + n * k)) * 1e9 + 0.5))) for k in
                range(steps)] == one  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 10_000), min_size=2, max_size=8, unique=True),
    st.lists(st.floats(0, 1e3, allow_nan=False), min_size=8, max_size=8),
    st.lists(st.integers(-100, 20_000), min_size=1, max_size=50),
)
def test_curve_scalar_and_array_paths_agree_bit_for_bit(xs, ys, qs) -> None:
    xs = sorted(xs)
    c = Curve(xs, ys[: len(xs)])
    arr = c.many(np.asarray(qs, dtype=np.int64))
    assert arr.tolist() == [c.at(q) for q in qs]
    assert c.at(xs[0] - 5) == c.at(xs[0]) == pytest.approx(ys[0])  # flat below the grid
    for x, y in zip(xs, ys, strict=False):
        assert c.at(x) == pytest.approx(y, abs=1e-9)


def test_fill_row_and_binned_median() -> None:
    assert fill_row([None, 2.0, None, 4.0, None, None]) == [2.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    x, y = binned_median([1000, 1001, 1002, 4000, 4001], [5, 50, 6, 4, 4], per_octave=1)
    assert x == [1001.0, 4000.5]
    assert y == [6.0, 6.0]


def test_auto_vidur_prefers_paper_calibrations_then_measured_then_corrected() -> None:
    """The order without the engine tables (``auto-vidur``; ``auto`` puts the tables first:
    tests/hardware/test_auto_perf.py)."""
    a100 = get_gpu("a100-80gb")
    # INFERCEPT's A100 profile keeps precedence over Vidur's A100 data
    assert isinstance(build_perf_model("auto-vidur", get_model("gpt-j-6b"), a100),
                      LinearPerfModel)  # fmt: skip
    assert isinstance(build_perf_model("auto-vidur", get_model("qwen3-8b"), get_gpu("h200")),
                      LinearPerfModel)  # fmt: skip
    meas = build_perf_model("auto-vidur", get_model("llama-3-70b"), a100, 2)
    assert perf_model_source(meas) == "measured:vidur/a100-80gb/llama-3-70b/tp2"
    corr = build_perf_model("auto-vidur", get_model("llama-3.1-8b"), get_gpu("h200"))
    assert isinstance(corr, CorrectedRooflinePerfModel)
    assert perf_model_source(corr) == "corrected-roofline"
    wrapped = build_perf_model("auto-vidur", get_model("llama-2-7b"), a100, interference=True)
    assert perf_model_source(wrapped) == "measured:vidur/a100-80gb/llama-2-7b/tp1+interference"
    with pytest.raises(ConfigError, match=r"no measured profile for llama-3\.1-8b on h200"):
        build_perf_model("measured", get_model("llama-3.1-8b"), get_gpu("h200"))
    assert build_perf_model("roofline", get_model("llama-2-7b"), a100).name == "roofline"
