"""The instance scheduler: shared mechanisms, and the registry of batching policies.

vLLM-v1 semantics (``shared/research/ebplus.md`` §4.1): each step every running request asks for
its computed-token deficit (1 for a decode, the rest of a prompt for a prefill), decodes first,
within a token budget B and at most N running requests; new requests are admitted from the
waiting queue only when nothing was preempted in the step; a prompt that does not fit the
remaining budget is chunked (Sarathi-Serve). When KV blocks run out, the newest running request
is preempted by recompute (its blocks freed, its computed count reset, back to the queue front).

``schedule()`` returns a plain :class:`StepPlan`; ``update()`` applies a finished step. Neither
knows whether a latency model or a real model runner executed the step (DESIGN.md §1).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidal.core.kv import KVBlockManager
from tidal.core.registry import Registry
from tidal.core.request import Request, RequestState
from tidal.engine.decode_pool import DecodePool
from tidal.engine.eb_options import EBOptions
from tidal.engine.ordering import FCFSQueue, WaitingQueue
from tidal.engine.plan import StepPlan

if TYPE_CHECKING:
    from tidal.hardware.interference import StepCosts


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 8192
    """Token budget B per step."""
    max_num_seqs: int = 256
    """Running-request cap N."""
    long_prefill_token_threshold: int = 0
    """Cap on one request's prefill chunk per step (0: only the budget caps it)."""
    costs: StepCosts | None = None
    """The deployment's linear step costs (policies that reason about step cost: ``eb``)."""
    eb: EBOptions = field(default_factory=EBOptions)
    """Options of the exclusive-batching policies (``eb``, ``ebplus``)."""

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs (as vLLM requires)")


class Scheduler(ABC):
    """State (queue, running set, decode pool, KV) and the mechanisms every policy shares."""

    name = "base"

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
        self.pool = DecodePool(kv.block_size)
        self.on_finish: Callable[[Request], None] | None = None
        self.on_pause: Callable[[Request, int], None] | None = None
        """Set by the driver: a request paused on an external call that returns at the given
        time (ns); the driver must then call :meth:`resume` (augmented requests)."""
        self.admission_blocked_by_kv = False
        self.num_preemptions = 0
        self.num_steps = 0

    # ------------------------------------------------------------------ queries
    def add_request(self, req: Request) -> None:
        req.state = RequestState.WAITING
        self.waiting.push(req)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_work(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    # ------------------------------------------------------------------ policy
    @abstractmethod
    def schedule(self, now_ns: int) -> StepPlan:
        """Decide the next step. Allocates the step's KV blocks; does not advance progress."""

    def repeatable_steps(self, plan: StepPlan) -> tuple[int, bool]:
        """For fast-forward: how many consecutive steps (≥ 1, this one included) would be
        scheduled exactly like ``plan`` up to the decode pool's growth, and whether a new
        arrival could change that. The default, (1, True), disables fast-forward."""
        return 1, True

    def step_budget(self) -> int:
        """Token budget B of the step being scheduled (vLLM's ``max_num_batched_tokens``).
        Constant here; a composed policy may vary it per step (AugServe's dynamic budget)."""
        return self.config.max_num_batched_tokens

    def extra_metrics(self) -> dict[str, Any]:
        """Policy-specific summary metrics (merged into ``summary.json``)."""
        return {}

    def extra_tables(self) -> dict[str, dict[str, Any]]:
        """Policy-specific time series, written as ``DIR/<name>.parquet``."""
        return {}

    def resume(self, req: Request, now_ns: int) -> None:
        """An external call of ``req`` returned (policies that pause requests override)."""
        raise NotImplementedError(f"{self.name} does not pause requests")

    # ------------------------------------------------------------------ apply
    def update(self, plan: StepPlan, end_ns: int, num_steps: int = 1) -> None:
        """Apply ``num_steps`` executed steps of ``plan`` ending at ``end_ns``."""
        self.num_steps += num_steps
        departed: list[Request] = []
        if plan.num_decodes:
            if num_steps > 1:
                self.kv.take(self.pool.blocks_needed_range(1, num_steps))
            departed = self.pool.advance(num_steps)
        for req, n in plan.prefills:
            req.num_computed_tokens += n
            if req.num_computed_tokens >= req.num_tokens:
                req.num_output_tokens += 1
                if req.first_token_ns < 0:
                    req.first_token_ns = end_ns
                self.prefilling.remove(req)
                self._on_caught_up(req, end_ns)
        for req in departed:
            self._on_departure(req, end_ns)

    def _on_caught_up(self, req: Request, now_ns: int) -> None:
        """A prefill chunk reached the end of the request and sampled a token."""
        if req.num_output_tokens >= req.max_output_len:
            self._finish(req, now_ns)
        else:
            self.pool.join(req, req.max_output_len)

    def _on_departure(self, req: Request, now_ns: int) -> None:
        """A request left the decode pool at the output count it joined for."""
        self._finish(req, now_ns)

    # ------------------------------------------------------------------ mechanisms
    def _schedule_running(self, plan: StepPlan, budget: int) -> int:
        """Decodes, then running prefills (in admission order) within ``budget``; preempt the
        newest running requests while the step's KV blocks do not fit. Returns the budget left.

        Equivalent to vLLM v1's running loop: the kept set is the longest admission-order prefix
        whose block needs fit in the free blocks plus those of the preempted suffix."""
        pool, kv = self.pool, self.kv
        budget -= len(pool)
        chunks: list[tuple[Request, int]] = []
        chunk_need: dict[int, int] = {}
        need = pool.blocks_needed(0)
        cap = self.config.long_prefill_token_threshold
        for req in self.prefilling:
            if budget <= 0:
                break
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if cap:
                n = min(n, cap)
            chunks.append((req, n))
            budget -= n
            blocks = kv.blocks_for(req.num_computed_tokens + n) - req.num_blocks
            chunk_need[req.request_id] = blocks
            need += blocks
        while need > kv.num_free_blocks:
            if self._reclaim(need - kv.num_free_blocks):
                continue
            victim = next(reversed(self.running.values()))
            if victim.in_pool:
                need -= 1 if pool.needs_block(victim) else 0
            else:
                if victim.request_id in chunk_need:
                    need -= chunk_need.pop(victim.request_id)
                    for i, (r, n) in enumerate(chunks):
                        if r is victim:
                            budget += n
                            del chunks[i]
                            break
            self._preempt(victim)
            plan.preempted.append(victim)
        kv.take(pool.blocks_needed(0))
        for req, n in chunks:
            plan.add_chunk(req, n)
            kv.allocate(req, req.num_computed_tokens + n)
        plan.num_decodes = len(pool)
        plan.decode_ctx = pool.decode_ctx()
        return budget

    def _reclaim(self, num_blocks: int) -> bool:
        """Free up to ``num_blocks`` KV blocks held outside the running set before a running
        request is preempted; True if any were freed (default: nothing to reclaim)."""
        return False

    def _admit_waiting(
        self,
        plan: StepPlan,
        budget: int,
        now_ns: int,
        max_seqs: int | None = None,
        kv_ok: Callable[[Request], bool] | None = None,
    ) -> int:
        """Admit from the queue head while under N (``max_seqs``, default the configured N),
        within budget, and above the KV watermark — and, with ``kv_ok``, while it accepts the
        head (a KV forecast; a refusal counts as blocked by KV: it holds until the running set
        changes)."""
        self.admission_blocked_by_kv = False
        waiting, kv = self.waiting, self.kv
        if max_seqs is None:
            max_seqs = self.config.max_num_seqs
        cap = self.config.long_prefill_token_threshold
        while len(waiting) and len(self.running) < max_seqs and budget > 0:
            req = waiting.peek()
            # Prefix caching: the cached prefix counts as computed; its blocks that others
            # hold need no free block (hit = shared = 0 without caching).
            hit, shared = kv.match_prefix(req)
            n = min(req.num_tokens - req.num_computed_tokens - hit, budget)
            if cap:
                n = min(n, cap)
            blocks = kv.blocks_for(req.num_computed_tokens + hit + n) - req.num_blocks - shared
            if not kv.can_admit(blocks) or (kv_ok is not None and not kv_ok(req)):
                self.admission_blocked_by_kv = True
                break
            waiting.pop()
            self._start_running(req, now_ns)
            kv.commit_prefix(req, hit)
            if hit:
                self._on_prefix_hit(req, hit)
            plan.add_chunk(req, n)
            kv.allocate(req, req.num_computed_tokens + n)
            budget -= n
        return budget

    def _on_prefix_hit(self, req: Request, hit_tokens: int) -> None:  # noqa: B027 (a hook)
        """``req`` was admitted with ``hit_tokens`` found in the prefix cache (a policy that
        counts recomputation, e.g. after a Discard, hears of the tokens it was spared)."""

    def _start_running(self, req: Request, now_ns: int) -> None:
        req.state = RequestState.RUNNING
        self.running[req.request_id] = req
        self.prefilling.append(req)
        if req.first_scheduled_ns < 0:
            req.first_scheduled_ns = now_ns

    def _preempt(self, req: Request) -> None:
        """Preemption by recompute: free the KV, reset progress, requeue at the front."""
        if req.in_pool:
            self.pool.remove(req)
        else:
            self.prefilling.remove(req)
        self.kv.free(req)
        req.num_computed_tokens = 0
        req.state = RequestState.WAITING
        req.num_preemptions += 1
        self.num_preemptions += 1
        del self.running[req.request_id]
        self.waiting.push_front(req)

    def _finish(self, req: Request, now_ns: int) -> None:
        self.kv.free(req)
        del self.running[req.request_id]
        req.state = RequestState.FINISHED
        req.finish_ns = now_ns
        if self.on_finish is not None:
            self.on_finish(req)

    def abort(self, req: Request, now_ns: int) -> None:
        """Drop a request wherever it is (client disconnect); its KV is freed."""
        if req.request_id in self.running:
            if req.in_pool:
                self.pool.remove(req)
            else:
                self.prefilling.remove(req)
            self.kv.free(req)
            del self.running[req.request_id]
        elif req.state == RequestState.WAITING:
            self.waiting.remove(req)
        req.state = RequestState.ABORTED
        req.finish_ns = now_ns

    def check(self) -> None:
        """Assert the scheduler's invariants (tests and debugging; O(running))."""
        self.pool.materialize_all()
        resident = list(self.running.values())
        self.kv.check(resident)
        assert len(self.running) <= self.config.max_num_seqs
        assert len(self.pool) + len(self.prefilling) == len(self.running)
        for req in resident:
            assert req.num_blocks == self.kv.blocks_for(req.num_computed_tokens)
            if req.in_pool:
                assert req.num_computed_tokens == req.num_tokens - 1


BATCHING: Registry[type[Scheduler]] = Registry("batching")
