"""EB closed forms against the worked values of ebplus.md §2 (Qwen3-8B, H200 and RTX PRO 6000
calibrations of §1.1) and against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tidal.batching import eb_theory as ebt

# (α_p, β_p, α_d, β_d) in seconds, ebplus.md §1.1
H200 = (1.2786e-3, 24.853e-6, 8.9212e-3, 45.865e-6)
RTX = (4.6912e-3, 50.079e-6, 10.3760e-3, 103.881e-6)
# β_MB^e(r) = a + b r + c r² (ebplus.md §1.2)
MB_H200 = (2.494e-5, 5.193e-5, 1.478e-5)
MB_RTX = (6.2934e-5, 1.96893e-4, 9.899e-6)


def quad(c):
    return lambda r: c[0] + c[1] * r + c[2] * r * r


@pytest.mark.parametrize(
    ("mu_l", "mu_o", "th_h200", "th_rtx", "steps_h200", "steps_rtx"),
    [
        # ebplus.md §2.3 worked table (exact-CFR form, p0 = 1/μ_O)
        (128, 1024, 0.0165, 0.0291, 17, 30),
        (512, 512, 0.0233, 0.0409, 12, 21),
        (1024, 128, 0.0460, 0.0797, 6, 11),
        (512, 256, 0.0328, 0.0572, 8.5, 15),
    ],
)
def test_asymptotic_theta_matches_the_worked_table(
    mu_l, mu_o, th_h200, th_rtx, steps_h200, steps_rtx
):
    for cal, th, steps in ((H200, th_h200, steps_h200), (RTX, th_rtx, steps_rtx)):
        p0 = 1.0 / mu_o
        theta = ebt.theta_cfr(p0, cal[0], cal[2], exact=True)
        assert theta == pytest.approx(th, abs=6e-4)
        # it solves θ/(1−θ) + ln(1−θ) = −ln(1−p0)·α_p/α_d
        assert ebt.theta_lhs(theta) == pytest.approx(-math.log(1 - p0) * cal[0] / cal[2], rel=1e-6)
        # decode steps per cycle ≈ Λ·μ_O
        assert -math.log(1 - theta) * mu_o == pytest.approx(steps, rel=0.06)
        # small-θ approximation sqrt(2 p0 α_p/α_d) is within a few percent at these θ
        assert ebt.theta_small(p0, cal[0], cal[2]) == pytest.approx(theta, rel=0.06)


def test_theta_guards():
    assert ebt.theta_cfr(0.0, *H200[::2]) == ebt.THETA_HARD_MIN
    assert ebt.theta_cfr(1e-9, 1.0, 1.0) == ebt.THETA_HARD_MIN  # right side ≤ 1e-6
    assert ebt.theta_cfr(0.5, 1000.0, 1.0) == pytest.approx(0.99)  # clamp at the domain limit
    # the camera-ready form (p0) and the exact form (−ln(1−p0)) agree as p0 → 0
    a = ebt.theta_cfr(1e-3, 5e-3, 1e-2)
    b = ebt.theta_cfr(1e-3, 5e-3, 1e-2, exact=True)
    assert b > a
    assert b == pytest.approx(a, rel=1e-3)


def _throughput(k, n, p, cal):
    a_p, _, a_d, b_d = cal
    s = sum(ebt.tau(j, p, a_d, b_d) for j in range(n - k + 1, n + 1))
    return k / (s + a_p)


@pytest.mark.parametrize("cal", [H200, RTX])
@pytest.mark.parametrize(("n", "p"), [(40, 1 / 200), (64, 1 / 30), (128, 1 / 512), (25, 1 / 5)])
def test_exact_k_star_maximises_completions_per_cycle_time(cal, n, p):
    k = ebt.optimal_k(n, p, cal[0], cal[2], cal[3])
    rates = [_throughput(j, n, p, cal) for j in range(1, n)]
    # Proposition 1: k* is where one more completion stops paying for itself
    assert rates[k - 1] >= max(rates) * (1 - 1e-12) or k == max(1, n // 5)
    if k < n - 1:
        assert rates[k - 1] >= rates[k]


def test_exact_k_star_approaches_theta_n_when_n_is_small_against_one_over_p():
    # N ≪ 1/p: k*/N → θ* of the asymptotic form (§2.3 assumption)
    p, n = 1e-4, 400
    k = ebt.optimal_k(n, p, *H200[::2], H200[3])
    theta = ebt.theta_cfr(p, H200[0], H200[2])
    assert k / n == pytest.approx(theta, abs=2.5 / n)


def test_tau_of_zero_is_infinite_and_tau_is_the_expected_wait():
    assert ebt.tau(0, 0.1, 1.0, 1.0) == math.inf
    # j = 1: geometric wait of mean 1/p steps of cost α_d + β_d
    assert ebt.tau(1, 0.25, 2.0, 1.0) == pytest.approx(3.0 / 0.25)


def test_ifr_correction_by_hand():
    theta0, p0, eta, rho = 0.05, 0.002, 1e-7, 5.0
    lam = -math.log(1 - theta0)
    expected = (
        eta
        * (1 - theta0) ** 2
        / (p0**2 * theta0)
        * (lam * (theta0 / (1 - theta0) - lam / 2) + rho * (lam - theta0))
    )
    assert ebt.ifr_correction(theta0, p0, eta, rho) == pytest.approx(expected)
    assert ebt.ifr_correction(theta0, p0, 0.0, rho) == 0.0
    assert ebt.ifr_correction(theta0, p0, 1.0, rho) == pytest.approx(5 * theta0)  # cap


def test_memory_safe_n_matches_the_worked_examples():
    # ebplus.md §2.5: balanced workload, C ≈ 0.74 M tokens (H200) / 0.49 M (RTX) → 712 / 468
    th = ebt.theta_cfr(1 / 512, H200[0], H200[2], exact=True)
    assert ebt.memory_safe_n(740_000, th, 1 / 512, 512, 0.01) == 712
    th = ebt.theta_cfr(1 / 512, RTX[0], RTX[2], exact=True)
    assert ebt.memory_safe_n(490_000, th, 1 / 512, 512, 0.01) == 468
    # the logged decode-heavy controller state (p̂0 = 0.000475, θ0 = 0.01158): N̂* ≈ 307–324
    assert ebt.memory_safe_n(700_000, 0.01158, 0.000475, 128) == 307
    assert ebt.memory_safe_n(740_000, 0.01158, 0.000475, 128) == 324


def test_memory_safe_n_by_hand_and_bounds():
    c, th, p0, mu_l, eps = 100_000.0, 0.1, 0.01, 200.0, 0.05
    lam = -math.log(1 - th)
    d = mu_l + (1 - th) / (th * p0) * lam
    assert ebt.kv_per_slot(th, p0, mu_l) == pytest.approx(d)
    sigma = math.sqrt(2 * lam * (1 + (p0 * mu_l + lam / th) ** 2) / p0**2)
    n = ebt.memory_safe_n(c, th, p0, mu_l, eps)
    ell = math.log(1 / eps)
    # the largest N satisfying the CLT bound
    assert n * d + sigma * math.sqrt(n * ell) <= c
    assert (n + 1) * d + sigma * math.sqrt((n + 1) * ell) > c
    # the paper's supremum form: ⌊(C − ν ln(1/ε))/D⌋, ν = 1/(p0² μ_L)
    assert ebt.memory_safe_n_paper(c, th, p0, mu_l, eps) == math.floor(
        (c - ell / (p0**2 * mu_l)) / d
    )
    assert ebt.memory_safe_n(c, th, p0, mu_l, eps, n_cap=10) == 10
    assert ebt.memory_safe_n(c, 0.0, p0, mu_l, eps, n_cap=77) == 77
    # D(θ→0) → μ_L + 1/p0 (every slot holds a whole request)
    assert ebt.kv_per_slot(1e-6, p0, mu_l) == pytest.approx(mu_l + 1 / p0, rel=1e-5)


@pytest.mark.parametrize(
    ("cal", "mb", "mu_l", "mu_o", "n", "theta", "lhs", "rhs", "winner"),
    [
        # ebplus.md §2.6 worked table
        (H200, MB_H200, 512, 256, 32, None, 1.2e-5, 8.3e-5, "mb"),
        (H200, MB_H200, 512, 256, 2048, 0.7, 1.2e-5, 2.3e-6, "eb"),
        (H200, MB_H200, 512, 512, 1024, None, 1.92e-5, 3.8e-6, "eb"),
        (RTX, MB_RTX, 512, 512, 1024, None, 8.69e-5, 3.0e-6, "eb"),
        (RTX, MB_RTX, 512, 256, 256, None, 6.17e-5, 8.2e-6, "eb"),
    ],
)
def test_crossover_matches_the_worked_table(cal, mb, mu_l, mu_o, n, theta, lhs, rhs, winner):
    if theta is None:
        theta = ebt.theta_cfr(1 / mu_o, cal[0], cal[2], exact=True)
    x = ebt.crossover(mu_l, mu_o, n, theta, *cal, quad(mb))
    assert x.lhs == pytest.approx(lhs, rel=0.03)
    assert x.rhs == pytest.approx(rhs, rel=0.03)
    assert x.winner == winner
    # consistency: Δ = LHS − RHS = c_MB − c_EB
    assert x.delta == pytest.approx(x.c_mb - x.c_eb)


def test_logged_switch_back_to_mb_is_reproduced():
    # KVA log (ebplus.md §2.6): H200, r = 0.630, N_obs = 219 → LHS 2.51e-5 < RHS 3.88e-5
    mu_o = 0.630 / (1 - 0.630) * 512
    x = ebt.crossover(512, mu_o, 219, 0.7, *H200, quad(MB_H200))
    assert x.lhs == pytest.approx(2.51e-5, rel=0.02)
    assert x.winner == "mb"


def test_crossover_concurrency_is_where_delta_changes_sign():
    th = ebt.theta_cfr(1 / 256, H200[0], H200[2], exact=True)
    nx = ebt.crossover_concurrency(512, 256, th, *H200, quad(MB_H200))
    assert nx is not None
    below = ebt.crossover(512, 256, nx * 0.95, th, *H200, quad(MB_H200))
    above = ebt.crossover(512, 256, nx * 1.05, th, *H200, quad(MB_H200))
    assert below.winner == "mb"
    assert above.winner == "eb"
    # no contention (β_MB^e = β_EB^w): MB wins at every N
    none = ebt.crossover_concurrency(512, 256, th, *H200, lambda r: ebt.beta_eb_w(r, *H200[1::2]))
    assert none is None


def test_threshold_decode_share_from_the_fits():
    # ebplus.md §1.2: β_MB^e(r) crosses β_d at r ≈ 0.205 (RTX PRO 6000) and ≈ 0.36 (H200)
    assert ebt.threshold_decode_share(quad(MB_RTX), RTX[3]) == pytest.approx(0.205, abs=0.002)
    assert ebt.threshold_decode_share(quad(MB_H200), H200[3]) == pytest.approx(0.36, abs=0.01)
    assert ebt.threshold_decode_share(lambda r: 1.0, 2.0) is None
    assert ebt.threshold_decode_share(lambda r: 3.0, 2.0) == 0.0


# --------------------------------------------------------------------------- MB's own memory bound
def test_clt_batch_size_by_hand():
    assert ebt.clt_batch_size(1000.0, 10.0, 0.0) == 100  # no variance: ⌊C/D⌋
    assert ebt.clt_batch_size(1000.0, 10.0, 0.0, n_cap=64) == 64
    c, d, var, eps = 50_000.0, 300.0, 90_000.0, 0.01
    n = ebt.clt_batch_size(c, d, var, eps)
    ell = math.log(1 / eps)
    assert n * d + math.sqrt(var * n * ell) <= c < (n + 1) * d + math.sqrt(var * (n + 1) * ell)
    # memory_safe_n is this bound with EB's D(θ) and σ²(θ)
    th, p0, mu_l = 0.05, 1 / 300, 100.0
    lam = -math.log(1 - th)
    var_eb = 2 * lam * (1 + (p0 * mu_l + lam / th) ** 2) / p0**2
    assert ebt.memory_safe_n(c, th, p0, mu_l, eps) == ebt.clt_batch_size(
        c, ebt.kv_per_slot(th, p0, mu_l), var_eb, eps
    )


def test_stationary_occupancy_by_hand():
    # outputs 1 or 3 with equal probability: m1 = 2, m2 = 5, m3 = 14
    mean, var = ebt.stationary_occupancy(10.0, 4.0, 2.0, 5.0, 14.0)
    assert mean == pytest.approx(10.0 + 5.0 / 4.0)
    assert var == pytest.approx(4.0 + 14.0 / 6.0 - (5.0 / 4.0) ** 2)


def test_stationary_occupancy_is_the_time_average_of_a_refilled_slot():
    # renewal reward, exactly: a slot holding a request of length O for O steps holds the
    # prompt plus a = 0…O−1 (or 1…O) generated tokens; the formula sits midway between the two
    outs = np.array([3, 7, 7, 20, 41])
    m1, m2, m3 = (float((outs**j).mean()) for j in (1, 2, 3))
    mean, _ = ebt.stationary_occupancy(50.0, 0.0, m1, m2, m3)
    lo = 50.0 + sum(o * (o - 1) / 2 for o in outs) / outs.sum()
    hi = 50.0 + sum(o * (o + 1) / 2 for o in outs) / outs.sum()
    assert mean == pytest.approx((lo + hi) / 2)


def test_stationary_occupancy_of_geometric_outputs_is_the_papers_d_at_theta_zero():
    p, mu_l = 1 / 256, 512.0
    m1, m2, m3 = 1 / p, (2 - p) / p**2, (6 - 6 * p + p * p) / p**3
    mean, _ = ebt.stationary_occupancy(mu_l, 0.0, m1, m2, m3)
    assert mean == pytest.approx(mu_l + 1 / p - 0.5)
    assert ebt.kv_per_slot(1e-6, p, mu_l) == pytest.approx(mu_l + 1 / p, rel=1e-5)
    # uniform ±50 % outputs occupy ≈ 0.54·μ_O, not μ_O: the CFR form overstates MB's need
    outs = np.arange(512, 1537, dtype=float)
    m = [float((outs**j).mean()) for j in (1, 2, 3)]
    mean_u, _ = ebt.stationary_occupancy(128.0, 0.0, *m)
    assert mean_u - 128.0 == pytest.approx(1024 * (1 + 1 / 12) / 2, abs=1.0)


def test_cohort_occupancy_by_hand():
    # outputs {2, 4}, prompt 10 (no variance): at age 1 both run (11 tokens each); at age 3
    # only the 4-token one (13 tokens) with probability ½
    mean, var = ebt.cohort_occupancy(10.0, 0.0, np.array([4, 2]))
    assert mean.tolist() == pytest.approx([11.0, 6.5])
    assert var.tolist() == pytest.approx([0.0, 13.0**2 * 0.5 - 6.5**2])


def test_mb_safe_n_is_the_tighter_of_the_steady_state_and_cohort_bounds():
    c, eps = 729_152.0, 0.01
    rng = np.random.default_rng(0)
    for mu_l, var_l, outs in (
        (128.0, 64**2 / 3, rng.integers(512, 1537, 500)),  # decode-heavy, ±50 %
        (512.0, 0.0, rng.integers(192, 321, 500)),  # Table 5 concurrency mix, ±25 %
    ):
        m = [float((outs.astype(float) ** j).mean()) for j in (1, 2, 3)]
        n_s = ebt.stationary_safe_n(c, mu_l, var_l, *m, eps)
        n_c = ebt.cohort_safe_n(c, mu_l, var_l, outs, eps)
        assert ebt.mb_safe_n(c, mu_l, var_l, outs, eps) == min(n_s, n_c)
        mean, var = ebt.cohort_occupancy(mu_l, var_l, outs)
        assert n_c == min(
            ebt.clt_batch_size(c, float(d), float(v), eps) for d, v in zip(mean, var, strict=True)
        )
        ell = math.log(1 / eps)
        # the cohort bound holds at every age of a cohort admitted at once
        assert np.all(n_c * mean + np.sqrt(var * n_c * ell) <= c)
    # short outputs after long prompts: a cohort's synchronised growth binds
    outs = rng.integers(192, 321, 500)
    m = [float((outs.astype(float) ** j).mean()) for j in (1, 2, 3)]
    assert ebt.cohort_safe_n(c, 512.0, 0.0, outs) < ebt.stationary_safe_n(c, 512.0, 0.0, *m)
    # both far above EB's N̂* for the same decode-heavy window (CFR occupancy, θ ≈ 0.1)
    assert ebt.mb_safe_n(c, 128.0, 0.0, rng.integers(512, 1537, 500)) > 1.5 * ebt.memory_safe_n(
        c, 0.098, 1 / 1024, 128.0
    )


def test_mb_interference_counts_only_the_steps_that_mix():
    # ΔI(x) = x (s/token at decode share x), μ_L = 512, μ_O = 256
    def di(x: float) -> float:
        return x

    r = 256 / 768
    # ≥ 1 completion per step (N − 1 ≥ μ_O): every step mixes at the workload's share
    assert ebt.mb_interference(512, 256, 2048, di) == pytest.approx(r)
    assert ebt.mb_interference(512, 256, 257, di) == pytest.approx(r)  # continuous at the edge
    # N = 33: one mixed step per request, 512 prefill + 32 decode tokens at r_s = 32/544
    assert ebt.mb_interference(512, 256, 33, di) == pytest.approx(32 / 544 * 544 / 768)
    assert ebt.mb_interference(512, 256, 1, di) == 0.0  # a lone request never mixes
    # in the crossover: the same LHS at high N, a smaller one at low N (with the paper's ΔI > 0)
    args = (512.0, 256.0)
    costs = (0.02, 1e-4, 0.01, 2e-4)

    def bm(x: float) -> float:
        return ebt.beta_eb_w(x, costs[1], costs[3]) + 1e-5 * (1 + x)

    for n, same in ((2048, True), (32, False)):
        paper = ebt.crossover(*args, n, 0.3, *costs, bm)
        steps = ebt.crossover(*args, n, 0.3, *costs, bm, mixed_steps=True)
        assert steps.rhs == paper.rhs
        assert (steps.lhs == pytest.approx(paper.lhs)) is same
        if not same:
            assert steps.lhs == pytest.approx(1e-5 * (1 + 31 / 543) * 543 / 768)
