"""WarmServe's planner respects the artifact's constraints (warmserve.md §2.3): same-size
groups aligned, smaller inside larger (laminar footprints), no model twice on a GPU, memory and
slots respected; scores follow §2.2."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from tidal.cluster.policies.warmserve_plan import (
    PlanReplica,
    compatible,
    model_scores,
    plan_prewarm,
)

NODES = [range(0, 8), range(8, 16)]
TPS = [1, 1, 2, 4]
PAGES = [6427, 6427, 6207, 16448]  # Llama-2 7B, 7B, 13B/2, 70B/4 shards in 2 MiB pages
POOL = 34332


def _laminar(groups: list[tuple[int, ...]]) -> bool:
    for a in groups:
        for b in groups:
            sa, sb = set(a), set(b)
            if sa & sb and not (sa <= sb or sb <= sa):
                return False
    return True


@given(
    preds=st.lists(st.tuples(st.floats(0, 200), st.floats(0, 3)), min_size=4, max_size=4),
    running=st.lists(st.integers(0, 3), min_size=4, max_size=4),
    pool=st.integers(7000, 40000),
)
def test_evict_aware_placement_is_laminar_and_fits(preds, running, pool):
    scores = [
        model_scores(avg, avg * (1 + burst), r, 32, 1.0)[2]
        for (avg, burst), r in zip(preds, running, strict=True)
    ]
    free = [pool] * 16
    actions = plan_prewarm(scores, TPS, PAGES, [], free, [30] * 16, NODES)
    groups = [g for _, g in actions]
    assert _laminar(groups)
    used = [0] * 16
    for m, group in actions:
        assert len(group) == TPS[m]
        assert len({g // 8 for g in group}) == 1  # one node
        for g in group:
            used[g] += PAGES[m]
    assert all(u <= pool for u in used)
    for g in range(16):
        models = [m for m, group in actions if g in group]
        assert len(models) == len(set(models))  # no model twice on a GPU
    # equal sizes are aligned: two groups of one size either coincide or are disjoint
    for a in groups:
        for b in groups:
            if len(a) == len(b) and set(a) & set(b):
                assert set(a) == set(b)


def test_placement_respects_existing_replicas_and_slots():
    existing = [PlanReplica(3, 4, (0, 1, 2, 3)), PlanReplica(2, 2, (4, 5))]
    scores = [[1.0], [], [0.5, 0.4], [2.0]]
    actions = plan_prewarm(scores, TPS, PAGES, existing, [POOL] * 16, [30] * 16, NODES)
    all_groups = [r.gpus for r in existing] + [g for _, g in actions]
    assert _laminar(all_groups)
    for m, group in actions:
        if m == 2:
            # the second 13B replica must not touch GPUs 4-5 (same model)
            assert not set(group) & {4, 5}
    none = plan_prewarm(scores, TPS, PAGES, [], [POOL] * 16, [0] * 16, NODES)
    assert none == []


def test_compat_rules():
    big = PlanReplica(0, 4, (0, 1, 2, 3))
    assert compatible((0, 1), 1, 2, [big])  # inside a larger replica
    assert not compatible((3, 4), 1, 2, [big])  # straddles it
    assert not compatible((0, 1), 0, 2, [big])  # same model
    pair = PlanReplica(2, 2, (4, 5))
    assert compatible((4, 5), 1, 2, [pair])
    assert not compatible((5, 6), 1, 2, [pair])
    assert compatible((4, 5, 6, 7), 1, 4, [pair])  # contains the smaller one


def test_scores_by_hand():
    n_f, n_b, s = model_scores(pred_avg=40, pred_peak=100, running=1, batch=32, tcold_s=0.4)
    # k_avg = 2, k_peak = 4 → nF = 1, nB = 2, N = 3, burst 2.5
    assert (n_f, n_b) == (1, 2)
    expect = [0.4, 0.4 * 2.5 * math.exp(-1 / 3), 0.4 * 2.5 * math.exp(-2 / 3)]
    assert all(math.isclose(a, b) for a, b in zip(s, expect, strict=True))
    assert model_scores(10, 0, 0, 32, 1.0) == (0, 0, [])


def test_round_robin_ablation_places_models_in_turn():
    scores = [[1.0, 1.0], [1.0], [1.0], [1.0]]
    actions = plan_prewarm(scores, TPS, PAGES, [], [POOL] * 16, [30] * 16, NODES, smart=False)
    assert [m for m, _ in actions][:4] == [0, 1, 2, 3]
    assert actions[0][1] == (0,)
    assert actions[2][1] == (0, 1)
