"""Exclusive batching (EB): the phase machine by hand, its invariants under random workloads,
the online controller, and EB against MB (ebplus.md §2–§3.2, §5.8)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.batching.eb_helpers import make_eb, run_closed_loop
from tests.conftest import make_request, request_set, simulate, unit_perf
from tidal.batching import eb_theory
from tidal.batching.eb import DECODE, INITIAL_FILL, REFILL
from tidal.core.clock import VirtualClock
from tidal.core.errors import ConfigError
from tidal.core.kv import KVBlockManager
from tidal.engine.build import build_scheduler
from tidal.engine.engine import Engine
from tidal.engine.executor import ModelledExecutor
from tidal.engine.scheduler import SchedulerConfig

MS = 1_000_000
US = 1_000


def _kinds(plans):
    return [("P" if p.prefills else "D", len(p.prefills) or p.num_decodes) for p in plans]


def test_phase_machine_by_hand():
    # N = 4, k = 2: refill when fillable·(N−k) ≥ n·k, i.e. fillable ≥ n.
    s = make_eb(max_seqs=4, token_budget=1000, k_fixed=2)
    outs = [2, 2, 5, 5, 3, 3]
    for i, o in enumerate(outs):
        s.add_request(make_request(i, 10, o))
    eng = Engine(s, ModelledExecutor(unit_perf()), VirtualClock())
    plans, phases = [], []
    while s.has_work():
        plan = eng.step()
        assert plan is not None
        plans.append(plan)
        phases.append(s.policy.phase)
    assert _kinds(plans) == [
        ("P", 4),  # phase 0: fill N = 4
        ("D", 4),  # requests 0 and 1 finish (2 tokens)
        ("P", 2),  # n = 2 ≤ fillable = 2: refill the two slots
        ("D", 4),  # request 2, 3 reach 3 tokens; 4, 5 reach 2
        ("D", 4),  # 4, 5 finish (3 tokens); 2, 3 at 4 — queue empty: keep decoding
        ("D", 2),  # 2, 3 finish
    ]
    assert phases == [INITIAL_FILL, DECODE, REFILL, DECODE, DECODE, DECODE]
    # timestamps: prefill step = 1 ms + 1 µs/token, decode step = 1 ms + 1 µs/request
    p4, d4, p2 = 1 * MS + 40 * US, 1 * MS + 4 * US, 1 * MS + 20 * US
    assert eng.clock.now_ns() == p4 + d4 + p2 + d4 + d4 + (1 * MS + 2 * US)
    assert s.policy.num_refills == 1


def test_no_prefill_while_decoding_even_when_the_queue_fills():
    s = make_eb(max_seqs=8, token_budget=1000, k_fixed=4)
    for i in range(8):
        s.add_request(make_request(i, 20, 50))
    eng = Engine(s, ModelledExecutor(unit_perf()), VirtualClock())
    eng.step()  # fill
    for i in range(8, 20):
        s.add_request(make_request(i, 20, 50))
    plan = eng.step()
    # 8 decoding, 12 waiting, but no slot is free: fillable = min(12, 0) = 0 → decode
    assert plan is not None
    assert plan.num_decodes == 8
    assert not plan.prefills


def test_eb_refuses_to_run_without_step_costs():
    kv = KVBlockManager(100, 16)
    with pytest.raises(ConfigError, match="step costs"):
        build_scheduler(SchedulerConfig(512, 8), kv, "eb")


@given(
    lengths=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 120)), min_size=1, max_size=30),
    block_size=st.sampled_from([1, 4, 16]),
    spare_blocks=st.integers(0, 150),
    budget=st.integers(1, 600),
    max_seqs=st.integers(1, 16),
    k_fixed=st.one_of(st.none(), st.integers(1, 8)),
    kv_gate=st.booleans(),
    late=st.integers(0, 30),
)
def test_invariants_at_every_step(
    lengths, block_size, spare_blocks, budget, max_seqs, k_fixed, kv_gate, late
):
    """Exclusive steps only; a refill admits at most its target; every decoding request
    decodes in a decode step; KV accounting holds; everything finishes."""
    longest = max(p + o for p, o in lengths)
    blocks = -(-longest // block_size) + spare_blocks
    budget = max(budget, max_seqs)
    s = make_eb(
        blocks,
        block_size,
        budget,
        max_seqs,
        k_fixed=k_fixed,
        kv_gate=kv_gate,
        update_every=4,
        min_samples=3,
        window=16,
        n_update_cooldown_s=0.0,
    )
    eng = Engine(s, ModelledExecutor(unit_perf()), VirtualClock())
    reqs = [make_request(i, p, o) for i, (p, o) in enumerate(lengths)]
    finished = []
    s.on_finish = finished.append
    cut = len(reqs) - late % len(reqs)
    for r in reqs[:cut]:
        s.add_request(r)
    pending = reqs[cut:]
    admitted: dict[int, int] = {}  # refill episode → new admissions
    steps = 0
    while s.has_work() or pending:
        if pending and steps % 3 == 0:
            s.add_request(pending.pop(0))
        before = set(s.running)
        pool_before = set(s.pool.members)
        plan = eng.step()
        steps += 1
        assert steps < 100_000
        if plan is None:
            continue
        assert not (plan.prefills and plan.num_decodes), "a mixed step"
        assert plan.num_tokens <= budget
        if plan.num_decodes:
            assert s.policy.phase == DECODE
            # every decoding request that was not preempted decodes
            gone = {r.request_id for r in plan.preempted}
            assert plan.num_decodes == len(pool_before - gone)
        if s.policy.phase == REFILL:
            new = sum(1 for r, _ in plan.prefills if r.request_id not in before)
            admitted[s.policy.num_refills] = admitted.get(s.policy.num_refills, 0) + new
            assert admitted[s.policy.num_refills] <= s.policy.refill_target
        assert not {r.request_id for r in plan.preempted} & {r.request_id for r, _ in plan.prefills}
        s.check()
    assert sorted(r.request_id for r in finished) == list(range(len(reqs)))
    assert all(r.num_output_tokens == r.max_output_len for r in reqs)
    assert s.kv.num_free_blocks == s.kv.num_blocks


def _controlled(num_blocks: int, n_bound: str, **opts: object):
    """EB at N_max = 256 estimating every 50 completions, with memory bound ``n_bound``."""
    return make_eb(
        num_blocks=num_blocks,
        block_size=16,
        token_budget=4096,
        max_seqs=256,
        update_every=50,
        min_samples=30,
        n_bound=n_bound,
        **opts,
    )


def test_controller_sets_k_from_theta_and_caps_n_by_the_memory_safe_bound():
    s = _controlled(4000, "clt")
    assert s.policy.ctl.theta == 0.7
    assert s.policy.ctl.k == int(0.7 * 256)
    rs = request_set([0.0] * 400, [200] * 400, [60 + (i * 37) % 80 for i in range(400)])
    simulate(rs, s, unit_perf(), concurrency=300)
    assert s.policy.ctl.stats.initialized
    assert s.policy.ctl.theta_initialized
    assert s.policy.ctl.k == max(1, int(s.policy.ctl.theta * s.policy.ctl.n))
    # N̂* from the CLT form with the controller's own estimates, capped at N_max
    expect = eb_theory.memory_safe_n(
        s.policy.ctl.capacity_tokens,
        s.policy.ctl.theta,
        s.policy.ctl.stats.p0,
        max(1.0, s.policy.ctl.stats.mu_l),
        0.01,
        256,
    )
    assert s.policy.ctl.n_hat == expect
    assert s.policy.ctl.n <= s.policy.ctl.n_hat
    assert 0.01 <= s.policy.ctl.theta <= 0.8
    hist = s.extra_tables()["eb"]
    assert len(hist["time_ns"]) == s.policy.ctl.stats.num_completed // 50


def test_forecast_bound_sets_n_to_the_steady_state_bound_and_never_overflows():
    s = _controlled(1500, "forecast")
    assert s.policy.forecast is not None
    at_first_estimate = []
    refit = s.policy.ctl.refit

    def first(now_ns):
        if not at_first_estimate:
            at_first_estimate.append(s.num_preemptions)
        refit(now_ns)

    s.policy.ctl.refit = first
    rs = request_set([0.0] * 400, [200] * 400, [60 + (i * 37) % 80 for i in range(400)])
    simulate(rs, s, unit_perf(), concurrency=300)
    assert s.policy.forecast.ready
    # N = the renewal (continuous-batching) bound from the window, not the CFR N̂*
    window = s.policy.ctl.stats.window()
    expect = eb_theory.stationary_safe_n(
        s.policy.ctl.capacity_tokens,
        s.policy.ctl.stats.mu_l,
        s.policy.ctl.stats.var_l,
        *eb_theory.output_moments(window),
        0.01,
        256,
    )
    assert s.policy.ctl.n_stat == expect
    assert s.policy.ctl.n_hat == expect
    assert s.policy.ctl.n <= s.policy.ctl.n_hat
    clt = eb_theory.memory_safe_n(
        s.policy.ctl.capacity_tokens,
        s.policy.ctl.theta,
        s.policy.ctl.stats.p0,
        max(1.0, s.policy.ctl.stats.mu_l),
        0.01,
        256,
    )
    assert expect > clt  # bounded outputs: the CFR occupancy overstates the need
    # once estimated, every fill and refill passed the forecast: no decode OOM, no KV-escape
    # drop (before it, the cold fill at N_max may drop a chunk)
    assert s.policy.ctl.num_oom == 0
    assert s.num_preemptions == at_first_estimate[0]


def test_forecast_bound_runs_eb_at_a_larger_safe_batch_than_the_clt_bound():
    # H200 decode-heavy in miniature: N̂*'s CFR occupancy (μ_L + 1/p0) overstates what
    # uniform outputs hold, so the paper's bound runs EB at a smaller batch than the cache allows
    kw = {"token_budget": 16384, "max_seqs": 1024}
    out = {
        b: _run("eb", "h200", 1024, 2500, 128, 1024, eb={"n_bound": b}, **kw)
        for b in ("clt", "forecast")
    }
    assert out["forecast"]["eb_n"] > out["clt"]["eb_n"]
    assert out["forecast"]["token_throughput"] > out["clt"]["token_throughput"]
    assert out["forecast"]["num_preemptions"] <= 0.01 * out["forecast"]["num_requests"]


def test_theta_fixed_pins_the_threshold_and_auto_n_off_keeps_n_max():
    s = make_eb(max_seqs=64, theta_fixed=0.25, auto_n=False, update_every=10, min_samples=5)
    rs = request_set([0.0] * 120, [30] * 120, [20 + i % 17 for i in range(120)])
    simulate(rs, s, unit_perf(), concurrency=80)
    assert s.policy.ctl.theta == 0.25
    assert s.policy.ctl.n_hat == 64
    assert s.policy.ctl.k == int(0.25 * s.policy.ctl.n)


def test_decode_oom_preempts_the_newest_request():
    # 3 requests of 8-token prompts and 20 outputs (7 blocks of 4 each) in 9 blocks, admitted
    # as vLLM would (no cold-start reserve)
    s = make_eb(num_blocks=9, block_size=4, token_budget=64, max_seqs=3, k_fixed=1, cold_reserve=0)
    for i in range(3):
        s.add_request(make_request(i, 8, 20))
    rec_order = []
    s.on_finish = lambda r: rec_order.append(r.request_id)
    eng = Engine(s, ModelledExecutor(unit_perf()), VirtualClock())
    preempted = []
    while s.has_work():
        plan = eng.step()
        if plan is not None:
            preempted += [r.request_id for r in plan.preempted]
    assert preempted
    assert preempted[0] == 2  # the newest running request goes first
    assert s.policy.ctl.num_oom >= 1
    assert sorted(rec_order) == [0, 1, 2]


def _run(batching: str, gpu: str, conc: int, n: int, prompt: int, output: int, **sched):
    return run_closed_loop(batching, gpu, conc, n, prompt, output, **sched).metrics


def test_eb_beats_mb_on_a_bandwidth_poor_gpu_with_lower_tpot():
    # ebplus.md §5.8 check 1 in miniature: RTX PRO 6000, balanced mix, saturated
    kw = {"token_budget": 8192, "max_seqs": 512}
    mb = _run("mb", "rtx-pro-6000", 768, 1500, 512, 512, **kw)
    eb = _run("eb", "rtx-pro-6000", 768, 1500, 512, 512, **kw)
    assert eb["token_throughput"] > 1.1 * mb["token_throughput"]
    assert eb["tpot_p50_s"] < mb["tpot_p50_s"]
    assert eb["eb_time_share"] == 1.0


def test_eb_gain_is_smaller_on_a_high_bandwidth_gpu():
    kw = {"token_budget": 8192, "max_seqs": 512}
    gains = {}
    for gpu in ("rtx-pro-6000", "h200"):
        mb = _run("mb", gpu, 768, 1500, 512, 512, **kw)
        eb = _run("eb", gpu, 768, 1500, 512, 512, **kw)
        gains[gpu] = eb["token_throughput"] / mb["token_throughput"] - 1
    assert gains["h200"] < gains["rtx-pro-6000"]
    assert math.isfinite(gains["h200"])


def _trace_n(s):
    """Record (estimated yet, N, min(N_max, N̂*)) at every schedule() call."""
    trace = []
    orig = s.schedule

    def schedule(now_ns):
        plan = orig(now_ns)
        trace.append((s.policy.ctl.theta_initialized, s.policy.ctl.n, s.policy.ctl.n_target()))
        return plan

    s.schedule = schedule
    return trace


@pytest.mark.parametrize("ff", [False, True])
def test_n_recovery_keeps_n_memory_safe_or_restores_n_max_as_the_reference(ff):
    rs = request_set([0.0] * 400, [50] * 400, [60 + (i * 37) % 80 for i in range(400)])
    out = {}
    for mode in ("n_hat", "n_max"):
        s = make_eb(
            num_blocks=300,
            token_budget=2048,
            max_seqs=64,
            update_every=20,
            min_samples=10,
            n_update_cooldown_s=0.005,
            n_recovery=mode,
        )
        trace = _trace_n(s)
        simulate(rs, s, unit_perf(), fast_forward=ff, concurrency=200)
        after = [(n, cap) for init, n, cap in trace if init]
        assert after
        assert all(cap < 64 for _, cap in after)
        out[mode] = after
    # the paper's invariant: N ≤ min(N_max, N̂*) once estimated
    assert all(n <= cap for n, cap in out["n_hat"])
    # the reference: a long queue brings N back to N_max after the cooldown
    assert any(n == 64 for n, _ in out["n_max"])


def test_recent_outputs_cut_the_overflow_when_outputs_get_longer():
    # 600 short outputs (40–79), then 600 long ones (200–299), 300 clients: the 500-sample
    # window mixes both regimes for a long time; the last 100 completions show the new one
    n = 1200
    outs = [40 + (i * 37) % 40 for i in range(600)] + [200 + (i * 53) % 100 for i in range(600)]
    rs = request_set([0.0] * n, [40] * n, outs)
    preempted = {}
    for recent in (0, 100):
        s = _controlled(2500, "forecast", forecast_recent=recent)
        rec, _, _ = simulate(rs, s, unit_perf(), concurrency=300)
        assert (rec.finish_ns > 0).all()
        preempted[recent] = s.num_preemptions
    assert preempted[0] > 0
    assert preempted[100] < 0.6 * preempted[0]


@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["arrive", "admit", "front", "ask"]), st.integers(1, 40)),
        max_size=60,
    )
)
def test_cached_refill_room_equals_the_forecast_room(ops):
    """EB's refill room is cached while the projection and the queue heads it depended on
    stay the same; after any mix of arrivals, admissions and preempted requests pushed back,
    it equals a fresh :meth:`KVForecast.room` of the queue heads."""
    import numpy as np

    s = make_eb(num_blocks=200, block_size=4, max_seqs=64)
    fc = s.policy.forecast
    assert fc is not None
    fc.set_outputs(np.arange(5, 40))
    fc.project([], [])
    rid = 0
    for op, x in ops:
        if op == "arrive":
            s.waiting.push(make_request(rid, x, 10))
            rid += 1
        elif op == "front":
            s.waiting.push_front(make_request(rid, x, 10))
            rid += 1
        elif op == "admit" and len(s.waiting):
            req = s.waiting.pop()
            fc.admit(req.num_tokens, req.num_output_tokens)
        count = min(x, len(s.waiting))
        want = fc.room((r.num_tokens, r.num_output_tokens) for r in list(s.waiting)[:count])
        assert s.policy.gate.room(fc, count) == want


def test_reference_preset_gives_the_papers_forms_and_explicit_fields_win():
    from tidal.batching.eb_options import REFERENCE, EBOptions

    ref = EBOptions(preset="reference")
    for group, forms in REFERENCE.items():
        for key, value in forms.items():
            assert getattr(getattr(ref, group), key) == value, key
    assert EBOptions(preset="reference", delta=1e-6).selector.delta == 1e-6
    assert EBOptions(preset="reference", selector={"delta": 1e-6}).selector.delta == 1e-6
    assert EBOptions(preset="reference", selector={"delta": 1e-6}).selector.mb_cap == "none"
    assert EBOptions().bound.n_bound == "forecast"  # our default is unchanged
