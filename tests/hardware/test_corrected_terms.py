"""Corrected roofline: staircase all-reduce regimes, borrowed link latencies, GEMM corners."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.hardware.corrected import (
    CorrectedRooflinePerfModel,
    LinkConst,
    RooflineConstants,
    allreduce_time,
    gemm_time,
)
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model

STAIRS = LinkConst(lat_us=40.0, eta=0.5, ll_bytes=16384.0, ll_us=8.0, mid_bytes=65536.0,
                   mid_us=20.0, steps=[(2.0**20, 30.0, 0.0)])  # fmt: skip


def test_staircase_regimes_by_hand() -> None:
    """8 µs to 16 KiB, 20 µs to 64 KiB, 30 µs to 1 MiB; past it 40 µs + the ring transfer
    x = 2·(2−1)/2 · 2²¹ B / (0.5 · 450 GB/s) = 9.321 µs (p = 1: their sum)."""
    x = 2.0**21 / (0.5 * 450e9)
    got = [allreduce_time(b, 2, 450e9, STAIRS) for b in (4096.0, 32768.0, 524288.0, 2.0**21)]
    assert got == pytest.approx([8e-6, 20e-6, 30e-6, 40e-6 + x])
    arr = allreduce_time(np.array([4096.0, 32768.0, 524288.0, 2.0**21]), 2, 450e9, STAIRS)
    assert arr.tolist() == pytest.approx(got)
    assert [r[0] for r in STAIRS.regimes()] == [2.0**20, 65536.0, 16384.0]  # top one first


@settings(max_examples=200, deadline=None)
@given(
    us=st.lists(st.floats(0.0, 3000.0), min_size=3, max_size=3),
    etas=st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3),
    lat=st.floats(0.0, 2000.0), p=st.floats(1.0, 16.0), tp=st.sampled_from([2, 4, 8]),
    b1=st.floats(1.0, 1e9), b2=st.floats(1.0, 1e9),
)  # fmt: skip
def test_staircase_never_falls(
    us: list[float], etas: list[float], lat: float, p: float, tp: int, b1: float, b2: float
) -> None:
    lc = LinkConst(lat_us=lat, eta=0.05, p=p, ll_bytes=1e4, ll_us=us[0], ll_eta=etas[0],
                   mid_bytes=1e5, mid_us=us[1], mid_eta=etas[1],
                   steps=[(1e6, us[2], etas[2])])  # fmt: skip
    lo, hi = sorted((b1, b2))
    assert 0.0 <= allreduce_time(lo, tp, 56e9, lc) <= allreduce_time(hi, tp, 56e9, lc) * (1 + 1e-12)


def _consts(link: dict[str, LinkConst]) -> RooflineConstants:
    return RooflineConstants(family={"h100": "a100-80gb"}, link=link)


def test_borrowed_link_latencies_scale_with_the_link_bandwidth() -> None:
    """H100 (450 GB/s NVLink per direction) borrowing A100's (300 GB/s) constants: every latency
    × 300/450, so 10 µs → 6.667 µs and 60 µs → 40 µs; sizes and efficiencies kept."""
    a100 = LinkConst(lat_us=60.0, eta=0.5, ll_bytes=2048.0, ll_us=10.0)
    c = _consts({"a100-80gb/dgx/tp2": a100})
    h = CorrectedRooflinePerfModel(get_model("llama-2-7b"), get_gpu("h100"), 2, c)
    assert h.allreduce_s(1024.0) == pytest.approx(10e-6 * 300 / 450)
    x = 2.0**20 / (0.5 * 450e9)
    assert h.allreduce_s(2.0**20) == pytest.approx(40e-6 + x)
    a = CorrectedRooflinePerfModel(get_model("llama-2-7b"), get_gpu("a100-80gb"), 2, c)
    assert a.allreduce_s(1024.0) == pytest.approx(10e-6)  # its own: unscaled
    # a sweep of the node itself wins over the family's, unscaled
    own = _consts({"a100-80gb/dgx/tp2": a100, "h100/dgx/tp2": LinkConst(lat_us=42.0, eta=0.6)})
    h2 = CorrectedRooflinePerfModel(get_model("llama-2-7b"), get_gpu("h100"), 2, own)
    assert h2.allreduce_s(0.0) == pytest.approx(42e-6)
    # nothing fitted for the link: the defaults, unscaled
    pcie = CorrectedRooflinePerfModel(get_model("llama-2-7b"), get_gpu("rtx-pro-6000"), 2, c)
    assert pcie.allreduce_s(0.0) == pytest.approx(LinkConst().lat_us * 1e-6)


def test_corner_exponent_grows_with_the_weight_matrix() -> None:
    """p_k = 0.5 by N·K: N·K = 2²⁸ gives p + 0.5·log2(2²⁸/2²⁶) = p + 1; a tiny matrix is held
    at p = 1 (the roofline's sum)."""
    args = (256, 16384, 16384, 2, 989e12, 3.35e12, 0.73, 0.9, 1.0, 5.0)
    assert gemm_time(*args, 2.0, 64, 0.5, "nk") == gemm_time(*args, 3.0, 64)
    tiny = (256, 64, 64, 2, 989e12, 3.35e12, 0.73, 0.9, 1.0, 5.0)
    assert gemm_time(*tiny, 2.0, 64, 0.5, "nk") == gemm_time(*tiny, 1.0, 64)
    ms = np.array([64.0, 256.0, 4096.0])
    vec = gemm_time(ms, 16384, 16384, 2, 989e12, 3.35e12, 0.73, 0.9, 1.0, 5.0, 2.0, 64, 0.5, "nk")
    assert vec.tolist() == [gemm_time(int(m), *args[1:], 2.0, 64, 0.5, "nk") for m in ms]
    assert math.isfinite(float(vec[0]))


def test_the_link_fit_follows_a_staircase() -> None:
    """A synthetic sweep with three lower regimes (7 µs to 24 KiB, 25 µs to 256 KiB, 33 µs to
    2 MiB, then sqrt(40² + x²)) is recovered: the step's size between its knots."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from roofline_fit import _fit_link

    from tidal.hardware.opprofile import AllReduceOps

    true = LinkConst(lat_us=40.0, eta=0.6, p=2.0, ll_bytes=24576.0, ll_us=7.0,
                     mid_bytes=262144.0, mid_us=25.0, steps=[(2.0**21, 33.0, 0.0)])  # fmt: skip
    sizes = [int(2 ** (k / 3)) for k in range(30, 90)]
    us = [allreduce_time(float(b), 2, 450e9, true) * 1e6 for b in sizes]
    fit = _fit_link([AllReduceOps(link="dgx", tp=2, bytes=sizes, us=us)], 450e9)
    assert len(fit.steps) == 1
    assert 2.0**20 < fit.steps[0][0] <= 2.0**21
    assert fit.steps[0][1] == pytest.approx(33.0, rel=0.05)
    got = allreduce_time(np.array(sizes, dtype=float), 2, 450e9, fit) * 1e6
    assert np.max(np.abs(got / np.array(us) - 1)) < 0.05
