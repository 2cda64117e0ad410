"""EB⁺: the crossover selector (hysteresis, cooldown, drain filter, surge trigger, demand EMA),
MB↔EB transitions over a shared running set, and EB⁺ against MB and EB (ebplus.md §3.3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.batching.eb_helpers import H200_COSTS, make_eb
from tests.batching.eb_helpers import run_closed_loop as _run
from tests.conftest import make_request, request_set, simulate, unit_perf
from tidal.batching import eb_theory
from tidal.batching.eb import DECODE
from tidal.batching.ebplus import EBPlus
from tidal.core.clock import VirtualClock
from tidal.engine.build import build_scheduler
from tidal.engine.engine import Engine
from tidal.engine.executor import ModelledExecutor
from tidal.engine.scheduler import Scheduler


def make_plus(**opts):
    return make_eb(num_blocks=20_000, token_budget=4096, max_seqs=1024, batching="ebplus", **opts)


def primed(s, mu_l=512.0, mu_o=256.0, theta=0.7, n_obs=2048.0):
    s.policy.ctl.stats.initialized = True
    s.policy.ctl.stats.mu_l, s.policy.ctl.stats.mu_o = mu_l, mu_o
    s.policy.ctl.theta = theta
    s.policy.n_obs = n_obs
    s.policy.demand = int(n_obs)  # the load is steady (not ebbing)
    return s


def signal_of(s) -> float:
    """Δ(N) by hand: MB at min(N_obs, N_max, N_MB), EB's k̂ = θ·min(N_obs, N̂*, N_max) (the default
    ``crossover_n: effective``), or N_obs for both (``demand``, the reference); α_MB = max(α_p,
    α_d) (``mb_alpha: step``) or α_p. (H200_COSTS has no step function: the closed form.)"""
    c = H200_COSTS
    n_mb = n_eb = s.policy.n_obs
    if s.policy.opts.selector.crossover_n == "effective":
        cap = s.config.max_num_seqs if s.policy.n_mb is None else s.policy.n_mb
        n_mb = min(s.policy.n_obs, s.config.max_num_seqs, cap)
        n_eb = min(s.policy.n_obs, s.policy.ctl.n_hat, s.config.max_num_seqs)
    x = eb_theory.crossover(
        s.policy.ctl.stats.mu_l,
        s.policy.ctl.stats.mu_o,
        n_mb,
        s.policy.ctl.theta,
        c.alpha_p,
        c.beta_p,
        c.alpha_d,
        c.beta_d,
        c.beta_mb_e,
        alpha_mb=max(c.alpha_p, c.alpha_d) if s.policy.opts.cost.mb_alpha == "step" else None,
        k=s.policy.ctl.theta * n_eb,
    )
    return x.delta


def test_the_signal_is_the_closed_form_crossover():
    s = primed(make_plus(delta=0.0))
    s.policy.evaluate(0)
    row = s.extra_tables()["ebplus"]
    assert list(row["event"][-2:]) == ["evaluate", "to_eb"]
    assert row["signal"][-2] == pytest.approx(signal_of(s))
    # H200, (512, 256), N_obs = 2048, θ = 0.7: contention > amortised fixed cost → EB
    assert row["lhs"][-2] > row["rhs"][-2] > 0
    assert s.policy.mode == "eb"


def test_effective_batch_sizes_credit_eb_only_with_the_memory_safe_n():
    ref = primed(make_plus(delta=0.0, crossover_n="demand"))
    eff = primed(make_plus(delta=0.0))
    eff.policy.ctl.n_hat = 300  # memory caps EB far below the demand of 2048
    ref.policy.evaluate(0)
    eff.policy.evaluate(0)
    s_ref = ref.extra_tables()["ebplus"]["signal"][1]
    s_eff = eff.extra_tables()["ebplus"]["signal"][1]
    assert s_ref == pytest.approx(signal_of(ref))
    assert s_eff == pytest.approx(signal_of(eff))
    assert s_eff < s_ref  # EB amortises its refills over fewer requests


def test_hysteresis_sticky_exit_and_cooldown():
    s = primed(make_plus(cooldown=2))
    sig = signal_of(s)
    assert sig > 0
    # δ just above the signal: no switch
    s.policy.opts = s.policy.opts.replace(delta=sig * 1.01)
    s.policy.evaluate(0)
    assert s.policy.mode == "mb"
    s.policy.opts = s.policy.opts.replace(delta=sig * 0.99)
    s.policy.evaluate(0)
    assert s.policy.mode == "eb"
    assert s.policy.cooldown_left == 2
    # shrink the demand so the signal turns negative; cooldown swallows two evaluations
    s.policy.n_obs = 40.0
    neg = signal_of(s)
    assert neg < 0
    s.policy.opts = s.policy.opts.replace(delta=-neg / 2.0)  # |neg| = 2δ < 3δ: sticky
    for _ in range(2):
        s.policy.evaluate(0)
        assert s.policy.mode == "eb"
    assert s.policy.cooldown_left == 0
    s.policy.evaluate(0)
    assert s.policy.mode == "eb"  # leaving EB needs 3·δ of evidence
    s.policy.opts = s.policy.opts.replace(delta=-neg / 3.5)
    s.policy.evaluate(0)
    assert s.policy.mode == "mb"
    assert s.policy.num_switches == 2


def test_drain_filter_and_uninitialised_estimator_block_decisions():
    s = primed(make_plus(delta=0.0), n_obs=15.0)  # N_obs < 16
    s.policy.ctl.stats.mu_o = 4096.0  # a decode-heavy reading that would favour EB
    s.policy.evaluate(0)
    assert s.policy.mode == "mb"
    s2 = make_plus(delta=0.0)
    s2.policy.n_obs = 2048.0
    s2.policy.evaluate(0)  # no estimate yet
    assert s2.policy.mode == "mb"
    assert list(s2.extra_tables()["ebplus"]["event"]) == ["start"]


def test_no_decision_while_the_load_ebbs():
    # EB, N_obs = 40 from the phase that left, 10 requests still here (< 40/2): the signal
    # at N_obs = 40 says MB, but a decision would act on the departed load
    for ebb, mode in ((2.0, "eb"), (0.0, "mb")):
        s = primed(make_plus(delta=0.0, ebb_factor=ebb), n_obs=40.0)
        s.policy.mode = "eb"
        assert signal_of(s) < 0
        s.policy.demand = 10
        s.policy.evaluate(0)
        assert s.policy.mode == mode


def test_demand_ema_is_fast_up_slow_down_and_a_surge_evaluates():
    s = primed(make_plus(delta=1.0), n_obs=100.0)  # δ huge: evaluations never switch
    for i in range(150):
        s.add_request(make_request(i, 10, 5))
    s.schedule(0)
    # demand 150 > 100: a = 0.3
    assert s.policy.n_obs == pytest.approx(0.3 * 150 + 0.7 * 100)
    s2 = primed(make_plus(delta=1.0), n_obs=200.0)
    s2.add_request(make_request(0, 10, 5))
    s2.schedule(0)
    assert s2.policy.n_obs == pytest.approx(0.03 * 1 + 0.97 * 200)
    # surge: demand 1000 > 2·N_obs after the update → immediate evaluation
    s3 = primed(make_plus(delta=1.0), n_obs=100.0)
    for i in range(1000):
        s3.add_request(make_request(i, 10, 5))
    s3.schedule(0)
    assert "surge" in list(s3.extra_tables()["ebplus"]["event"])


def test_mb_to_eb_takes_over_the_running_set():
    s = make_eb(num_blocks=5000, token_budget=2048, max_seqs=64, batching="ebplus")
    eng = Engine(s, ModelledExecutor(unit_perf()), VirtualClock())
    for i in range(20):
        s.add_request(make_request(i, 30, 40))
    eng.step()  # MB admits and prefills all 20
    eng.step()  # they decode
    for i in range(20, 30):
        s.add_request(make_request(i, 30, 40))
    primed(s, n_obs=30.0)
    s.policy.opts = s.policy.opts.replace(delta=0.0)
    s.policy._to_eb(eng.clock.now_ns())
    assert s.policy.mode == "eb"
    assert s.policy.eb.phase == DECODE
    assert s.policy.eb.prefilled == 20
    assert s.policy.ctl.n == min(20 + 10, s.policy.ctl.n_target())
    plan = eng.step()
    assert plan is not None
    # the next step decides with EB's threshold test on the shared running set: exclusive
    assert not (plan.prefills and plan.num_decodes)
    while s.has_work():
        plan = eng.step()
        assert plan is None or not (plan.prefills and plan.num_decodes)
    s.check()


def test_low_concurrency_keeps_mb_and_matches_it():
    # Table 4, c = 32: RHS ≫ LHS → EB⁺ stays in MB and equals v1 step for step
    kw = {"token_budget": 8192, "max_seqs": 512}
    mb = _run("mb", "h200", 32, 600, 512, 256, **kw).metrics
    plus = _run("ebplus", "h200", 32, 600, 512, 256, **kw).metrics
    eb = _run("eb", "h200", 32, 600, 512, 256, **kw).metrics
    assert plus["mode_switches"] == 0
    assert plus["eb_time_share"] == 0.0
    assert plus["token_throughput"] == mb["token_throughput"]
    assert plus["ttft_p50_s"] == mb["ttft_p50_s"]
    # EB alone pays its refills at low concurrency (ebplus.md §5.8 check 3)
    assert eb["token_throughput"] < mb["token_throughput"]
    assert eb["ttft_p50_s"] > mb["ttft_p50_s"]


def test_high_concurrency_on_a_bandwidth_poor_gpu_switches_to_eb():
    kw = {"token_budget": 8192, "max_seqs": 512}
    mb = _run("mb", "rtx-pro-6000", 1024, 2000, 512, 256, **kw).metrics
    res = _run("ebplus", "rtx-pro-6000", 1024, 2000, 512, 256, **kw)
    plus = res.metrics
    assert plus["mode_switches"] >= 1
    assert plus["eb_time_share"] > 0.5
    assert plus["token_throughput"] > 1.05 * mb["token_throughput"]
    series = res.extras["tables"]["ebplus"]
    assert {"mode", "theta", "k_hat", "n_hat", "lhs", "rhs", "signal"} <= set(series)
    assert "eb" in series["mode"]
    assert all(math.isfinite(t) for t in series["theta"])


def test_fast_forward_matches_stepping_on_a_switching_run():
    rs = request_set([0.0] * 300, [64] * 300, [40 + (7 * i) % 90 for i in range(300)])
    out = []
    for ff in (False, True):
        s = make_eb(
            num_blocks=3000,
            token_budget=2048,
            max_seqs=128,
            batching="ebplus",
            update_every=10,
            min_samples=5,
            delta=0.0,
        )
        rec, sim, _ = simulate(rs, s, unit_perf(), fast_forward=ff, concurrency=150)
        out.append((rec.finish_ns.copy(), s.policy.num_switches, s.policy.n_obs, sim.num_events))
    assert (out[0][0] == out[1][0]).all()
    assert out[0][1:3] == out[1][1:3]
    assert out[1][3] < out[0][3]


def test_mb_cap_is_mbs_own_memory_bound_from_the_window():
    s = make_plus(mb_cap="mb_safe")
    assert s.policy.n_mb is None
    assert s.policy.mb_cap() is None
    for o in (300, 410, 520, 260, 900, 333) * 20:
        s.policy.ctl.stats.push_output(o)
    s.policy.ctl.stats.mu_l, s.policy.ctl.stats.mu_l2 = 700.0, 700.0**2 + 150.0**2
    s.policy.ctl.refit(0)
    expect = eb_theory.mb_safe_n(
        s.policy.ctl.capacity_tokens,
        700.0,
        150.0**2,
        s.policy.ctl.stats.window(),
        0.01,
        s.config.max_num_seqs,
    )
    assert s.policy.n_mb == expect == s.policy.mb_cap()
    assert s.extra_tables()["ebplus"]["n_mb"][-1] == expect
    # the crossover credits MB with the batch it may run
    primed(s, n_obs=2048.0)
    s.policy.opts = s.policy.opts.replace(delta=1.0)
    s.policy.evaluate(0)
    assert s.extra_tables()["ebplus"]["signal"][-1] == pytest.approx(signal_of(s))
    # the other caps
    assert make_plus(mb_cap="n_hat").policy.mb_cap() == 1024
    assert make_plus(mb_cap="none").policy.mb_cap() is None
    legacy = make_plus(mb_memory_safe=True)
    legacy.policy.ctl.n_hat = 300
    assert legacy.policy.mb_cap() == 300


def _held_in_mb(cap: str, num_blocks: int, **opts: object) -> Scheduler:
    """EB⁺ held in MB mode (δ huge), estimating every 25 completions, with MB cap ``cap``."""
    s = make_eb(
        num_blocks=num_blocks,
        token_budget=1024,
        max_seqs=256,
        batching="ebplus",
        update_every=25,
        min_samples=10,
        delta=1.0,
        mb_cap=cap,
        **opts,
    )
    assert isinstance(s.policy, EBPlus)
    return s


def test_capped_mb_mode_admits_within_the_bound_and_preempts_less():
    # EB⁺ held in MB (δ huge) with far more clients than the KV cache holds
    rs = request_set([0.0] * 600, [40] * 600, [60 + (i * 53) % 120 for i in range(600)])
    runs = {}
    for cap in ("none", "mb_safe", "forecast"):
        # the forecast with the steady-state count cap, at EB's ε (``mb_count_cap``)
        extra = {"mb_count_cap": True, "mb_eps": 0.01} if cap == "forecast" else {}
        s = _held_in_mb(cap, num_blocks=700, **extra)
        admitted = []
        orig = s.state.admit

        def admit(
            plan,
            budget,
            now_ns,
            max_seqs=None,
            test=None,
            limit=None,
            *,
            s=s,
            orig=orig,
            log=admitted,
        ):
            before = len(s.running)
            out = orig(plan, budget, now_ns, max_seqs, test, limit)
            if len(s.running) > before:
                log.append((max_seqs, len(s.running)))
            return out

        s.state.admit = admit
        rec, _, _ = simulate(rs, s, unit_perf(), concurrency=300)
        assert s.policy.mode == "mb"
        assert s.policy.num_switches == 0
        runs[cap] = (rec, s, admitted)
    rec_n, s_n, _ = runs["none"]
    rec_c, s_c, adm = runs["mb_safe"]
    # uncapped EB⁺ in MB mode is vLLM v1: the same schedule as `mb`
    mb = make_eb(num_blocks=700, token_budget=1024, max_seqs=256)
    mb = build_scheduler(mb.config, mb.kv, "mb")
    rec_mb, _, _ = simulate(rs, mb, unit_perf(), concurrency=300)
    assert (rec_n.finish_ns == rec_mb.finish_ns).all()
    assert s_n.num_preemptions > 0
    # with the cap: every admission after the first estimate stays within N_MB ...
    capped = [(c, n) for c, n in adm if c is not None]
    assert capped
    assert all(n <= c for c, n in capped)
    assert all(c < 256 for c, _ in capped)
    # ... and the KV overflows (recompute preemptions) drop
    assert s_c.num_preemptions < s_n.num_preemptions
    assert (rec_c.finish_ns > 0).all()
    # the forecast tests each admission on the running set's state, under the steady-state
    # count bound alone; fewer overflows than v1
    rec_f, s_f, adm_f = runs["forecast"]
    assert s_f.policy.forecast is not None
    assert s_f.policy.forecast.ready
    capped_f = [(c, n) for c, n in adm_f if c is not None]
    assert capped_f
    assert all(n <= c for c, n in capped_f)
    assert s_f.policy.ctl.n_stat == s_f.policy.mb_cap() >= s_f.policy.n_mb
    assert s_f.num_preemptions < s_n.num_preemptions
    assert (rec_f.finish_ns > 0).all()


def test_forecast_cap_preempts_less_when_outputs_get_longer():
    # 300 short outputs, then 300 long ones: the window lags the shift, so a count cap from
    # it admits too many; the forecast sees running requests older than every sample
    n = 600
    outs = [40 + (i * 37) % 40 for i in range(300)] + [200 + (i * 53) % 100 for i in range(300)]
    rs = request_set([0.0] * n, [40] * n, outs)
    preempted = {}
    for cap in ("mb_safe", "forecast"):
        s = _held_in_mb(cap, num_blocks=1500)
        rec, _, _ = simulate(rs, s, unit_perf(), concurrency=300)
        assert (rec.finish_ns > 0).all()
        assert s.policy.mode == "mb"
        preempted[cap] = s.num_preemptions
    assert preempted["forecast"] < 0.75 * preempted["mb_safe"]


def test_a_surge_evaluates_at_the_demand_not_the_lagging_ema():
    # N_obs = 100, then 1000 requests: the EMA moves to 370, the surge fires (1000 > 740)
    sig = {}
    for n_obs in (370.0, 1000.0):
        sig[n_obs] = signal_of(primed(make_plus(), n_obs=n_obs))
    assert sig[370.0] < sig[1000.0]  # RHS ∝ 1/N: the lagging EMA understates EB's case
    delta = (sig[370.0] + sig[1000.0]) / 2.0
    modes = {}
    for surge_n in ("demand", "ema"):
        s = primed(make_plus(delta=delta, surge_n=surge_n), n_obs=100.0)
        for i in range(1000):
            s.add_request(make_request(i, 10, 5))
        s.schedule(0)
        row = s.extra_tables()["ebplus"]
        i = list(row["event"]).index("surge")
        assert row["n_obs"][i] == pytest.approx(370.0)
        assert row["signal"][i] == pytest.approx(sig[1000.0 if surge_n == "demand" else 370.0])
        modes[surge_n] = s.policy.mode
    assert modes == {"demand": "eb", "ema": "mb"}


@pytest.mark.parametrize("batching", ["ebplus", "eb"])
def test_cold_reserve_keeps_headroom_until_the_first_estimate(batching):
    # 100 blocks of 16; prompts of 160 tokens = 10 blocks each; budget admits all at once
    admitted = {}
    for reserve in (0.5, 0.0):
        s = make_eb(
            num_blocks=100,
            token_budget=8192,
            max_seqs=64,
            batching=batching,
            cold_reserve=reserve,
        )
        for i in range(20):
            s.add_request(make_request(i, 160, 50))
        s.schedule(0)
        admitted[reserve] = len(s.running)
    # (1 − 0.5)·100 = 50 blocks → 5 requests; no reserve → prompts up to the cache: 10
    assert admitted == {0.5: 5, 0.0: 10}
    # an empty instance always admits its queue head (liveness), even beyond the limit
    s = make_eb(num_blocks=100, token_budget=8192, batching=batching)
    s.add_request(make_request(0, 960, 10))  # 60 blocks > 50
    s.schedule(0)
    assert len(s.running) == 1
    # once there is an estimate the forecast decides instead: short outputs admit more
    s = make_eb(num_blocks=100, token_budget=8192, max_seqs=64, batching=batching)
    assert s.policy.forecast is not None
    s.policy.forecast.set_outputs(np.full(50, 2))
    for i in range(20):
        s.add_request(make_request(i, 160, 2))
    s.schedule(0)
    assert 5 < len(s.running) < 10


def test_cold_reserve_cuts_preemptions_of_a_burst_before_any_estimate():
    # 300 clients at once into an instance with no estimate; outputs 1.5–4.5× the prompt
    n = 600
    rs = request_set([0.0] * n, [40] * n, [60 + (i * 53) % 120 for i in range(n)])
    before, total = {}, {}
    for reserve in (0.0, 0.5):
        s = _held_in_mb("forecast", 1400, cold_reserve=reserve)
        early = []
        orig = s.state.preempt

        def pre(req, *, s=s, orig=orig, log=early):
            log.append(s.policy.forecast.ready)
            orig(req)

        s.state.preempt = pre
        rec, _, _ = simulate(rs, s, unit_perf(), concurrency=300)
        assert (rec.finish_ns > 0).all()
        before[reserve] = sum(not ready for ready in early)
        total[reserve] = s.num_preemptions
    assert before[0.0] > 0
    assert before[0.5] < before[0.0] / 2
    assert total[0.5] < total[0.0]


def test_a_candidate_that_surely_fits_is_admitted_without_projecting():
    # cache 100 blocks of 16 = 1600 tokens; every output 10 tokens (horizon T = 10, b/2 = 8);
    # z² = 2·ln(100)
    s = make_eb(num_blocks=100, token_budget=8192, max_seqs=64, batching="ebplus")
    fc = s.policy.forecast
    assert fc is not None
    fc.set_outputs(np.full(50, 10))
    projections = []
    orig = fc.project
    fc.project = lambda *a, **k: (projections.append(len(s.running)), orig(*a, **k))[1]
    z = math.sqrt(2 * math.log(100))
    # 100 tokens: worst case 118 + z·110/2 = 285 ≤ 1600 → no projection needed
    assert 118 + z * 110 / 2 <= 1600
    # 1400 tokens: worst case 1418 + z·1410/2 > 1600 → project (the first one is running by
    # then): mean 108 + s + 1408 + s ≤ 1534 at s = 9, no variance (every output is 10) → admit
    assert 1418 + z * 1410 / 2 > 1600
    # 200 more: 1534 + 218 > 1600 → refused
    for i, p in enumerate((100, 1400, 200)):
        s.add_request(make_request(i, p, 10))
    s.schedule(0)
    assert [r.request_id for r in s.running.values()] == [0, 1]
    assert projections == [1]
    assert s.admission_blocked_by_kv
