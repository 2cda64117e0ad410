"""Catalog arithmetic against published numbers and the EB paper's calibrations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tidal.core.errors import ConfigError
from tidal.hardware.calibration import build_perf_model, derive_linear
from tidal.hardware.corrected import CorrectedRooflinePerfModel
from tidal.hardware.gpus import get_gpu
from tidal.hardware.memory import plan_memory
from tidal.hardware.models import get_model
from tidal.hardware.perf import LinearPerfModel, RooflinePerfModel
from tidal.hardware.roofline import roofline_token_throughput


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        ("llama-2-7b", 6.74),
        ("llama-2-13b", 13.02),
        ("llama-2-70b", 68.98),
        ("llama-3.1-8b", 8.03),
        ("llama-3.1-70b", 70.55),
        ("qwen3-8b", 8.19),
        ("qwen3-30b-a3b", 30.5),
        ("mistral-7b", 7.24),
        ("gpt-j-6b", 6.05),
    ],
)
def test_parameter_counts_match_published_sizes(name, billions):
    assert get_model(name).num_params / 1e9 == pytest.approx(billions, abs=0.06)


def test_qwen3_8b_per_token_quantities_match_the_spec():
    m = get_model("qwen3-8b")
    # ebplus.md §1.1: ≈7.57 B matmul params incl. LM head, KV 147,456 B per token.
    assert (m.layer_matmul_params + m.embedding_params) / 1e9 == pytest.approx(7.57, abs=0.01)
    assert m.kv_bytes_per_token == 147_456
    assert m.flops_per_token / 1e9 == pytest.approx(15.1, abs=0.1)


def test_kv_is_replicated_when_tp_exceeds_kv_heads():
    m = get_model("llama-3.1-70b")  # 8 KV heads
    assert m.kv_bytes_per_token_per_gpu(8) == m.kv_bytes_per_token / 8
    assert m.kv_bytes_per_token_per_gpu(16) == m.kv_bytes_per_token / 8


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ConfigError, match="h100"):
        get_gpu("h1000")
    with pytest.raises(ConfigError, match="qwen3-8b"):
        get_model("gpt-5")


def test_bandwidth_what_if_gpu():
    g = get_gpu("rtx-pro-6000@0.864")
    assert g.mem_bw_tbs == 0.864
    assert g.bf16_tflops == get_gpu("rtx-pro-6000").bf16_tflops


@pytest.mark.parametrize(
    ("gpu", "beta_p_us", "beta_d_us"), [("h200", 24.853, 45.865), ("rtx-pro-6000", 50.079, 103.881)]
)
def test_roofline_marginals_reproduce_the_measured_qwen3_constants(gpu, beta_p_us, beta_d_us):
    # ebplus.md §1.4: η_F = 0.6, η_B = 0.8 put β_p and β_d within a few % of the measurements.
    fit = derive_linear(RooflinePerfModel(get_model("qwen3-8b"), get_gpu(gpu)))
    assert fit.beta_p * 1e6 == pytest.approx(beta_p_us, rel=0.05)
    assert fit.beta_d * 1e6 == pytest.approx(beta_d_us, rel=0.06)


def test_the_papers_constants_are_used_where_they_exist():
    """``linear`` and ``auto-vidur`` take the EB paper's constants (``auto`` reads the tables)."""
    m = get_model("qwen3-8b")
    assert build_perf_model("auto-vidur", m, get_gpu("h200")).step_ns(8, 4096) == (
        build_perf_model("linear", m, get_gpu("h200")).step_ns(8, 4096)
    )
    p = build_perf_model("linear", m, get_gpu("h200"))
    assert isinstance(p, LinearPerfModel)
    assert p.alpha_p == 1.2786e-3
    # A pure decode of 256 requests at a 512-token context: α_d + β_d·256 (the paper's fit).
    assert p.step_ns(256, 256 * 512) == pytest.approx((8.9212e-3 + 45.865e-6 * 256) * 1e9, abs=2)
    # no calibration and no measured profile for Qwen3-8B on H100: the engine tables, and in
    # the order before issue 28 (auto-vidur) the corrected roofline
    assert build_perf_model("auto", m, get_gpu("h100")).name == "engine"
    h100 = build_perf_model("auto-vidur", m, get_gpu("h100"))
    assert isinstance(h100, CorrectedRooflinePerfModel)
    assert isinstance(build_perf_model("roofline", m, get_gpu("h100")), RooflinePerfModel)


def test_roofline_prefill_8192_tokens_on_h200_is_compute_bound():
    # ebplus.md §1.4 worked example: 2·7.57e9·8192 / (0.6·989e12) ≈ 209 ms (+ attention).
    r = RooflinePerfModel(get_model("qwen3-8b"), get_gpu("h200"))
    t = r.step_ns(0, 0, 8192, 8192 * 8192, 8192, 1) / 1e6
    assert 209 < t < 235


def test_tensor_parallel_speeds_up_and_pays_all_reduce():
    m, g = get_model("llama-3.1-70b"), get_gpu("h100")
    t1 = RooflinePerfModel(m, g, 1).step_ns(64, 64 * 1024)
    t4 = RooflinePerfModel(m, g, 4).step_ns(64, 64 * 1024)
    assert t4 < t1 / 2
    assert t4 > t1 / 4  # the all-reduce and the fixed overhead do not shrink


def test_decode_run_is_bit_identical_to_stepwise_calls():
    for p in (
        RooflinePerfModel(get_model("qwen3-30b-a3b"), get_gpu("l40s"), 2),
        build_perf_model("linear", get_model("qwen3-8b"), get_gpu("rtx-pro-6000")),
    ):
        run = p.decode_run_ns(37, 37 * 900, 500)
        assert run.tolist() == [p.step_ns(37, 37 * 900 + 37 * i) for i in range(500)]
        c, a = p.decode_affine(37)
        assert [
            max(1, math.floor((c + a * (37 * 900 + 37 * i)) * 1e9 + 0.5)) for i in range(500)
        ] == run.tolist()


def test_model_that_does_not_fit_states_the_numbers():
    with pytest.raises(ConfigError, match=r"does not fit.*weights 128\.48 GiB"):
        plan_memory(get_model("llama-2-70b"), get_gpu("l40s"))
    plan = plan_memory(get_model("llama-3.1-8b"), get_gpu("h100"))
    # vLLM's plan (worked by hand in test_memory.py): 54.57 GiB / 131,072 B ≈ 447 k tokens.
    assert plan.kv_capacity_tokens == pytest.approx(447_000, rel=0.01)


def test_roofline_bound_caps_a_saturated_simulation():
    from tests.conftest import make_scheduler, request_set, simulate
    from tidal.core.metrics import summarize

    m, g = get_model("llama-3.1-8b"), get_gpu("h100")
    n = 400
    rs = request_set(np.zeros(n), np.full(n, 1000), np.full(n, 200))
    plan = plan_memory(m, g)
    s = make_scheduler(plan.num_blocks, 16, 8192, 256)
    rec, _, _ = simulate(rs, s, RooflinePerfModel(m, g))
    achieved = summarize(rec.columns(), 1, 1)["token_throughput"]
    bound = roofline_token_throughput(
        m, g, 1, rs.prompt_len, rs.output_len, plan.kv_capacity_tokens, 256
    )
    assert achieved < bound
    assert achieved > 0.3 * bound  # η_F = 0.6, η_B = 0.8 and overheads: not far below
