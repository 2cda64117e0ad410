"""SpecPerfModel: verification + draft time, the same integers on every path (scalar step,
context array, inline affine form)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.hardware.calibration import build_perf_model
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.hardware.spec_perf import SpecPerfModel

BASES = [
    ("llama-3.1-8b", "h100", "roofline"),
    ("llama-3.1-8b", "h100", "corrected-roofline"),
    ("llama-3-8b", "a100-80gb", "measured"),
    ("qwen3-8b", "h200", "linear"),
    ("llama-3.1-8b", "h100", "auto"),  # the engine's measured tables: piecewise affine
]


def spec_model(i: int, k: int, method: str, attention: str) -> SpecPerfModel:
    m, g, kind = BASES[i]
    base = build_perf_model(kind, get_model(m), get_gpu(g))
    draft = None if method == "ngram" else base
    return SpecPerfModel(base, k, method, draft, 1 / 32, attention)


@settings(max_examples=60, deadline=None)
@given(
    i=st.integers(0, len(BASES) - 1),
    k=st.integers(1, 6),
    method=st.sampled_from(["eagle3", "ngram"]),
    attention=st.sampled_from(["once", "per-row"]),
    n=st.integers(1, 200),
    ctx=st.lists(st.integers(1, 4000), min_size=1, max_size=40),
)
def test_every_path_gives_the_same_durations(i, k, method, attention, n, ctx):
    perf = spec_model(i, k, method, attention)
    total = [n * c for c in ctx]
    single = [perf.step_ns(n, x) for x in total]
    np.testing.assert_array_equal(perf.decode_run_ctx_ns(n, np.array(total)), single)
    form = perf.spec_affine(n)
    if form is not None:
        c, a, mul, shift, scale, c_d, a_d = form
        inline = [
            max(1, math.floor(((c + a * (mul * x + shift)) + scale * (c_d + a_d * x)) * 1e9 + 0.5))
            for x in total
        ]
        assert inline == single
    # the segment walk the executor does over a run's growing contexts
    run = list(np.cumsum(sorted(total)))
    seg = perf.spec_segment(n, run[0])
    if form is not None:
        assert seg is not None
        assert seg[2] == seg[8] == math.inf
    if seg is not None:
        walked = []
        for x in run:
            c, a, y_end, mul, shift, scale, c_d, a_d, x_end = seg
            y = mul * x + shift
            if x >= x_end or y >= y_end:
                seg = perf.spec_segment(n, x)
                c, a, y_end, mul, shift, scale, c_d, a_d, x_end = seg
            assert x < x_end
            assert y < y_end
            s = (c + a * y) + scale * (c_d + a_d * x)
            walked.append(max(1, math.floor(s * 1e9 + 0.5)))
        assert walked == [perf.step_ns(n, x) for x in run]


def test_the_measured_tables_have_a_segment_form():
    perf = spec_model(len(BASES) - 1, 3, "eagle3", "once")
    assert perf.spec_affine(8) is None
    seg = perf.spec_segment(8, 8 * 500)
    assert seg is not None
    assert seg[2] < math.inf
    assert seg[8] < math.inf


def test_verification_costs_at_least_the_plain_step_and_rows_scale():
    perf = spec_model(0, 3, "eagle3", "once")
    for n in (1, 16, 128):
        plain = perf.base.step_ns(n, n * 1000)
        assert perf.verification_seconds(n, n * 1000) * 1e9 >= plain - 1
        assert perf.step_ns(n, n * 1000) > plain
    per_row = spec_model(0, 3, "eagle3", "per-row")
    assert per_row.step_ns(64, 64_000) > perf.step_ns(64, 64_000)  # q-fold KV reads
    # prefill-only steps are the base model's
    shape = (0, 0, 512, 512 * 512, 512, 1)
    assert perf.step_ns(*shape) == perf.base.step_ns(*shape)


def test_bad_arguments():
    base = build_perf_model("roofline", get_model("llama-3.1-8b"), get_gpu("h100"))
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        SpecPerfModel(base, 0, "eagle3", base, 0.1)
    with pytest.raises(ValueError, match="attention"):
        SpecPerfModel(base, 2, "eagle3", base, 0.1, "twice")
