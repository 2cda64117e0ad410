"""SGLang's ``--scheduler-recv-interval``: the scheduler takes new requests only every N decodes.

SGLang's event loop starts each iteration by receiving what the tokenizer sent
(``recv_requests``). With ``--scheduler-recv-interval N > 1`` a ``SchedulerRecvSkipper``
(``managers/scheduler_recv_skipper.py``, Apache-2.0) gates that: each iteration adds the
weight of the last batch's forward mode to a counter — 1 for a decode (or verify) step,
1,000 for any other (an extend / prefill step) — and the scheduler receives, resetting the
counter, only once it reaches N. So while the engine decodes, a request that arrives waits
for up to N decode steps before the scheduler sees it; after a prefill step it is received at
once. InferenceX's SGLang recipes launch with it on B200/B300 (``--scheduler-recv-interval
10``, 30 from 16 clients on, e.g. ``benchmarks/single_node/dsr1_fp8_b200.sh``).

Tidal keeps arrived requests in the waiting queue (the engine's ``has_work`` and the driver see
them), and this gate marks which of them the scheduler has *received*: admission stops at the
first one it has not (they are the newest, at the queue's tail under FCFS). Deviations: an
idle engine receives at once (SGLang's idle loop spins through N iterations in microseconds),
and so does an engine whose running set is empty; the counter starts at 0.

Fast-forward stays exact: a pure-decode run never crosses the step at which the counter
reaches N (:meth:`RecvGate.steps_to_recv` caps it), so every receive happens at a step
boundary where the per-step loop would receive too.
"""

from __future__ import annotations

from collections.abc import Iterable

from tidal.core.request import Request
from tidal.engine.plan import StepPlan

PREFILL_WEIGHT = 1000
"""``_DEFAULT_WEIGHT``: what any non-decode step adds to the counter (receive right after)."""
DECODE_WEIGHT = 1
"""``_WEIGHT_OF_FORWARD_MODE[DECODE]``: what one decode step adds."""


class RecvGate:
    """Which waiting requests SGLang's scheduler has received (interval ``n`` > 1)."""

    __slots__ = ("counter", "n", "received")

    def __init__(self, n: int) -> None:
        if n < 2:
            raise ValueError("a receive gate needs an interval of at least 2 (1: every step)")
        self.n = n
        self.counter = 0
        """Weight of the steps since the last receive."""
        self.received: set[int] = set()
        """Ids of the requests received and not yet finished."""

    def on_schedule(self, waiting: Iterable[Request], idle: bool) -> None:
        """Start of an iteration: receive every request waiting now if the counter reached the
        interval (or the engine is ``idle``); ``waiting`` is iterated only then."""
        if idle or self.counter >= self.n:
            self.counter = 0
            self.received.update(r.request_id for r in waiting)

    def after_step(self, plan: StepPlan, num_steps: int) -> None:
        """Commit: a step with prefills weighs 1,000, each decode step 1."""
        if plan.prefills:
            self.counter += PREFILL_WEIGHT
        elif plan.num_decodes:
            self.counter += DECODE_WEIGHT * num_steps

    def admits(self, req: Request) -> bool:
        return req.request_id in self.received

    def leave(self, req: Request) -> None:
        self.received.discard(req.request_id)

    def steps_to_recv(self) -> int:
        """Decode steps from now until the next receive (≥ 1)."""
        return max(1, -(-(self.n - self.counter) // DECODE_WEIGHT))
