"""Exact fast-forward: identical per-request timestamps with and without it (docs/DESIGN.md §2)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import make_scheduler, request_set, simulate
from tidal.hardware.calibration import build_perf_model
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model

PERFS = [
    ("llama-3.1-8b", "h100", "roofline", 1),
    ("qwen3-8b", "h200", "linear", 1),
    ("qwen3-30b-a3b", "l40s", "roofline", 1),
    # issue 13: the measured profiles (with measured decode attention: not affine) and the
    # corrected roofline (affine, MoE)
    ("codellama-34b", "a100-80gb", "measured", 2),
    ("llama-3-8b", "a100-80gb", "measured", 1),
    ("qwen3-30b-a3b", "h200", "corrected-roofline", 1),
]


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 40))
    gaps = draw(st.lists(st.floats(0, 0.2), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 600), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    return request_set(np.cumsum(gaps), prompts, outputs)


@given(
    rs=workloads(),
    blocks=st.integers(60, 400),
    block_size=st.sampled_from([4, 16]),
    budget=st.sampled_from([64, 256, 2048]),
    max_seqs=st.integers(1, 32),
    perf_idx=st.integers(0, len(PERFS) - 1),
    concurrency=st.one_of(st.none(), st.integers(1, 8)),
)
def test_fast_forward_is_exact(rs, blocks, block_size, budget, max_seqs, perf_idx, concurrency):
    longest = int((rs.prompt_len + rs.output_len).max())
    blocks = max(blocks, -(-longest // block_size) + 2)
    m, g, kind, tp = PERFS[perf_idx]
    perf = build_perf_model(kind, get_model(m), get_gpu(g), tp)
    budget = max(budget, max_seqs)
    runs = []
    for ff in (False, True):
        s = make_scheduler(blocks, block_size, budget, max_seqs, watermark=0.0)
        rec, sim, _ = simulate(rs, s, perf, fast_forward=ff, concurrency=concurrency)
        runs.append((rec, sim, s))
    (a, sa, s1), (b, sb, s2) = runs
    for col in (
        "arrival_ns",
        "first_scheduled_ns",
        "first_token_ns",
        "finish_ns",
        "num_preemptions",
    ):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    assert s1.num_steps == s2.num_steps
    assert sb.num_events <= sa.num_events
    assert s2.kv.num_free_blocks == s2.kv.num_blocks


def test_fast_forward_skips_most_events_on_a_decode_heavy_run():
    rs = request_set([0.0] * 8, [64] * 8, [2000] * 8)
    perf = build_perf_model("roofline", get_model("llama-3.1-8b"), get_gpu("h100"))
    _, slow, _ = simulate(rs, make_scheduler(num_blocks=2000), perf, fast_forward=False)
    _, fast, _ = simulate(rs, make_scheduler(num_blocks=2000), perf, fast_forward=True)
    assert slow.num_events > 2000
    assert fast.num_events < 20


@given(
    rs=workloads(),
    blocks=st.integers(60, 400),
    block_size=st.sampled_from([4, 16]),
    budget=st.sampled_from([64, 256, 2048]),
    max_seqs=st.integers(1, 32),
    perf_idx=st.integers(0, len(PERFS) - 1),
    concurrency=st.one_of(st.none(), st.integers(1, 8)),
    batching=st.sampled_from(["eb", "ebplus"]),
    cadence=st.integers(1, 6),
    cooldown=st.integers(0, 2),
    n_cooldown_s=st.sampled_from([0.0, 0.02, 2.0]),
    n_recovery=st.sampled_from(["n_hat", "n_max"]),
    mb_cap=st.sampled_from(["mb_safe", "forecast", "n_hat", "none"]),
    n_bound=st.sampled_from(["clt", "forecast"]),
)
def test_fast_forward_is_exact_for_exclusive_batching(
    rs,
    blocks,
    block_size,
    budget,
    max_seqs,
    perf_idx,
    concurrency,
    batching,
    cadence,
    cooldown,
    n_cooldown_s,
    n_recovery,
    mb_cap,
    n_bound,
):
    """EB's phase machine (both N recoveries) and EB⁺'s per-step demand EMA, surge test, mode
    switches and MB-mode running cap must give the same timestamps whether decode runs are
    fast-forwarded or stepped."""
    from tests.batching.eb_helpers import make_eb
    from tidal.hardware.interference import step_costs

    longest = int((rs.prompt_len + rs.output_len).max())
    blocks = max(blocks, -(-longest // block_size) + 2)
    m, g, kind, tp = PERFS[perf_idx]
    model, gpu = get_model(m), get_gpu(g)
    perf = build_perf_model(kind, model, gpu, tp, interference=True)
    costs = step_costs(model, gpu, tp, perf)
    budget = max(budget, max_seqs)
    runs = []
    for ff in (False, True):
        s = make_eb(
            blocks,
            block_size,
            budget,
            max_seqs,
            batching=batching,
            costs=costs,
            update_every=cadence,
            min_samples=1,
            window=8,
            drain_n=1,
            delta=0.0,
            cooldown=cooldown,
            n_update_cooldown_s=n_cooldown_s,
            n_recovery=n_recovery,
            mb_cap=mb_cap,
            n_bound=n_bound,
        )
        rec, sim, _ = simulate(rs, s, perf, fast_forward=ff, concurrency=concurrency)
        runs.append((rec, sim, s))
    (a, sa, s1), (b, sb, s2) = runs
    for col in ("first_scheduled_ns", "first_token_ns", "finish_ns", "num_preemptions"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    assert s1.num_steps == s2.num_steps
    assert s1.extra_metrics() == s2.extra_metrics()
    if batching == "ebplus":
        assert s1.policy.n_obs == s2.policy.n_obs
        assert (
            s1.extra_tables()["ebplus"]["n_obs"].tolist()
            == s2.extra_tables()["ebplus"]["n_obs"].tolist()
        )
    assert sb.num_events <= sa.num_events
    assert s2.kv.num_free_blocks == s2.kv.num_blocks
