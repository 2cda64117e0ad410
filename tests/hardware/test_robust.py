"""No perf model returns a step faster than physics allows or faster for a bigger batch.

Random (noisy, even falling) measured profiles and random shapes, queried on and far off the
measured grids: step_ns ≥ 1, the context-independent part ≥ the weight-read floor, and step
time non-decreasing in decode requests (at a fixed context per request), in the total decode
context and in prefill tokens (fixed chunks and cache).
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.hardware.calibration import build_perf_model
from tidal.hardware.corrected import CorrectedRooflinePerfModel, weight_read_floor_s
from tidal.hardware.gpus import get_gpu
from tidal.hardware.interp import Curve, isotonic
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
)
from tidal.hardware.perf import PerfModel

TINY = ModelSpec("t", 2, 64, 4, 2, 128, 100)
us = st.floats(0.0, 500.0, allow_nan=False)


@st.composite
def noisy_deployment(draw: st.DrawFn) -> Deployment:
    n_tok = draw(st.integers(2, 6))
    tokens = sorted(draw(st.lists(st.integers(1, 4096), min_size=n_tok, max_size=n_tok,
                                  unique=True)))  # fmt: skip
    lin = LinearOps(
        model="t", tp=2, shape=ModelShape(hidden=64, q_heads=4, kv_heads=2, intermediate=128,
                                          vocab=100),
        tokens=tokens, layer_us={"mlp_up_proj": draw(st.lists(us, min_size=n_tok,
                                                               max_size=n_tok))},
        step_us={"emb": draw(st.lists(us, min_size=n_tok, max_size=n_tok))},
    )  # fmt: skip
    ar = AllReduceOps(link="dgx", tp=2, bytes=[128, 1024, 8192],
                      us=draw(st.lists(us, min_size=3, max_size=3)))  # fmt: skip

    def grid(rows: list[int], cols: list[int]) -> Grid2D:
        cell = st.one_of(st.none(), us) if len(cols) > 1 else us
        rest = st.lists(cell, min_size=len(cols) - 1, max_size=len(cols) - 1)
        body = [[draw(us), *draw(rest)] for _ in rows]
        return Grid2D(rows=rows, cols=cols, us=body)

    att = AttentionOps(q_heads=2, kv_heads=1, head_dim=16,
                       decode=grid([1, 4, 16], [16, 128, 1024]),
                       prefill=grid([16, 128, 512], [0, 256, 2048]))  # fmt: skip
    host = HostOps(model="t", tp=2, batch=[1, 8, 64],
                   ms={"schedule": [draw(st.floats(0, 2)) for _ in range(3)]})  # fmt: skip
    return Deployment("h100", "noisy", lin, att, ar, host)


def _check(perf: PerfModel, floor: float, n: int, per: int, p: int, cached: int, k: int) -> None:
    def t(n_: int, ctx: int, p_: int) -> int:
        m = k if p_ else 0
        c = cached * m
        return perf.step_ns(n_, ctx, p_, p_ * (2 * cached + p_ // max(m, 1)), c + p_, m)

    base = t(n, n * per, p)
    assert base >= 1
    if n + p:
        assert base >= int(floor * 1e9) - 1
    assert t(n + 1, (n + 1) * per, p) >= base  # one more request, same context each
    assert t(n, n * per + n + 1, p) >= base  # more context
    assert t(n, n * per, p + k) >= base  # more prefill tokens in the same chunks


shape = (st.integers(0, 3000), st.integers(0, 70_000), st.integers(0, 20_000),
         st.integers(0, 50_000), st.integers(1, 8))  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(noisy_deployment(), *shape)
def test_noisy_profiles_give_positive_monotone_step_times(dep, n, per, p, cached, k) -> None:
    gpu = get_gpu("h100")
    perf = MeasuredPerfModel(dep, TINY, gpu, 2)
    _check(perf, weight_read_floor_s(TINY, gpu, 2), n, per, p, cached, k)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from([("codellama-34b", "a100-80gb", 2), ("llama-2-7b", "a100-80gb", 1),
                     ("llama-3.1-8b", "h200", 1), ("qwen-72b", "a40", 4),
                     ("qwen3-30b-a3b", "h100", 2)]),
    *shape,
)  # fmt: skip
def test_bundled_and_corrected_models_are_positive_and_monotone(case, n, per, p, cached, k):
    name, g, tp = case
    model, gpu = get_model(name), get_gpu(g)
    floor = weight_read_floor_s(model, gpu, tp)
    for perf in (build_perf_model("auto", model, gpu, tp),
                 CorrectedRooflinePerfModel(model, gpu, tp)):  # fmt: skip
        _check(perf, floor, n, min(per, 8000), p, min(cached, 8000), k)


@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=30))
def test_isotonic_is_the_monotone_least_squares_fit(ys) -> None:
    iso = isotonic(ys)
    assert len(iso) == len(ys)
    assert all(a <= b + 1e-9 for a, b in itertools.pairwise(iso))
    assert min(iso) >= 0.0
    clipped = [max(v, 0.0) for v in ys]
    # PAVA keeps the sum (each pooled block's mean) and leaves monotone data alone
    assert abs(sum(iso) - sum(clipped)) <= 1e-6 * max(1.0, sum(clipped))
    if all(a <= b for a, b in itertools.pairwise(clipped)):
        assert iso == clipped


def test_curve_holds_a_falling_tail_flat() -> None:
    c = Curve([1, 2, 3], [5.0, 7.0, 4.0])
    assert c.at(3) == 4.0
    assert c.at(1000) == 4.0  # not 4 − 3·997
    assert c.at(2.5) == 5.5  # inside the grid the data are kept
