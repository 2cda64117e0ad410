"""A new batching policy in one file: mixed batching with a per-step prefill-token cap.

Decodes first (every decoding request computes its token), then prefill chunks of running and
admitted requests while the step holds at most ``max_prefill_tokens`` prefill tokens — the
knob that trades TTFT for TPOT. Everything that changes requests or KV goes through the engine
state (``schedule_running``, ``admit``); the policy only picks the step's budget.

Use it by importing this file (it registers ``decode-first``): ``tidal simulate --policy-module
docs/examples/decode_first.py --batching decode-first``, or in a config (a path there is
relative to the config file's directory; this one is for a config in docs/examples/)

    policy_modules: [decode_first.py]
    scheduler: {batching: decode-first, options: {max_prefill_tokens: 256}}
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tidal.engine.plan import StepPlan
from tidal.engine.policy import BATCHING, BatchingPolicy
from tidal.engine.state import EngineState


class DecodeFirstOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_prefill_tokens: int = Field(default=512, ge=1)
    """Prefill tokens per step, at most (decodes are not counted)."""


@BATCHING.register("decode-first")
class DecodeFirst(BatchingPolicy):
    """Mixed batching with at most max_prefill_tokens prefill tokens per step."""

    name = "decode-first"
    Options = DecodeFirstOptions

    def __init__(self, state: EngineState, options: DecodeFirstOptions) -> None:
        super().__init__(state, options)
        self.max_prefill = options.max_prefill_tokens

    def schedule(self, now_ns: int) -> StepPlan:
        st = self.state
        budget = st.step_budget
        st.waiting.refresh(now_ns)
        plan = StepPlan()
        left = st.schedule_running(plan, min(budget, len(st.pool) + self.max_prefill))
        if not plan.preempted:
            st.admit(plan, left, now_ns)
        return plan
