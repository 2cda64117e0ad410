"""The augmented-request component's exact accounting, invariant check and metrics.

GPU-memory waste is integrated exactly over time (block·ns, integers): idle KV of paused and
queued requests ("preserve"), memory held by requests waiting for their swap-in plus every
resident block during a transfer stall ("swap"), and every resident block during the share of
a step spent recomputing discarded or preempted context ("recompute"). ``recompute_time_share``
is the recomputing share of the computing steps' time (each step split by token share), the
quantity INFERCEPT measures for vLLM (37–40% of model forward time, docs/research/augserve.md §1.2).
(:class:`tidal.augment.component.Augmentation` calls :func:`integrate` at each event for the idle
and swap-in block·ns; :func:`account_step` adds a finished step's stall and recompute shares.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tidal.engine.plan import StepPlan

if TYPE_CHECKING:
    from tidal.augment.component import Augmentation


def integrate(aug: Augmentation, now_ns: int) -> None:
    """Add the idle and swap-in blocks' block·ns since the last event, up to ``now_ns``."""
    dt = now_ns - aug._t_acct
    if dt > 0:
        aug.idle_block_ns += aug._idle_blocks * dt
        aug.swapin_block_ns += aug._swapin_blocks * dt
        aug._t_acct = now_ns


def account_step(aug: Augmentation, plan: StepPlan, end_ns: int) -> None:
    """Waste accounting of the finished step (before the state applies it)."""
    integrate(aug, end_ns)
    used = aug._step_used
    if plan.stall_ns:
        aug.stall_block_ns += plan.stall_ns * used
    rec = 0
    for req, n in plan.prefills:
        run = aug.runs[req.request_id]
        if run.recompute_left:
            r = min(n, run.recompute_left)
            run.recompute_left -= r
            rec += r
    if plan.num_tokens:
        aug.forward_ns += end_ns - aug._step_start
    if rec:
        aug.recompute_tokens += rec
        aug.recompute_block_ns += (end_ns - aug._step_start) * used * rec / plan.num_tokens
        aug.recompute_ns += (end_ns - aug._step_start) * rec / plan.num_tokens


def check_component(aug: Augmentation) -> None:
    """Assert the component's invariants: KV residency, the idle and swap-in block counts, the
    running set's shape, and every queued context's blocks (GPU + host) covering its tokens."""
    aug.pool.materialize_all()
    kv = aug.kv
    queued = [r for r in aug.waiting if r.num_blocks]
    paused = list(aug.paused.values())
    swapping = list(aug.swap_in_q.values())
    remote = aug.state.remote  # a disaggregated decode leg's blocks while loading
    loading = list(remote.loading.values()) if remote is not None else []
    resident = [*aug.running.values(), *paused, *queued, *swapping, *loading]
    kv.check(resident)
    assert aug._idle_blocks == sum(r.num_blocks for r in paused + queued)
    assert aug._swapin_blocks == sum(r.num_blocks for r in swapping)
    assert len(aug.running) <= aug.state.config.max_num_seqs
    assert len(aug.pool) + len(aug.prefilling) == len(aug.running)
    for r in aug.running.values():
        assert r.num_blocks == kv.blocks_for(r.num_computed_tokens)
    loaded = {r.request_id for r in remote.ready} if remote is not None else set()
    for r in paused + list(aug.waiting) + swapping:  # (a loaded leg holds its prompt's)
        if r.request_id not in loaded:
            assert r.num_blocks + kv.host_blocks_of(r) == kv.blocks_for(r.num_computed_tokens)


def component_metrics(aug: Augmentation) -> dict[str, Any]:
    """The run's augmented-request metrics: intercepts and their resolutions, recompute and
    swap volumes, the three wastes (GB·s), the mean token budget and starvation promotions."""
    m_gb = aug.kv.block_size * aug.env.kv_bytes_per_token / 1e9 / 1e9  # block·ns → GB·s
    return {
        "num_intercepts": aug.num_intercepts,
        "intercepts_preserved": aug.resolved[0],
        "intercepts_discarded": aug.resolved[1],
        "intercepts_swapped": aug.resolved[2],
        "recompute_tokens": aug.recompute_tokens,
        "recompute_hit_tokens": aug.recompute_hit_tokens,
        "recompute_time_share": aug.recompute_ns / max(aug.forward_ns, 1),
        "swap_out_tokens": aug.swap_out_blocks * aug.kv.block_size,
        "swap_in_tokens": aug.swap_in_blocks * aug.kv.block_size,
        "kv_reclaims": aug.num_reclaims,
        "waste_preserve_gb_s": aug.idle_block_ns * m_gb,
        "waste_recompute_gb_s": aug.recompute_block_ns * m_gb,
        "waste_swap_gb_s": (aug.swapin_block_ns + aug.stall_block_ns) * m_gb,
        "token_budget_mean": aug.budget_sum / max(aug.budget_n, 1),
        "swap_link_gbs": aug.env.kv_bytes_per_token / aug.env.swap_ns_per_token,
        "starvation_promotions": getattr(aug.waiting, "num_promoted", 0),
    }
