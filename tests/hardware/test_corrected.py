"""Corrected roofline: the GEMM formula's limits, exact affine decode, fitted constants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.hardware.corrected import (
    CorrectedRooflinePerfModel,
    LinkConst,
    RooflineConstants,
    allreduce_time,
    bundled_constants,
    gemm_time,
    layer_gemms,
    link_kind,
)
from tidal.hardware.gpus import get_gpu
from tidal.hardware.interp import Curve, binned_median
from tidal.hardware.models import get_model
from tidal.hardware.opprofile import deployment


def test_gemm_time_tends_to_its_compute_and_bandwidth_bounds() -> None:
    f, bw, k, n = 312e12, 2.039e12, 8192, 8192
    # huge M: compute at η_F (the M_½ ramp vanishes), p-norm → max
    m = 1e7
    t = gemm_time(m, k, n, 2, f, bw, 0.7, 0.8, 50.0, 0.0, 8.0)
    assert t == pytest.approx(2 * m * n * k / (0.7 * f), rel=0.02)
    # M = 1: weight read at η_B plus the launch floor
    t1 = gemm_time(1, k, n, 2, f, bw, 0.7, 0.8, 1.0, 4.0, 8.0)
    assert t1 == pytest.approx(4e-6 + 2 * (k + k * n + n) / (0.8 * bw), rel=0.01)
    # arrays give the same values as scalars
    ms = np.array([1.0, 64.0, 4096.0])
    arr = gemm_time(ms, k, n, 2, f, bw, 0.7, 0.8, 50.0, 3.0, 2.0)
    assert arr.tolist() == [gemm_time(x, k, n, 2, f, bw, 0.7, 0.8, 50.0, 3.0, 2.0) for x in ms]


def test_layer_gemms_follow_the_megatron_split() -> None:
    m = get_model("llama-2-70b")  # 64 q / 8 kv heads, d 128, hidden 8192, inter 28672
    assert layer_gemms(m, 8) == [
        ("attn_pre_proj", 8192, (8 + 2 * 1) * 128),
        ("attn_post_proj", 8 * 128, 8192),
        ("mlp_up_proj", 8192, 2 * 28672 // 8),
        ("mlp_down_proj", 28672 // 8, 8192),
    ]
    assert link_kind(get_gpu("h100")) == "dgx"
    assert link_kind(get_gpu("l40s")) == "pcie"
    assert link_kind(get_gpu("a40")) == "pairwise_nvlink"


def test_decode_is_exactly_affine_in_the_context() -> None:
    p = CorrectedRooflinePerfModel(get_model("llama-3.1-8b"), get_gpu("h200"), 2)
    c, a = p.decode_affine(64)  # type: ignore[misc]
    ctx = np.array([0, 7, 64 * 4000, 10**7], dtype=np.int64)
    assert (c + a * ctx).tolist() == [p.step_seconds(64, int(x), 0, 0, 0, 0) for x in ctx]
    assert p.decode_run_ns(64, 5000, 50).tolist() == [
        p.step_ns(64, 5000 + 64 * k) for k in range(50)
    ]
    assert p.step_seconds(0, 0, 0, 0, 0, 0) == 0.0


def test_gpus_without_data_borrow_their_familys_constants() -> None:
    c = bundled_constants()
    assert set(c.gpu) == {"a100-80gb", "h100", "a40"}
    assert c.gpu_const("h200") == c.gpu["h100"]
    assert c.gpu_const("l40s") == c.gpu["a40"]
    assert c.gpu_const("h100@2TBs") == c.gpu["h100"]
    # a borrowed sweep is the family's fitted with rule R1's caps (session 24); its own GPU
    # keeps the fit of what it measured
    assert c.link_const("h200", "dgx", 4) == c.link_borrowed["h100/dgx/tp4"]
    assert c.link_const("h100", "dgx", 4) == c.link["h100/dgx/tp4"]
    assert c.link_const("h100@2TBs", "dgx", 4) == c.link["h100/dgx/tp4"]
    own_only = c.model_copy(update={"link_borrowed": {}})  # a constants file from before
    assert own_only.link_const("h200", "dgx", 4) == c.link["h100/dgx/tp4"]
    assert 0.5 < c.gpu["a100-80gb"].eta_bw <= 1.0
    assert 0.5 < c.gpu["h100"].eta_flops <= 1.0
    empty = RooflineConstants()  # defaults load without a fit
    assert CorrectedRooflinePerfModel(get_model("qwen3-8b"), get_gpu("h100"), 1, empty).step_ns(
        8, 8000) > 0  # fmt: skip


@pytest.mark.parametrize(
    ("gpu", "model", "tp"),
    [("a100-80gb", "llama-2-7b", 1), ("h100", "llama-2-70b", 4), ("a100-80gb", "qwen-72b", 8)],
)
def test_kernel_time_is_near_the_measured_sum(gpu: str, model: str, tp: int) -> None:
    """The bundled fit against the kernel sums it was fitted on (held-out numbers are in
    BENCHMARKS.md): decode and prefill steps within 20 %."""
    m = get_model(model)
    dep = deployment(gpu, model, tp)
    assert dep is not None
    p = CorrectedRooflinePerfModel(m, get_gpu(gpu), tp)
    lin = dep.linear
    ar = None
    if tp > 1:
        assert dep.all_reduce is not None
        ar = Curve(*binned_median(dep.all_reduce.bytes, dep.all_reduce.us))
    for t in (8, 32, 1024, 4096):
        i = lin.tokens.index(t)
        meas = m.num_layers * sum(v[i] for v in lin.layer_us.values()) + lin.step_us["emb"][i]
        if ar is not None:
            meas += 2 * m.num_layers * ar.at(t * m.hidden_size * 2)
        pred = p.kernel_seconds(t, 0, 0, attention=False) * 1e6
        assert pred == pytest.approx(meas, rel=0.2)


def test_allreduce_time_by_hand() -> None:
    """Two NCCL protocols: 8 µs flat up to 16 KiB; past it sqrt(40² + x²) µs with the ring
    transfer x = 2·(2−1)/2 · 2²⁰ B / (0.5 · 450 GB/s) = 4.660 µs at TP 2."""
    lc = LinkConst(lat_us=40.0, eta=0.5, p=2.0, ll_bytes=16384.0, ll_us=8.0)
    assert allreduce_time(8192.0, 2, 450e9, lc) == pytest.approx(8e-6)
    x = 2**20 / (0.5 * 450e9)
    assert allreduce_time(float(2**20), 2, 450e9, lc) == pytest.approx((40e-6**2 + x**2) ** 0.5)
    old = LinkConst(lat_us=40.0, eta=0.5)  # p = 1, no low-latency regime: latency + transfer
    assert allreduce_time(float(2**20), 2, 450e9, old) == pytest.approx(40e-6 + x)
    arr = allreduce_time(np.array([8192.0, 2.0**20]), 2, 450e9, lc)
    assert arr == pytest.approx([8e-6, (40e-6**2 + x**2) ** 0.5])


@settings(max_examples=200, deadline=None)
@given(
    lat=st.floats(0.0, 200.0), eta=st.floats(0.01, 1.5), p=st.floats(1.0, 16.0),
    ll_bytes=st.floats(0.0, 1e7), ll_us=st.floats(0.0, 300.0), ll_eta=st.floats(0.0, 1.0),
    tp=st.sampled_from([2, 4, 8]), b1=st.floats(1.0, 1e9), b2=st.floats(1.0, 1e9),
)  # fmt: skip
def test_allreduce_time_never_falls_as_the_message_grows(
    lat: float, eta: float, p: float, ll_bytes: float, ll_us: float, ll_eta: float, tp: int,
    b1: float, b2: float,
) -> None:  # fmt: skip
    lc = LinkConst(lat_us=lat, eta=eta, p=p, ll_bytes=ll_bytes, ll_us=ll_us, ll_eta=ll_eta)
    lo, hi = sorted((b1, b2))
    t_lo, t_hi = allreduce_time(lo, tp, 450e9, lc), allreduce_time(hi, tp, 450e9, lc)
    assert 0.0 <= t_lo <= t_hi * (1 + 1e-12)


def test_the_link_fit_finds_the_low_latency_protocol() -> None:
    """A synthetic sweep from the two-protocol form (7 µs up to 24 KiB, then sqrt(40² + x²))
    is recovered: threshold between the knots around it, latencies within 5 %."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from roofline_fit import _fit_link

    from tidal.hardware.opprofile import AllReduceOps

    true = LinkConst(lat_us=40.0, eta=0.6, p=2.0, ll_bytes=24576.0, ll_us=7.0)
    sizes = [int(2 ** (k / 4)) for k in range(40, 104)]
    us = [allreduce_time(float(b), 2, 450e9, true) * 1e6 for b in sizes]
    fit = _fit_link([AllReduceOps(link="dgx", tp=2, bytes=sizes, us=us)], 450e9)
    assert 16384 <= fit.ll_bytes < 32768
    assert fit.ll_us == pytest.approx(7.0, rel=0.05)
    assert fit.lat_us == pytest.approx(40.0, rel=0.05)


def test_rule_r1_caps_a_smaller_group_at_the_larger_groups_time() -> None:
    """Rule R1 (``bench/roofline_fit.tp_capped``): from the largest group down, each sample is
    capped at the capped median of its ¼-octave bin one group size up. By hand: bins 2¹¹
    (2048 B) and 2¹⁴ (16384 B); TP 8 (30, 40) µs stays; TP 4 (20, 60) → (20, 40); TP 2 (46, 35)
    → (20, 35); a size only TP 2 has (2¹⁸) is not capped; another link kind is independent."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from roofline_fit import tp_capped

    from tidal.hardware.opprofile import AllReduceOps, GPUProfile

    def ar(tp: int, us: list[float], link: str = "dgx", extra: bool = False) -> AllReduceOps:
        sizes = [2048, 16384, *([262144] if extra else [])]
        return AllReduceOps(link=link, tp=tp, bytes=sizes, us=us)  # type: ignore[arg-type]

    prof = GPUProfile(gpu="a100-80gb", source="test", all_reduce=[
        ar(2, [46.0, 35.0, 99.0], extra=True), ar(4, [20.0, 60.0]), ar(8, [30.0, 40.0]),
        ar(2, [70.0, 70.0], link="pcie"), ar(4, [10.0, 10.0], link="pairwise_nvlink"),
    ])  # fmt: skip
    got = {(a.link, a.tp): a.us for a in tp_capped(prof).all_reduce}
    assert got[("dgx", 8)] == [30.0, 40.0]
    assert got[("dgx", 4)] == [20.0, 40.0]
    assert got[("dgx", 2)] == [20.0, 35.0, 99.0]
    assert got[("pcie", 2)] == [70.0, 70.0]


def test_rule_r1_on_the_a100_node_by_hand() -> None:
    """Vidur's A100 DGX sweep: TP 2 takes 46 µs at 10,240 B, TP 4 16 µs (TP 8: 25 µs) — R1
    makes TP 2's sample 16 µs; TP 2's 2,048-B sample (10 µs, under TP 4's 61) stays."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from roofline_fit import tp_capped

    from tidal.hardware.opprofile import bundled_profiles

    a100 = next(p for p in bundled_profiles() if p.gpu == "a100-80gb")
    raw = {a.tp: dict(zip(a.bytes, a.us, strict=True)) for a in a100.all_reduce
           if a.link == "dgx"}  # fmt: skip
    capped = {a.tp: dict(zip(a.bytes, a.us, strict=True)) for a in tp_capped(a100).all_reduce
              if a.link == "dgx"}  # fmt: skip
    assert (raw[2][10240], raw[4][10240], raw[8][10240]) == (46.0, 16.0, 25.0)
    assert capped[2][10240] == 16.0
    assert capped[2][2048] == raw[2][2048] == 10.0
