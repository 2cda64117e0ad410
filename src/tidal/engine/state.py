"""``EngineState``: an instance's requests and KV cache, and the only code that changes them.

It owns the waiting queue, the running set (admission order), the running prefills and the
decode pool over a :class:`~tidal.core.kv.KVBlockManager`, and performs the vLLM-v1 mechanisms
every batching policy shares — chunk, admit, preempt by recompute, finish and apply, abort and
detach — each ending an event to the :class:`StateListener` s: ``docs/design/engine-state.md``.

Invariants (:meth:`check`, :func:`tidal.engine.state_check.check_state`): every running
request is in exactly one of the pool and the prefills, holds ``blocks_for(num_computed_tokens)``
blocks, and at most N run.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import TYPE_CHECKING, Any

from tidal.core.kv import KVBlockManager
from tidal.core.request import Request, RequestState
from tidal.engine.events import CallStops, StateListener, StateView
from tidal.engine.ordering import FCFSQueue, WaitingQueue
from tidal.engine.plan import StepPlan
from tidal.engine.spec_pool import make_pool
from tidal.engine.state_check import check_state

if TYPE_CHECKING:
    from tidal.engine.remote_kv import RemoteKV
    from tidal.engine.scheduler import SchedulerConfig

__all__ = ["AdmissionTest", "CallStops", "EngineState", "StateListener", "StateView"]

AdmissionTest = Callable[[Request], bool]

_FINISHED = RequestState.FINISHED
_STOPPED = RequestState.STOPPED


class EngineState:
    def __init__(
        self, config: SchedulerConfig, kv: KVBlockManager, waiting: WaitingQueue | None = None
    ) -> None:
        self.config = config
        self.kv = kv
        self.waiting: WaitingQueue = waiting if waiting is not None else FCFSQueue()
        self.running: dict[int, Request] = {}
        """Running requests in admission order; the last one is the preemption victim."""
        self.prefilling: list[Request] = []
        """Running requests still behind on computed tokens (not in the decode pool)."""
        self.pool = make_pool(kv.block_size, config.speculation)
        self.listeners: list[StateListener] = []
        """Receivers of the events, in order (:meth:`add_listener`)."""
        self._started: list[Any] = []
        self._preempted: list[Any] = []
        self._finishing: list[Any] = []
        self._finished: list[Any] = []
        self._aborted: list[Any] = []
        self._reclaimers: list[Any] = []
        self._prefix_hit: list[Any] = []
        self.stops: CallStops | None = None
        self.on_finish: Callable[[Request], None] | None = None
        """Set by the driver: a request finished."""
        self.admission_blocked_by_kv = False
        """The last admission stopped at a head the KV cache (or the admission test) refused."""
        self.num_preemptions = 0
        self.num_steps = 0
        self.step_budget = config.max_num_batched_tokens
        """Token budget B of the step being scheduled (a component may vary it per step:
        AugServe's dynamic budget)."""
        self._cap = config.long_prefill_token_threshold
        self.remote: RemoteKV | None = None
        """Disaggregated decode instance: legs whose KV is pulled (``engine/remote_kv.py``)."""

    # ------------------------------------------------------------------ queries
    def has_work(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    def chunk(self, req: Request, budget: int) -> tuple[int, int]:
        """(tokens still to prefill, this step's chunk within ``budget`` and the cap)."""
        deficit = req.num_tokens - req.num_computed_tokens
        cap = self._cap
        return deficit, min(deficit, budget, cap) if cap else min(deficit, budget)

    def chunk_blocks(self, req: Request, n: int) -> int:
        """New KV blocks a chunk of ``n`` tokens of ``req`` needs."""
        return self.kv.blocks_for(req.num_computed_tokens + n) - req.num_blocks

    def add_listener(self, listener: StateListener, first: bool = False) -> None:
        """Send the state's events to ``listener`` (only the hooks it overrides are called)."""
        if first:
            self.listeners.insert(0, listener)
        else:
            self.listeners.append(listener)
        self._started = self._hooks("on_started")
        self._preempted = self._hooks("on_preempted")
        self._finishing = self._hooks("before_finish")
        self._finished = self._hooks("on_finished")
        self._aborted = self._hooks("on_aborted")
        self._reclaimers = self._hooks("reclaim")
        self._prefix_hit = self._hooks("on_prefix_hit")

    def _hooks(self, name: str) -> list[Any]:
        default = getattr(StateListener, name)
        return [getattr(x, name) for x in self.listeners if getattr(type(x), name) is not default]

    def _reclaim(self, num_blocks: int, keep: Request | None = None) -> bool:
        return any(fn(num_blocks, keep) for fn in self._reclaimers)

    # ------------------------------------------------------------------ mechanisms
    def add(self, req: Request) -> None:
        req.state = RequestState.WAITING
        self.waiting.push(req)

    def schedule_running(self, plan: StepPlan, budget: int, prefills: bool = True) -> int:
        """Decodes, then (with ``prefills``) running prefills in admission order within
        ``budget``; preempt the newest running requests while the step's KV blocks do not fit.
        Returns the budget left; the victims are in ``plan.preempted``."""
        pool, kv = self.pool, self.kv
        bp = kv.pool  # the block pool itself: this runs every step, so no delegation layer
        n_dec = len(pool.members)
        budget -= n_dec * pool.rows_per_decode
        chunks: list[tuple[Request, int]] = []
        chunk_need: dict[int, int] = {}
        need = pool_need = pool.blocks_needed(0)
        preempted = False
        if prefills and self.prefilling:
            cap, blocks_for = self._cap, kv.blocks_for
            for req in self.prefilling:
                if budget <= 0:
                    break
                n = req.num_tokens - req.num_computed_tokens  # the chunk (:meth:`chunk`)
                n = min(n, budget, cap) if cap else min(n, budget)
                chunks.append((req, n))
                budget -= n
                blocks = blocks_for(req.num_computed_tokens + n) - req.num_blocks
                chunk_need[req.request_id] = blocks
                need += blocks
        while need > bp.num_free_blocks:
            if self._reclaim(need - bp.num_free_blocks):
                continue
            victim = next(reversed(self.running.values()))
            if victim.in_pool:
                need -= pool.needs_block(victim)
            elif victim.request_id in chunk_need:
                need -= chunk_need.pop(victim.request_id)
                for i, (r, n) in enumerate(chunks):
                    if r is victim:
                        budget += n
                        del chunks[i]
                        break
            self.preempt(victim)
            plan.preempted.append(victim)
            preempted = True
        if preempted:  # victims may have left the pool
            pool_need = pool.blocks_needed(0)
            n_dec = len(pool.members)
        bp.take(pool_need)
        for req, n in chunks:
            plan.add_chunk(req, n)
            kv.allocate(req, req.num_computed_tokens + n)
        plan.num_decodes = n_dec
        plan.decodes = pool
        plan.decode_ctx = pool.decode_ctx()
        return budget

    def continue_prefills(self, plan: StepPlan, budget: int) -> tuple[int, int]:
        """A prefill-only step's running part: every pending chunk in admission order that
        fits the budget and the free blocks (one that does not is skipped, nothing is
        preempted). Returns (budget left, prompts completed)."""
        done = 0
        for req in list(self.prefilling):
            if budget <= 0:
                break
            deficit, n = self.chunk(req, budget)
            if self.chunk_blocks(req, n) > self.kv.num_free_blocks:
                continue
            self.add_chunk(plan, req, n)
            budget -= n
            done += n == deficit
        return budget, done

    def admit(
        self,
        plan: StepPlan,
        budget: int,
        now_ns: int,
        max_seqs: int | None = None,
        test: AdmissionTest | None = None,
        limit: int | None = None,
    ) -> tuple[int, int]:
        """Admit from the queue head while under ``max_seqs`` (default N), within budget,
        above the KV watermark, accepted by ``test`` and — with ``limit`` — until ``limit``
        prompts completed their prefill. Returns (budget left, prompts completed)."""
        waiting, kv, remote = self.waiting, self.kv, self.remote
        if max_seqs is None:
            max_seqs = self.config.max_num_seqs
        if remote is not None and remote.ready:  # loaded decode legs first (remote_kv.py)
            budget = remote.admit_ready(plan, budget, now_ns, max_seqs)
        if not len(waiting):
            self.admission_blocked_by_kv = False
            return budget, 0
        remaining = limit if limit is not None else 1 << 62
        done = 0
        cap, blocks_for = self._cap, kv.blocks_for
        while True:
            self.admission_blocked_by_kv = False
            while len(waiting) and len(self.running) < max_seqs and budget > 0 and remaining > 0:
                req = waiting.peek()
                if remote is not None and remote.claims(req):  # blocks now, KV pulled later
                    if not remote.allocate(req, now_ns):
                        self.admission_blocked_by_kv = True
                        break
                    waiting.pop()
                    continue
                # prefix caching: the cached prefix counts as computed; its blocks that others
                # hold need no free block (hit = shared = 0 without caching)
                hit, shared = kv.match_prefix(req)
                deficit = req.num_tokens - req.num_computed_tokens - hit  # (:meth:`chunk`)
                n = min(deficit, budget, cap) if cap else min(deficit, budget)
                blocks = blocks_for(req.num_computed_tokens + hit + n) - req.num_blocks - shared
                if not kv.can_admit(blocks) or (test is not None and not test(req)):
                    self.admission_blocked_by_kv = True
                    break
                waiting.pop()
                self.start_running(req, now_ns)
                kv.commit_prefix(req, hit)
                if hit:
                    if kv.pending_load_ns:  # host-tier hits: loaded before the step computes
                        plan.stall_ns += kv.pending_load_ns
                        kv.pending_load_ns = 0
                    for fn in self._prefix_hit:
                        fn(req, hit)
                plan.add_chunk(req, n)
                kv.allocate(req, req.num_computed_tokens + n)
                budget -= n
                if n == deficit:
                    done += 1
                    remaining -= 1
            if not self.admission_blocked_by_kv or budget <= 0 or self.running:
                return budget, done
            head = waiting.peek()
            hit, shared = kv.match_prefix(head)  # the head's need as the loop counts it
            n = min(head.num_tokens - head.num_computed_tokens - hit, budget, cap or budget)
            need = blocks_for(head.num_computed_tokens + hit + n) - head.num_blocks - shared
            short = need + kv.watermark_blocks - kv.num_free_blocks
            if short <= 0 or not self._reclaim(short, keep=head):
                return budget, done

    def add_chunk(self, plan: StepPlan, req: Request, n: int) -> None:
        plan.add_chunk(req, n)
        self.kv.allocate(req, req.num_computed_tokens + n)

    def start_running(self, req: Request, now_ns: int) -> None:
        for fn in self._started:
            fn(req)
        req.state = RequestState.RUNNING
        self.running[req.request_id] = req
        self.prefilling.append(req)
        if req.first_scheduled_ns < 0:
            req.first_scheduled_ns = now_ns

    def _leave_running(self, req: Request) -> None:
        if req.in_pool:
            self.pool.remove(req)
        else:
            self.prefilling.remove(req)
        del self.running[req.request_id]

    def preempt(self, req: Request) -> None:
        """Preemption by recompute: free the KV, reset progress, requeue at the front."""
        self._leave_running(req)
        self.kv.free(req)
        lost = req.num_computed_tokens
        req.num_computed_tokens = 0
        req.state = RequestState.WAITING
        req.num_preemptions += 1
        self.num_preemptions += 1
        for fn in self._preempted:
            fn(req, lost)
        self.waiting.push_front(req)

    def finish(self, req: Request, now_ns: int, state: RequestState = _FINISHED) -> None:
        """``req`` (out of the pool and the prefills, still running) ends as ``state``
        (``FINISHED``: its length; ``STOPPED``: its stop rule)."""
        for fn in self._finishing:
            fn(req)
        req.state = state  # before the free: the cache may drop its own blocks
        self.kv.free(req)
        del self.running[req.request_id]
        req.finish_ns = now_ns
        if self.on_finish is not None:
            self.on_finish(req)
        for fn in self._finished:
            fn(req, now_ns)

    def abort(self, req: Request, now_ns: int) -> None:
        """Drop a request wherever it is (client disconnect); its KV is freed."""
        self._drop(req)
        self.aborted(req, now_ns)

    def aborted(self, req: Request, now_ns: int) -> None:
        """``req``, already out of the running set and the queue, ends as ``ABORTED``; the
        listeners hear it."""
        req.state = RequestState.ABORTED
        req.finish_ns = now_ns
        for fn in self._aborted:
            fn(req, now_ns)

    def detach(self, req: Request, now_ns: int) -> None:
        """``req`` leaves to wait on an external call (the real engine's discard fallback): its
        KV is freed and its progress reset; :meth:`reattach` brings it back. Listeners hear an
        abort (the request left before finishing)."""
        self._drop(req)
        req.num_computed_tokens = 0
        req.state = RequestState.PAUSED
        for fn in self._aborted:
            fn(req, now_ns)

    def reattach(self, req: Request, tokens: Sequence[int]) -> None:
        """The external call of a detached ``req`` returned ``tokens``: append them (they are
        prefilled like a prompt, with everything before them) and queue ``req`` at the tail."""
        if req.state != RequestState.PAUSED:
            raise ValueError(f"request {req.request_id} is not waiting on an external call")
        assert req.token_ids is not None
        req.token_ids.extend(tokens)
        req.num_extra_tokens += len(tokens)
        req.finish_ns = -1
        self.add(req)

    def pause(self, req: Request) -> None:
        """``req`` (out of the decode pool) stops at a tool call keeping its KV: it leaves the
        running set, blocks held, until :meth:`ready` (augmented requests' components)."""
        del self.running[req.request_id]
        req.state = RequestState.PAUSED

    def ready(self, req: Request) -> None:
        """A paused ``req``'s call returned: it waits again, in its component's queue."""
        req.state = RequestState.WAITING

    def _drop(self, req: Request) -> None:
        if req.request_id in self.running:
            self._leave_running(req)
            self.kv.free(req)
        elif req.state == RequestState.WAITING:
            self.waiting.remove(req)

    # ------------------------------------------------------------------ apply
    def apply(
        self,
        plan: StepPlan,
        end_ns: int,
        num_steps: int = 1,
        sampled: Sequence[tuple[Request, int]] = (),
    ) -> None:
        """Apply ``num_steps`` executed steps of ``plan`` ending at ``end_ns``; ``sampled``:
        the (request, token) pairs a real model sampled in the step (stop rules)."""
        stopped = _stopped(sampled) if sampled else ()
        self.num_steps += num_steps
        departed: list[Request] = []
        pool = self.pool
        if plan.num_decodes:
            if num_steps > 1:
                self.kv.take(pool.blocks_needed_range(1, num_steps))
            departed = pool.advance(num_steps)
        for req, n in plan.prefills:
            req.num_computed_tokens += n
            if req.num_computed_tokens >= req.num_tokens:
                req.num_output_tokens += 1
                if req.first_token_ns < 0:
                    req.first_token_ns = end_ns
                self.prefilling.remove(req)
                self._caught_up(req, end_ns, stopped)
        stops = self.stops
        for req in departed:
            if stops is None or not stops.stopped(req, end_ns):
                self.finish(req, end_ns, _STOPPED if req in stopped else _FINISHED)
        for req in stopped:  # stopped before its length: it is still decoding
            if req.in_pool:
                self.pool.remove(req)
                self.finish(req, end_ns, _STOPPED)

    def _caught_up(self, req: Request, now_ns: int, stopped: Container[Request] = ()) -> None:
        """A prefill chunk reached the end of the request and sampled a token."""
        stops = self.stops
        if stops is not None and stops.stopped(req, now_ns):
            return
        if req in stopped:
            self.finish(req, now_ns, _STOPPED)
        elif req.num_output_tokens >= req.max_output_len:
            self.finish(req, now_ns)
        else:
            self.pool.join(req, req.max_output_len if stops is None else stops.target(req))

    def check(self) -> None:
        """Assert the invariants of the running set (tests and debugging; O(running))."""
        check_state(self)


def _stopped(sampled: Sequence[tuple[Request, int]]) -> dict[Request, None]:
    """The requests whose stop rule matches the token they sampled, in batch order (each rule
    sees every token of its request once, in order: stop strings accumulate text)."""
    return {req: None for req, tok in sampled if req.stop is not None and req.stop(tok)}
