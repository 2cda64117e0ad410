"""One engine step's two messages: :class:`StepPlan`, the scheduler's decision (what to compute,
no tensors: vLLM v1's ``SchedulerOutput``, reduced to what a latency model and a model runner
need), and :class:`StepOutput`, what executing it produced (vLLM v1's ``ModelRunnerOutput``:
the duration and, on a real model, the sampled tokens), which the scheduler's ``update`` commits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tidal.core.request import Request
from tidal.engine.decode_pool import DecodePool
from tidal.hardware.perf import StepShape


@dataclass(slots=True)
class StepPlan:
    prefills: list[tuple[Request, int]] = field(default_factory=list)
    """Prefill chunks in batch order: (request, new tokens). Covers prompts, recomputes after
    preemption and tool results; a chunk that reaches the request's end samples a token."""
    num_decodes: int = 0
    """Requests of the decode pool, each computing exactly one token."""
    decodes: DecodePool | None = None
    """The decode pool whose members are this step's decodes (set when ``num_decodes`` > 0):
    member ``req`` computes its token at position ``decodes.computed(req)``. A view, valid
    until the step is committed (the pool advances lazily: no per-member cost here)."""
    decode_ctx: int = 0
    """Σ over decodes of the attended context (computed tokens + the new one)."""
    prefill_attn: int = 0
    prefill_ctx: int = 0
    preempted: list[Request] = field(default_factory=list)
    num_steps: int = 1
    """>1 when the simulator fast-forwards identical pure-decode steps in one event."""
    stall_ns: int = 0
    """Time the step spends on top of its compute (e.g. a KV swap that no compute hides);
    a step may consist of a stall alone."""
    events_see_step: bool = False
    """An external event during this step reads the scheduler's state (AugServe values a
    request entering the queue from the running batch's KV and the step's budget): a
    fast-forwarded run of this plan then ends at its last step boundary at or before the next
    event, so the step in flight at the event is scheduled as stepping schedules it
    (:mod:`tidal.engine.executor`). Otherwise the run takes every step starting by then."""
    spec_tokens: dict[int, list[int]] | None = None
    """Draft tokens per request id of decode members verified this step (vLLM's
    ``scheduled_spec_decode_tokens``; the real engine's speculative decoding): such a member
    computes ``1 + len(draft)`` tokens and may sample as many (None: no drafts)."""

    @property
    def prefill_tokens(self) -> int:
        return sum(n for _, n in self.prefills)

    @property
    def num_tokens(self) -> int:
        return self.num_decodes + self.prefill_tokens

    @property
    def is_empty(self) -> bool:
        return self.num_decodes == 0 and not self.prefills and self.stall_ns == 0

    @property
    def is_pure_decode(self) -> bool:
        return not self.prefills and self.num_decodes > 0

    def shape(self) -> StepShape:
        return StepShape(
            self.num_decodes,
            self.decode_ctx,
            self.prefill_tokens,
            self.prefill_attn,
            self.prefill_ctx,
            len(self.prefills),
        )

    def add_chunk(self, req: Request, num_new: int) -> None:
        s = req.num_computed_tokens
        self.prefills.append((req, num_new))
        self.prefill_attn += num_new * (2 * s + num_new)
        self.prefill_ctx += s + num_new


@dataclass(slots=True)
class StepOutput:
    """What executing a :class:`StepPlan` produced."""

    duration_ns: int = 0
    """Wall (runtime) or modelled (simulator) time of all ``plan.num_steps`` steps."""
    sampled: Sequence[tuple[Request, int]] = ()
    """(request, token) for every request that sampled a token, in batch order (real model
    only; the token is already appended to ``token_ids``). The simulator samples nothing: the
    counters say how many tokens a request has, and its requests have no stop rules."""
