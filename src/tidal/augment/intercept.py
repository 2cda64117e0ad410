"""What to do with a paused request's KV context while its call runs (registry ``intercept``).

The mechanisms (discard, chunked swap-out, preserve) live in the scheduler
(:class:`tidal.augment.component.Augmentation`); a policy only decides:

* ``vllm`` — vLLM as run by INFERCEPT: the call ends the request, its KV is freed, and the return
  re-enters as a new request (whole context + returned tokens) at the *tail* of the FCFS queue
  (docs/research/augserve.md §2.5; the tail comes from the ``fcfs`` ordering it is bundled with);
* ``discard``, ``preserve``, ``swap`` — one fixed choice for every call (ablations, tests);
* ``infercept`` — INFERCEPT's min-waste interception (docs/research/augserve.md §2.3–2.4): a paused
  request starts as Preserve; every iteration the Preserve-paused requests are ranked by ``min(W_P,
  W_D)`` (remaining predicted call time, chunked recompute), largest first; while the swap pipeline
  has room (less than one iteration's swap budget queued) and the host has space, the largest is
  swapped out — if the budgeted swap waste ``C·T_swap(C)`` is below its ``min(W_P, W_D)`` [INF: the
  paper swaps "the largest" unconditionally; the guard keeps a 0.1 ms calculator call from being
  swapped]; every other one is discarded now if ``W_D < W_P``, else kept (re-decided next
  iteration). With the prefix cache, ``W_D`` is that of the ``C − H`` tokens the resume would
  recompute, ``H`` the blocks expected to stay cached through the call
  (:func:`~tidal.augment.waste.expected_cached_tokens`).

Fast-forward note: in a pure-decode run ``W_P`` only falls (the call's remaining time shrinks)
and ``W_D`` only rises (the running contexts grow), so a request kept at one iteration is kept
at the next unless a swap starts, and the scheduler never fast-forwards while swaps are queued.
With the prefix cache ``W_D`` is that of ``C − H``, and ``H`` moves either way during a run (the
call's remaining time shrinks, the free blocks too; the chunked form is not monotone in the
tokens either): while such a context is kept, :attr:`InterceptPolicy.unsettled` makes the
scheduler step one iteration at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidal.augment.moves import cache_outlook
from tidal.augment.state import AugRun, KVMode
from tidal.augment.waste import (
    expected_cached_tokens,
    waste_discard_chunked,
    waste_preserve,
    waste_swap_budgeted,
)
from tidal.core.registry import Registry
from tidal.core.request import Request

if TYPE_CHECKING:
    from tidal.augment.component import Augmentation


class InterceptPolicy:
    name = "base"
    unsettled = False
    """Whether a context kept at this iteration may be decided otherwise at a later one of
    the same pure-decode run (no fast-forward meanwhile)."""

    def on_pause(self, s: Augmentation, req: Request, run: AugRun, now_ns: int) -> None:
        """A request just paused with its context on the GPU (default: Preserve)."""

    def per_iteration(self, s: Augmentation, now_ns: int) -> None:
        """Called at the start of every schedule (default: nothing)."""


INTERCEPTS: Registry[type[InterceptPolicy]] = Registry("intercept")


@INTERCEPTS.register("preserve")
class PreservePolicy(InterceptPolicy):
    name = "preserve"


@INTERCEPTS.register("discard")
class DiscardPolicy(InterceptPolicy):
    name = "discard"

    def on_pause(self, s: Augmentation, req: Request, run: AugRun, now_ns: int) -> None:
        s.discard(req)


@INTERCEPTS.register("vllm")
class VLLMPolicy(DiscardPolicy):
    name = "vllm"


@INTERCEPTS.register("swap")
class SwapPolicy(InterceptPolicy):
    """Swap every call's context out (Preserve when the host is full)."""

    name = "swap"

    def on_pause(self, s: Augmentation, req: Request, run: AugRun, now_ns: int) -> None:
        if s.host_room_blocks() >= req.num_blocks:
            s.start_swap_out(req)


@INTERCEPTS.register("infercept")
class MinWastePolicy(InterceptPolicy):
    name = "infercept"

    def per_iteration(self, s: Augmentation, now_ns: int) -> None:
        self.unsettled = False
        cands = [r for r in s.paused.values() if s.runs[r.request_id].mode == KVMode.GPU]
        if not cands:
            return
        prof = s.env.profile
        t_tok = s.env.swap_ns_per_token / 1e9
        batch = s.running_batch_tokens()
        run_tokens = s.running_gpu_tokens()
        cache = cache_outlook(s)
        scored = []
        for r in cands:
            run = s.runs[r.request_id]
            ctx = r.num_computed_tokens
            remaining = s.predictor.call_s(r, run.pred, run.k) - (now_ns - run.pause_ns) / 1e9
            w_p = waste_preserve(remaining, ctx)
            hit = 0
            if cache is not None and r.content is not None:
                hit = expected_cached_tokens(ctx, s.kv.block_size, remaining, *cache)
            w_d = waste_discard_chunked(ctx - hit, batch, run_tokens, prof)
            scored.append((min(w_p, w_d), r.request_id, r, ctx, w_p, w_d))
        scored.sort(key=lambda x: (-x[0], x[1]))
        for w_min, _, r, ctx, w_p, w_d in scored:
            if (
                s.swap_out_pending_tokens() < s.swap_iter_tokens
                and s.host_room_blocks() >= r.num_blocks
                and waste_swap_budgeted(ctx, t_tok) < w_min
            ):
                s.start_swap_out(r)
            elif w_d < w_p:
                s.discard(r)
            elif cache is not None and r.content is not None and ctx >= s.kv.block_size:
                self.unsettled = True  # its expected re-hit H moves with time and free blocks
