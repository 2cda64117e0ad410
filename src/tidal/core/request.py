"""A request and its progress, counted the vLLM-v1 way (docs/DESIGN.md §1).

``num_computed_tokens`` chases ``num_tokens`` (prompt + generated + returned by external calls).
"Prefill" and "decode" are derived, not states: a request whose computed count is behind by more
than one token is prefilling (a prompt, a recompute after preemption, or a tool result); when it
catches up, the step samples one new token. Timestamps are integer nanoseconds, ``-1`` = not yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tidal.core.prefix_cache import BlockContent


class RequestState(IntEnum):
    WAITING = 0
    RUNNING = 1
    PAUSED = 2
    """Waiting on an external call (augmented requests)."""
    FINISHED = 3
    """Reached ``max_output_len`` (finish reason ``length``)."""
    ABORTED = 4
    """Dropped before it finished (client disconnect, external call, error)."""
    STOPPED = 5
    """Its :class:`StopRule` matched a sampled token (finish reason ``stop``; real engine)."""


FINISH_REASONS = {
    RequestState.FINISHED: "length",
    RequestState.STOPPED: "stop",
    RequestState.ABORTED: "abort",
}
"""The OpenAI/vLLM ``finish_reason`` of each ending state."""


@dataclass(frozen=True, slots=True)
class StopRule:
    """When a request ends before ``max_output_len`` (vLLM's stop conditions); the scheduler
    applies it to every token the request samples, in order (the simulator's requests have none:
    they run to their trace's output length, as ``--ignore-eos``)."""

    token_ids: frozenset[int] = frozenset()
    """End-of-sequence and ``stop_token_ids``: sampling one ends the request (it is output)."""
    check: Callable[[int], bool] | None = None
    """Fed each sampled token that is not in ``token_ids``; True ends the request (the API's
    stop strings match on the detokenised text)."""

    def __call__(self, token: int) -> bool:
        return token in self.token_ids or (self.check is not None and self.check(token))


@dataclass(slots=True, eq=False)
class Request:
    request_id: int
    arrival_ns: int
    prompt_len: int
    max_output_len: int
    """Output tokens to generate (the trace's output length; EOS ignored, as ``--ignore-eos``,
    unless a :attr:`stop` rule ends the request earlier)."""
    model: str = ""
    state: RequestState = RequestState.WAITING
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    num_extra_tokens: int = 0
    """Tokens appended by external calls (tool results); they are prefilled like the prompt."""
    num_blocks: int = 0
    """KV blocks held on the GPU (maintained by the KV block manager)."""
    first_scheduled_ns: int = -1
    first_token_ns: int = -1
    finish_ns: int = -1
    num_preemptions: int = 0
    pool_base: int = 0
    """Engine decode-pool bookkeeping: computed tokens = ``pool_base`` + pool steps while pooled."""
    in_pool: bool = False
    num_spec_steps: int = 0
    """Speculative verification steps done so far (survives preemption): the counter of the
    request's seeded acceptance draws (:mod:`tidal.engine.acceptance`)."""
    token_ids: list[int] | None = field(default=None)
    """Prompt then generated token ids; only the real engine fills these."""
    payload: object = None
    """Workload-specific data (e.g. the segments of an augmented request)."""
    content: BlockContent | None = None
    """What the tokens are, for prefix caching (None: unique, never shared)."""
    num_cached_tokens: int = -1
    """Prompt tokens found in the prefix cache at the first admission (-1: not yet)."""
    stop: StopRule | None = None
    """Ends the request early on a sampled token (real engine; None: only the length does)."""

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output_tokens + self.num_extra_tokens

    @property
    def is_finished(self) -> bool:
        return self.state >= RequestState.FINISHED

    @property
    def finish_reason(self) -> str | None:
        """``length``, ``stop`` or ``abort`` once the request ended; None before."""
        return FINISH_REASONS.get(self.state)

    def __repr__(self) -> str:
        return (
            f"Request(id={self.request_id}, state={self.state.name}, "
            f"computed={self.num_computed_tokens}/{self.num_tokens}, "
            f"out={self.num_output_tokens}/{self.max_output_len}, blocks={self.num_blocks})"
        )
