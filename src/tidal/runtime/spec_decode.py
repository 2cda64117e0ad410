"""Speculative decoding in the real engine: the scheduler that drafts, budgets and commits it.

:class:`SpeculativeScheduler` is the engine's :class:`~tidal.engine.scheduler.Scheduler` with
vLLM v1's accounting of draft tokens (``--speculative-config``, method ``ngram``):

* **schedule**: before the batching policy runs, each decode member that may speculate (plain
  greedy sampling: :meth:`ModelRunner.can_speculate`) gets a draft from the proposer
  (:class:`~tidal.runtime.ngram.NgramProposer`) over its token ids; the drafts spend the step's
  token budget first (a member computes ``1 + len(draft)`` tokens, as vLLM schedules
  ``1 + len(spec_token_ids)``; drafts are cut where the budget ends), then the policy schedules
  the rest as usual. After it, each surviving member's lookahead blocks — those holding positions
  ``c + 1 … c + len(draft)`` beyond the block the pool charged for position ``c`` — are charged;
  a draft is cut to the free blocks rather than preempting anyone for it (vLLM preempts for
  lookahead slots; here speculation never costs a preemption). ``plan.spec_tokens`` carries the
  drafts to the runner, which verifies them (:mod:`tidal.runtime.runner`).
* **update**: the lookahead charge is given back, the state commits each request's first token
  as for any decode step (its stop rule, its length), then the accepted tokens after it are
  applied one by one with the same rules, in the same order — a stop token or stop string, or
  ``max_tokens``, inside an accepted run ends the request there and the tokens after it are
  discarded (vLLM's scheduler does the same) — and the member rejoins the decode pool at its new
  length. Block tables are trimmed back to the blocks each request holds, so rejected positions'
  KV is overwritten later. ``output.sampled`` is left holding the kept tokens only.

Only the mixed-batching policy is supported (its steps always run every decode member).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tidal.core.errors import ConfigError
from tidal.core.kv import KVBlockManager
from tidal.core.request import Request, RequestState
from tidal.engine.build import make_policy
from tidal.engine.ordering import WaitingQueue
from tidal.engine.plan import StepOutput, StepPlan
from tidal.engine.policy import BatchingPolicy
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.engine.spec_config import SpeculativeConfig
from tidal.engine.state import EngineState
from tidal.runtime.ngram import NgramProposer

if TYPE_CHECKING:
    from tidal.augment.component import Augmentation
    from tidal.runtime.runner import ModelRunner

Proposer = Callable[[Request], list[int]]
"""A decode member's draft (empty: this member does not speculate this step)."""


class SpeculativeScheduler(Scheduler):
    def __init__(
        self,
        state: EngineState,
        policy: BatchingPolicy,
        propose: Proposer,
        augmentation: Augmentation | None = None,
    ) -> None:
        if augmentation is not None:
            raise ValueError("speculative decoding does not compose with augmented requests")
        super().__init__(state, policy)
        self.propose = propose
        self._lookahead: dict[int, int] = {}
        """Lookahead blocks charged per request id for the step in flight."""
        self._charged = 0

    # ------------------------------------------------------------------ schedule
    def schedule(self, now_ns: int) -> StepPlan:
        st = self.state
        self._release()
        drafts = self._draft()
        budget = st.step_budget
        st.step_budget = budget - sum(len(d) for d in drafts.values())
        try:
            plan = super().schedule(now_ns)
        finally:
            st.step_budget = budget
        if drafts and plan.num_decodes:
            plan.spec_tokens = self._reserve(drafts) or None
        return plan

    def _draft(self) -> dict[int, list[int]]:
        """Drafts of the decode members, in pool order, within the budget left after one token
        per member."""
        pool = self.state.pool
        room = self.state.step_budget - len(pool.members)
        drafts: dict[int, list[int]] = {}
        for rid, req in pool.members.items():
            if room <= 0:
                break
            draft = self.propose(req)[:room]
            if draft:
                drafts[rid] = draft
                room -= len(draft)
        return drafts

    def _reserve(self, drafts: dict[int, list[int]]) -> dict[int, list[int]]:
        """Charge each surviving member's lookahead blocks, cutting drafts to the free blocks;
        returns the drafts to verify."""
        pool, kv = self.state.pool, self.state.kv
        out: dict[int, list[int]] = {}
        for rid, draft in drafts.items():
            req = pool.members.get(rid)
            if req is None:  # preempted by this schedule
                continue
            c = pool.computed(req)
            base = kv.blocks_for(c + 1)  # charged by the pool for this step
            extra = kv.blocks_for(c + 1 + len(draft)) - base
            if extra > kv.num_free_blocks:
                draft = draft[: max(0, (base + kv.num_free_blocks) * kv.block_size - c - 1)]
                extra = kv.blocks_for(c + 1 + len(draft)) - base
            if not draft:
                continue
            if extra:
                kv.take(extra)
                self._charged += extra
            self._lookahead[rid] = extra
            out[rid] = draft
        return out

    # ------------------------------------------------------------------ update
    def update(self, plan: StepPlan, output: StepOutput, end_ns: int) -> None:
        """Commit the step: the first token of every request as usual, then the rest of each
        verified request's accepted run (see the module docstring)."""
        if not plan.spec_tokens:
            super().update(plan, output, end_ns)
            return
        runs: dict[int, tuple[Request, list[int]]] = {}
        for req, tok in output.sampled:
            runs.setdefault(req.request_id, (req, []))[1].append(tok)
        self._return_charge()
        first = [(req, toks[0]) for req, toks in runs.values()]
        super().update(plan, StepOutput(output.duration_ns, first), end_ns)
        kept: list[tuple[Request, int]] = []
        for req, toks in runs.values():
            n = 1
            if len(toks) > 1:
                n += self._extend(req, toks[1:], end_ns) if req.in_pool else 0
                if n < len(toks):  # tokens after the request's ending: discarded
                    assert req.token_ids is not None
                    del req.token_ids[n - len(toks) :]
            kept.extend((req, t) for t in toks[:n])
        self._trim()
        output.sampled = kept

    def _extend(self, req: Request, extra: list[int], end_ns: int) -> int:
        """Apply the tokens after a pool member's first one (already counted): each is checked
        against the stop rule, then the length, as the state checks a first token. Returns how
        many are kept; the member rejoins the pool or finishes."""
        st = self.state
        st.pool.remove(req)  # materialises the counters: the first token is counted
        done = req.max_output_len - req.num_output_tokens
        kept, ending = 0, None
        for tok in extra:
            kept += 1
            if req.stop is not None and req.stop(tok):
                ending = RequestState.STOPPED
                break
            if kept >= done:
                ending = RequestState.FINISHED
                break
        req.num_computed_tokens += kept
        req.num_output_tokens += kept
        st.kv.allocate(req, req.num_computed_tokens)
        if ending is None:
            st.pool.join(req, req.max_output_len)
        else:
            st.finish(req, end_ns, ending)
        return kept

    # ------------------------------------------------------------------ lookahead blocks
    def _return_charge(self) -> None:
        self.state.kv.pool.release(self._charged)
        self._charged = 0

    def _trim(self) -> None:
        """Cut the block tables of the step's verified requests back to the blocks they hold
        (the rejected positions' blocks return to the free list)."""
        st = self.state
        for rid in self._lookahead:
            req = st.running.get(rid)
            if req is not None and req.in_pool:
                st.kv.trim(req, st.kv.blocks_for(st.pool.computed(req)))
        self._lookahead.clear()

    def _release(self) -> None:
        """Give back a step's lookahead blocks that no update committed (a failed step)."""
        if self._charged or self._lookahead:
            self._return_charge()
            self._trim()

    def abort(self, req: Request, now_ns: int) -> None:
        self._release()
        super().abort(req, now_ns)

    def check(self) -> None:
        self._release()
        super().check()


RUNTIME_METHODS = ("ngram",)
"""Speculation methods the real engine runs (the simulator models every method)."""


def check_runtime_speculation(
    spec: SpeculativeConfig, batching: str, field: str = "speculative_config"
) -> None:
    """A ConfigError naming ``field`` unless the real engine can run ``spec`` with
    ``batching``."""
    if spec.method not in RUNTIME_METHODS:
        raise ConfigError(
            f"{field}.method",
            f"the real engine runs only method 'ngram' (prompt lookup), not {spec.method!r}",
            'use {"method": "ngram", "num_speculative_tokens": 3}, or model '
            f"{spec.method!r} in the simulator (tidal simulate --speculative-config)",
        )
    if batching != "mb":
        raise ConfigError(
            "batching",
            f"speculative decoding in the real engine runs with batching 'mb', not {batching!r}",
            "use --batching mb, or drop the speculative config",
        )


def build_speculative_scheduler(
    config: SchedulerConfig,
    kv: KVBlockManager,
    batching: str,
    waiting: WaitingQueue,
    spec: SpeculativeConfig,
    runner: ModelRunner,
    max_model_len: int,
) -> SpeculativeScheduler:
    """The scheduler of a real engine that speculates with ``spec`` (n-gram drafts of the
    requests that :meth:`ModelRunner.can_speculate`)."""
    check_runtime_speculation(spec, batching)
    assert spec.prompt_lookup_min is not None
    assert spec.prompt_lookup_max is not None
    proposer = NgramProposer(
        spec.num_speculative_tokens, spec.prompt_lookup_min, spec.prompt_lookup_max, max_model_len
    )

    def propose(req: Request) -> list[int]:
        if req.token_ids is None or not runner.can_speculate(req):
            return []
        return proposer.propose(req.token_ids)

    runner.spec_stats.accepted_per_pos.extend([0] * spec.num_speculative_tokens)
    state = EngineState(config, kv, waiting)
    return SpeculativeScheduler(state, make_policy(batching, state), propose)
