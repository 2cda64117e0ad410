"""KV moves of idle contexts: pipelined swap transfers and reclaim (discard) before a
preemption.

Transfers are budgeted per direction at what the host link carries while the step computes
(``compute time / t_token``, INFERCEPT §2.2), so a swap never lengthens a computing step; a step
with nothing to compute but transfers pending is a pure transfer stall of one saturated
iteration's worth. Reclaim discards paused contexts first (the longest remaining predicted call
first: INFERCEPT's preemption fallback), then queued and swapping-in ones.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tidal.augment.state import KVMode
from tidal.core.request import Request, RequestState
from tidal.engine.plan import StepPlan

if TYPE_CHECKING:
    from tidal.augment.component import Augmentation


def transfer(aug: Augmentation, plan: StepPlan) -> None:
    """Move KV blocks within this step's per-direction budget (pipelined under compute);
    a step with no compute transfers one saturated iteration's worth as a stall."""
    if not aug.swap_out_q and not aug.swap_in_q:
        return
    aug._changed = True
    kv = aug.kv
    bs = kv.block_size
    t_tok = aug.env.swap_ns_per_token
    computes = plan.num_tokens > 0
    if computes:
        tokens = int(aug.env.perf.step_ns(*plan.shape()) / t_tok)
    else:
        tokens = aug.swap_iter_tokens
    budget = max(tokens // bs, 1 if not computes else 0)
    out_left = budget
    while aug.swap_out_q and out_left > 0:
        rid, req = next(iter(aug.swap_out_q.items()))
        moved = kv.swap_out_blocks(req, out_left)
        aug._idle_blocks -= moved
        aug.swap_out_blocks += moved
        out_left -= moved
        if req.num_blocks == 0:
            del aug.swap_out_q[rid]
            aug.runs[rid].mode = KVMode.SWAPPED
        elif moved == 0:  # host full: fall back to a discard (INFERCEPT)
            aug.discard(req)
    in_left = budget
    while aug.swap_in_q and in_left > 0:
        rid, req = next(iter(aug.swap_in_q.items()))
        moved = kv.swap_in_blocks(req, in_left, keep_free=kv.watermark_blocks)
        stuck = moved == 0 and not aug.running and not plan.num_tokens
        if stuck and reclaim(aug, min(in_left, kv.host_blocks_of(req)), keep=req):
            continue
        aug._swapin_blocks += moved
        aug.swap_in_blocks += moved
        in_left -= moved
        if kv.host_blocks_of(req) == 0:
            del aug.swap_in_q[rid]
            aug._swapin_blocks -= req.num_blocks
            aug._idle_blocks += req.num_blocks
            run = aug.runs[rid]
            run.mode = KVMode.GPU
            aug.enqueue(req, run, aug._now)
        elif moved == 0:
            break
    if not computes:
        moved = max(budget - out_left, budget - in_left)
        if moved:
            plan.stall_ns += math.ceil(moved * bs * t_tok)


def reclaim(aug: Augmentation, num_blocks: int, keep: Request | None = None) -> bool:
    """Discard idle contexts until ``num_blocks`` are freed: paused requests (longest
    remaining predicted call first), then queued ones (lowest priority first) and
    swapping-in ones, never ``keep``. Idle contexts go before a running request
    is preempted (INFERCEPT preempts its targets and "delayed" requests first)."""
    freed = 0
    now = aug._now
    aug.note_pressure()
    pred = aug.predictor

    def remaining(r: Request) -> float:
        run = aug.runs[r.request_id]
        return pred.call_s(r, run.pred, run.k) - (now - run.pause_ns) / 1e9

    victims = sorted(
        (r for r in aug.paused.values() if r.num_blocks),
        key=lambda r: (-remaining(r), r.request_id),
    )
    victims += [r for r in reversed(list(aug.waiting)) if r.num_blocks and r is not keep]
    victims += [r for r in reversed(aug.swap_in_q.values()) if r.num_blocks and r is not keep]
    for r in victims:
        freed += r.num_blocks
        swapping_in = r.request_id in aug.swap_in_q
        queued = not swapping_in and r.state == RequestState.WAITING
        if queued:
            aug.waiting.remove(r)
        aug.discard(r)
        if queued or swapping_in:
            aug.enqueue(r, aug.runs[r.request_id], now)
        aug.num_reclaims += 1
        if freed >= num_blocks:
            break
    return freed > 0


def cache_outlook(aug: Augmentation) -> tuple[int, float] | None:
    """With the prefix cache: (free GPU tokens, tokens/s the running batch claims at
    ``It(N)``), the inputs of a discarded context's expected re-hit
    (:func:`~tidal.augment.waste.expected_cached_tokens`); None without it, and None
    while requests queue: a discarded context returns needing a prefill, behind that
    backlog, and its blocks age in the LRU for the call *and* the wait (measured: counting
    the hit through a backlog cost AugServe 16 % at 6 req/s, GPT-J-6B)."""
    kv = aug.kv
    if not kv.prefix_caching or len(aug.waiting):
        return None
    batch = max(aug.running_batch_tokens(), 1)
    rate = batch / aug.env.profile.iteration_s(batch) if aug.running else 0.0
    return kv.num_free_blocks * kv.block_size, rate
