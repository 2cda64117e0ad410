"""Speculative decoding in the simulator: fast-forward exactness, the verification cost at
α = 0, the closed form met by a run's counters, and the config path."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import request_set, simulate
from tidal.core.errors import ConfigError
from tidal.core.kv import KVBlockManager
from tidal.engine.acceptance import AcceptanceModel
from tidal.engine.build import build_scheduler
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.engine.spec_config import expected_tokens
from tidal.hardware.calibration import build_perf_model
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.hardware.spec_perf import SpecPerfModel
from tidal.sim.config import SimulationConfig
from tidal.sim.run import run_simulation

PERFS = [
    ("llama-3.1-8b", "h100", "roofline", 1),
    ("llama-3-8b", "a100-80gb", "measured", 1),
    ("llama-3.1-8b", "h100", "auto", 1),  # the engine's tables: piecewise-affine steps
]
COLUMNS = ("arrival_ns", "first_scheduled_ns", "first_token_ns", "finish_ns", "num_preemptions")


def spec_scheduler(
    blocks: int, block_size: int, budget: int, max_seqs: int, alphas: list[float], seed: int
) -> Scheduler:
    kv = KVBlockManager(blocks, block_size, 0.0)
    cfg = SchedulerConfig(budget, max_seqs, speculation=AcceptanceModel(alphas, seed))
    return build_scheduler(cfg, kv, "mb")


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 30))
    gaps = draw(st.lists(st.floats(0, 0.2), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 500), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    return request_set(np.cumsum(gaps), prompts, outputs)


@settings(max_examples=60, deadline=None)
@given(
    rs=workloads(),
    blocks=st.integers(40, 400),
    block_size=st.sampled_from([4, 16]),
    budget=st.sampled_from([128, 512, 2048]),
    max_seqs=st.integers(1, 24),
    k=st.integers(1, 5),
    alpha=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32),
    perf_idx=st.integers(0, len(PERFS) - 1),
    method=st.sampled_from(["eagle3", "ngram"]),
)
def test_fast_forward_is_exact_with_speculation(
    rs, blocks, block_size, budget, max_seqs, k, alpha, seed, perf_idx, method
):
    """Per-request columns identical with fast-forward on and off, KV-tight runs (preemption)
    included: the accepted lengths depend on (seed, request, its own step count) only."""
    longest = int((rs.prompt_len + rs.output_len).max())
    blocks = max(blocks, -(-longest // block_size) + 2)
    m, g, kind, tp = PERFS[perf_idx]
    base = build_perf_model(kind, get_model(m), get_gpu(g), tp)
    draft = None if method == "ngram" else base
    perf = SpecPerfModel(base, k, method, draft, 1 / 32)
    budget = max(budget, max_seqs * (k + 1))
    runs = []
    for ff in (False, True):
        s = spec_scheduler(blocks, block_size, budget, max_seqs, [alpha] * k, seed)
        rec, sim, _ = simulate(rs, s, perf, fast_forward=ff)
        runs.append((rec, sim, s))
    (a, sa, s1), (b, sb, s2) = runs
    for col in COLUMNS:
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    assert s1.num_steps == s2.num_steps
    assert s1.stats().counters == s2.stats().counters
    assert sb.num_events <= sa.num_events
    assert s2.kv.num_free_blocks == s2.kv.num_blocks


def test_preemption_happens_in_the_kv_tight_case():
    """The property above reaches preemption (it is not vacuous for the KV-tight case)."""
    rs = request_set([0.0] * 12, [200] * 12, [300] * 12)
    base = build_perf_model("roofline", get_model("llama-3.1-8b"), get_gpu("h100"))
    perf = SpecPerfModel(base, 3, "eagle3", base, 1 / 32)
    cols = []
    for ff in (False, True):
        s = spec_scheduler(80, 16, 2048, 12, [0.8] * 3, 1)
        rec, _, _ = simulate(rs, s, perf, fast_forward=ff)
        cols.append(rec)
        assert s.num_preemptions > 0
    for col in COLUMNS:
        np.testing.assert_array_equal(getattr(cols[0], col), getattr(cols[1], col))


def test_alpha_zero_gives_the_plain_tokens_at_the_verification_cost():
    """α = 0: every step keeps one token, as without speculation (same steps, same outputs);
    each decode step costs the verification of k + 1 rows plus the drafts, to the ns."""
    prompt, out = 100, 50
    rs = request_set([0.0], [prompt], [out])
    base = build_perf_model("roofline", get_model("llama-3.1-8b"), get_gpu("h100"))
    perf = SpecPerfModel(base, 2, "eagle3", base, 1 / 32)
    plain_s = build_scheduler(SchedulerConfig(2048, 8), KVBlockManager(100, 16, 0.0), "mb")
    plain, _, _ = simulate(rs, plain_s, base)
    spec_s = spec_scheduler(100, 16, 2048, 8, [0.0, 0.0], 0)
    spec, _, _ = simulate(rs, spec_s, perf)
    assert spec_s.num_steps == plain_s.num_steps == out
    assert spec.first_token_ns[0] == plain.first_token_ns[0]  # the prefill step is the same
    # decode steps: request at computed c attends c + 1 (c = prompt … prompt + out − 2)
    ctxs = range(prompt + 1, prompt + out)
    extra = sum(perf.step_ns(1, c) - base.step_ns(1, c) for c in ctxs)
    assert extra > 0
    assert spec.finish_ns[0] - plain.finish_ns[0] == extra
    c = spec_s.stats().counters
    assert c["spec_decode_num_drafts"] == out - 1
    assert c["spec_decode_num_draft_tokens"] == 2 * (out - 1)
    assert c["spec_decode_num_accepted_tokens"] == 0


def sim_config(**kw) -> SimulationConfig:
    data = {
        "model": "llama-3.1-8b", "gpu": "h100", "perf_model": "roofline", "seed": 4,
        "workload": {"num_requests": 64, "rate": 4.0, "prompt_len": 128, "output_len": 4096},
        **kw,
    }  # fmt: skip
    return SimulationConfig.model_validate(data)


@pytest.mark.parametrize(
    "spec",
    [
        {"method": "eagle3", "num_speculative_tokens": 3},
        {"method": "mtp", "num_speculative_tokens": 2, "acceptance_rate": [0.85, 0.6]},
        {"method": "ngram", "num_speculative_tokens": 5, "acceptance_rate": 0.5},
    ],
)
def test_a_long_run_meets_the_closed_form(spec):
    """1 + accepted / drafts of a 64 × 4096-token run within 1 % of E[a] (the clipped last
    steps bias it by < 0.1 %: one per ~1,600 draws)."""
    res = run_simulation(sim_config(speculative=spec))
    m = res.metrics
    cfg = res.config.speculative
    assert cfg is not None
    expected = expected_tokens(cfg.alphas())
    assert m["spec_decode_mean_acceptance_length"] == pytest.approx(expected, rel=0.01)
    assert m["spec_decode_num_draft_tokens"] == m["spec_decode_num_drafts"] * len(cfg.alphas())
    # every output token after the first comes from a verification step
    assert m["spec_decode_num_drafts"] + m["spec_decode_num_accepted_tokens"] == 64 * 4095
    per_pos = m["spec_decode_num_accepted_tokens_per_pos"]
    assert sum(per_pos) == m["spec_decode_num_accepted_tokens"]
    assert per_pos == sorted(per_pos, reverse=True)


def test_config_key_alias_flag_json_and_errors():
    a = sim_config(speculative={"method": "eagle3", "num_speculative_tokens": 2})
    b = sim_config(speculative_config='{"method": "eagle3", "num_speculative_tokens": 2}')
    assert a.speculative == b.speculative
    assert sim_config().speculative is None
    with pytest.raises(Exception, match="num_speculative_tokens"):
        sim_config(speculative={"method": "eagle3"})
    with pytest.raises(ConfigError, match="acceptance_rate"):
        run_simulation(sim_config(speculative={"method": "ngram", "num_speculative_tokens": 2}))


def test_speculation_is_off_by_default_and_changes_nothing():
    """Without ``speculative`` the summary has no speculation fields (goldens stay)."""
    res = run_simulation(sim_config(workload={"num_requests": 4, "rate": 4.0, "output_len": 8}))
    assert not any(k.startswith("spec_decode") for k in res.metrics)


def test_replicas_sum_the_counters():
    """Replicas: counters add up, the per-position list and the mean come from the sums."""
    from tidal.experiments.replicas import run_replicated

    spec = {"method": "eagle3", "num_speculative_tokens": 2}
    wl = {"num_requests": 16, "rate": 8.0, "prompt_len": 64, "output_len": 200}
    res = run_replicated(sim_config(speculative=spec, workload=wl), 2)
    m = res.metrics
    assert m["spec_decode_num_drafts"] + m["spec_decode_num_accepted_tokens"] == 16 * 199
    assert sum(m["spec_decode_num_accepted_tokens_per_pos"]) == m["spec_decode_num_accepted_tokens"]
    mean = 1 + m["spec_decode_num_accepted_tokens"] / m["spec_decode_num_drafts"]
    assert m["spec_decode_mean_acceptance_length"] == mean
