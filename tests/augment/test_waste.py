"""INFERCEPT's waste formulas on hand-computed cases, and the min-waste choices they drive."""

from __future__ import annotations

import pytest

from tests.augment.helpers import MS, make, run, spec, workload
from tidal.augment.value import DISCARD, PRESERVE, SWAP, CostEnv, min_waste_policy
from tidal.augment.waste import (
    IterationProfile,
    waste_discard,
    waste_discard_chunked,
    waste_preserve,
    waste_swap,
    waste_swap_budgeted,
)
from tidal.hardware.perf import LinearPerfModel

# INFERCEPT's GPT-J-6B profile (augserve.md §2.4): It(N) = 0.0463 ms · N + 10 ms, N_sat = 384
GPTJ = IterationProfile(alpha_s=0.0463e-3, gamma_s=10e-3, saturation_tokens=384)


def test_preserve_is_remaining_call_time_times_context():
    assert waste_preserve(2.0, 1000) == 2000.0
    assert waste_preserve(-0.5, 1000) == 0.0  # the call overran its prediction


def test_discard_paper_form():
    # T_fwd = 50 ms, C = 1000, C_other = 5000: 0.05·1000 + 0.05·5000
    assert waste_discard(1000, 5000, 0.05) == pytest.approx(300.0)


def test_discard_chunked_form_by_hand():
    # c_h = 384 − 84 = 300; n = ⌈1000/300⌉ − 1 = 3 full chunks; last = 1000 mod 300 = 100
    # f_s = 0.0463e-3·384 + 0.010 = 0.0277792 s; f_ch = 0.0463e-3·300 = 0.01389 s
    # W = f_s·300·3·4/2 + f_ch·3·20000 + 0.0463e-3·100·(20000 + 100)
    #   = 50.00256 + 833.4 + 93.063 = 976.46556
    assert waste_discard_chunked(1000, 84, 20_000, GPTJ) == pytest.approx(976.46556)
    # a saturated batch leaves one token per iteration: n = C − 1 chunks of 1
    f_s = GPTJ.saturated_s
    expected = f_s * 1 * 9 * 10 / 2 + 0.0463e-3 * 1 * 9 * 500 + 0.0
    assert waste_discard_chunked(10, 400, 500, GPTJ) == pytest.approx(expected)


def test_swap_forms():
    # paper: 2 · (1000 tokens · 20 µs) · 30000 stalled tokens
    assert waste_swap(1000, 2e-5, 30_000) == pytest.approx(1200.0)
    # budgeted: own context held while it drains out and fills back: C · C · t_token
    assert waste_swap_budgeted(1000, 2e-5) == pytest.approx(20.0)


def test_profile_fitted_to_a_linear_model_is_exact():
    perf = LinearPerfModel(0.010, 5e-5, 0.010, 5e-5, kappa=0.0)
    prof = IterationProfile.from_perf(perf, 384)
    assert prof.alpha_s == pytest.approx(5e-5)
    assert prof.gamma_s == pytest.approx(0.010)
    assert prof.saturated_s == pytest.approx(0.010 + 5e-5 * 384)


def test_stage_one_policy_is_the_argmin_of_the_paper_forms():
    env = CostEnv(GPTJ, 384, 2e-5, other_ctx=30_000)
    # It(384) = 27.78 ms; T_fwd(1000) = 3 iterations = 83.34 ms
    # W_D = 0.08334·31000 ≈ 2583; W_S = 2·0.02·30000 = 1200; W_P = T·1000
    assert min_waste_policy(1000, 0.5, env) == (PRESERVE, pytest.approx(500.0))
    assert min_waste_policy(1000, 20.0, env)[0] == SWAP
    no_host = CostEnv(GPTJ, 384, 2e-5, other_ctx=30_000, swap_ok=False)
    assert min_waste_policy(1000, 20.0, no_host)[0] == DISCARD


@pytest.mark.parametrize(
    ("call_ms", "host_blocks", "outcome"),
    [
        # unit_perf profile (N_sat 64): α = 1 µs, γ = 1 ms; context 1002 tokens (63 blocks).
        # W_D(chunked, idle batch) = 1.064e-3·64·15·16/2 + 1e-6·42·42 ≈ 8.17; W_S = 1002²·1e-6
        # ≈ 1.004; W_P = T·1002.
        (10_000.0, 10_000, "intercepts_swapped"),  # long call, host free → swap
        (10_000.0, 0, "intercepts_discarded"),  # long call, no host → W_D < W_P → discard
        (0.5, 10_000, "intercepts_preserved"),  # 0.5 ms call: W_P ≈ 0.5 < W_S, W_D → keep
    ],
)
def test_infercept_min_waste_choice(call_ms, host_blocks, outcome):
    s = make("infercept", host_blocks=host_blocks, predictor="oracle")
    rs = workload([0.0], [1000], [spec((3, call_ms, 4), final=2)])
    rec, _ = run(rs, s)
    m = s.extra_metrics()
    assert m[outcome] == 1
    assert rec.output_tokens[0] == 5
    assert s.kv.num_free_host_blocks == s.kv.num_host_blocks


def test_preserved_short_call_wastes_its_context_for_the_call():
    """Without host space a 0.5 ms call is kept on the GPU: 63 blocks idle for 0.5 ms."""
    s = make("infercept", host_blocks=0, predictor="noisy", predictor_sigma=0.0)
    rs = workload([0.0], [1000], [spec((3, 0.5, 4), final=2)])
    run(rs, s)
    assert s.extra_metrics()["intercepts_preserved"] == 1
    assert s.augmentation.idle_block_ns == 63 * round(0.5 * MS)
