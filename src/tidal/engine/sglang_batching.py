"""SGLang's scheduler with its launch flags ``--enable-mixed-chunk`` and ``--max-prefill-tokens``.

SGLang (0.5's ``Scheduler.get_new_batch_prefill`` and ``PrefillAdder`` in
``managers/schedule_policy.py``, Apache-2.0) builds each step's prefill batch from the
pending chunk of a running prefill, then from the queue head, under two budgets:

* the chunk budget ``chunked_prefill_size`` (Tidal's token budget): a prompt larger than what
  is left of it is cut to that (one chunk), and the step ends;
* the prefill cap ``max_prefill_tokens`` (default 16,384): the step's *first* prefill is
  admitted whole (only the chunk budget cuts it); each further new prompt only while its new
  tokens stay *below* the cap less the tokens the step already prefills
  (``real_input_tokens >= rem_input_tokens and can_run_list`` refuses it; it then waits for
  the next step, and so do the prompts behind it). This is 0.5.6's ``add_one_req``; not
  modelled: its ``add_one_req_ignore_eos`` (``ignore_eos`` with the radix cache off) and
  newer SGLang with chunked prefill have no per-prompt test, only the stop once the step's
  prefill reaches the cap.

Without ``--enable-mixed-chunk`` a step is a prefill batch whenever one can be formed and a
decode batch of every running request otherwise (:mod:`tidal.engine.prefill_first`). With it
the running decodes join the prefill batch (``mix_with_running``) and take one token each
from both budgets (``mixed_with_decode_tokens``): Tidal's mixed step
(:mod:`tidal.engine.mb`) under SGLang's cap.

**Admission by KV reservation** (``PrefillAdder.add_one_req`` and ``Scheduler`` in 0.5.6's
``managers/scheduler.py``). A new request passes only if its prompt tokens still to compute
plus ``min(max_new_tokens − output, 4096)`` are below ``rem_total_tokens`` = the free KV
tokens less the reservation: ``min(max_new − output, 4096) · new_token_ratio`` for every
decoding request, ``min(max_new, 4096)`` for each prompt the step completes (the step's
chunks are already allocated here, so their tokens are out of the free count), and one token
per decode of a mixed step. A refusal (or a refusal for KV blocks) sets SGLang's
``batch_is_full``: no admission is tried until a running request leaves (finishes or is
retracted); so does a reservation used up by the admitted prompts (``budget_state`` →
``NO_TOKEN``). ``new_token_ratio`` starts at ``0.7 · schedule_conservativeness`` (at most 1),
falls by ``(init − min) / 600`` after each pure decode step to ``min = 0.14 · init``
(``SGLANG_INIT_NEW_TOKEN_RATIO``, ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR``,
``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS``), and a decode step that runs out of KV retracts
requests (Tidal's preemption by recompute) and resets it to ``min(1, (Σ output + 20 · n) /
(Σ max_new + 1))`` over the ``n`` requests left (``ScheduleBatch.retract_decode``,
``SGLANG_RETRACT_DECODE_STEPS`` = 20). ``max_new_tokens`` is a request's output length (the
benchmarks' ``ignore_eos`` with ``max_tokens`` = OSL). Deviations: KV is counted in whole
blocks; a queue head refused while nothing runs is admitted anyway (SGLang would wait
forever); the ``add_one_req_ignore_eos`` path (``ignore_eos`` *and* the radix cache off) is
not modelled — SGLang's radix cache is on by default.

A new prompt's tokens are counted without prefix-cache hits (SGLang counts the uncached
extend length; the cap is then conservative where a prompt hits the cache). Fast-forward is
exact: a refusal by the cap happens only in a step that already prefills, which is never a
repeated pure-decode step; a pure-decode step with a waiting queue is either ``batch_is_full``
(nothing is admitted until the first departure, which ends the run) or MB's case
(:meth:`MixedBatching.repeatable_steps`); the ratio decays once per repeated step, in order.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tidal.core.request import Request
from tidal.engine.decode_pool import DecodePool
from tidal.engine.mb import MixedBatching
from tidal.engine.plan import StepPlan
from tidal.engine.policy import BATCHING
from tidal.engine.sglang_recv import RecvGate
from tidal.engine.state import EngineState

SGLANG_MAX_PREFILL_TOKENS = 16384
"""SGLang's default ``--max-prefill-tokens``."""
INIT_NEW_TOKEN_RATIO = 0.7
"""``SGLANG_INIT_NEW_TOKEN_RATIO`` (× ``--schedule-conservativeness``)."""
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
"""``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR``: the ratio's floor as a share of its start."""
NEW_TOKEN_RATIO_DECAY_STEPS = 600
"""``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS``: pure decode steps from start to floor."""
RETRACT_DECODE_STEPS = 20
"""``SGLANG_RETRACT_DECODE_STEPS``: decode steps a retraction re-estimates the ratio with."""
CLIP_MAX_NEW_TOKENS = 4096
"""``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``: the most output tokens one request reserves."""


class SGLangOptions(BaseModel):
    """SGLang's launch flags that shape a step (``scheduler.options`` of ``sglang``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    enable_mixed_chunk: bool = False
    """``--enable-mixed-chunk``: running decodes share the step of a prefill chunk."""
    max_prefill_tokens: int = Field(default=SGLANG_MAX_PREFILL_TOKENS, ge=1)
    """``--max-prefill-tokens``: the cap on a step's new prefill tokens past its first prompt."""
    schedule_conservativeness: float = Field(default=1.0, ge=0.0)
    """``--schedule-conservativeness``: scales the start (and floor) of ``new_token_ratio``."""
    scheduler_recv_interval: int = Field(default=1, ge=1)
    """``--scheduler-recv-interval``: new requests are received only every N decode steps
    (and right after a prefill step; :mod:`tidal.engine.sglang_recv`)."""


def _clip(n: int) -> int:
    return min(max(n, 0), CLIP_MAX_NEW_TOKENS)


class _Adder:
    """One step's admission test, ``PrefillAdder``'s: the KV reservation (every prompt, the
    first too, unless nothing else runs) and the cap (the step's first prefill passes whole;
    a further prompt iff its new tokens are below ``cap`` less the step's prefill tokens)."""

    __slots__ = ("_offset", "_offset_base", "_seen", "cap", "no_token", "plan", "policy", "refused")

    def __init__(self, policy: SGLangBatching, plan: StepPlan, cap: int, decodes: int) -> None:
        self.policy, self.plan, self.cap = policy, plan, cap
        self.refused = self.no_token = False
        self._offset = -1.0
        """Reserved tokens (``rem_total_token_offset``); −1 until the first test."""
        self._seen = 0
        self._offset_base = float(decodes)

    def rem_total_tokens(self) -> float:
        """Free KV tokens less the reservation of the running and the step's prompts."""
        plan, st = self.plan, self.policy.state
        if self._offset < 0:
            self._offset = self._offset_base + self.policy.reserved_by_running(plan)
            self._seen = 0
        prefills = plan.prefills
        for req, n in prefills[self._seen :]:  # the step's chunks: a completed prompt reserves
            if req.num_computed_tokens + n >= req.num_tokens:
                self._offset += _clip(req.max_output_len)
        self._seen = len(prefills)
        return st.kv.num_free_blocks * st.kv.block_size - self._offset

    def used_up(self) -> bool:
        """Whether the reservation was tested and nothing of it is left (``budget_state``'s
        ``NO_TOKEN`` after an admission)."""
        return self._offset >= 0 and self.rem_total_tokens() <= 0

    def __call__(self, req: Request) -> bool:
        gate = self.policy.recv
        if gate is not None and not gate.admits(req):  # not received yet: the step stops here
            self.refused = True
            return False
        plan = self.plan
        if plan.prefills or self.policy.state.running:
            new = req.num_tokens - req.num_computed_tokens
            if new + _clip(req.max_output_len - req.num_output_tokens) >= self.rem_total_tokens():
                self.no_token = True
                return False
        if not plan.prefills:
            return True
        ok = req.num_tokens - req.num_computed_tokens < self.cap - plan.prefill_tokens
        self.refused = not ok
        return ok


class _Remaining:
    """Σ ``min(max_new − output, 4096)`` over the decode pool's members, kept incrementally:
    in a plain pool a member's remaining output is ``key − pool.steps`` with ``key`` fixed
    while it stays, so the sum is Σ key − n · steps, less the excess over 4,096 of the few
    members above it. Joins are found at the end of the pool's (insertion-ordered) members,
    leaves come as events; any mismatch (a member gone without an event, a speculative pool,
    whose members advance by accepted tokens) recomputes the sum in O(members)."""

    __slots__ = ("key", "long", "sum")

    def __init__(self) -> None:
        self.key: dict[int, int] = {}
        """Request id → remaining output + pool steps, for the members seen."""
        self.sum = 0
        self.long: dict[int, int] = {}
        """The members whose remaining output exceeded the 4,096 clip when last looked at."""

    def leave(self, req: Request) -> None:
        key = self.key.pop(req.request_id, None)
        if key is not None:
            self.sum -= key
            self.long.pop(req.request_id, None)

    def _remaining(self, pool: DecodePool, req: Request) -> int:
        return req.max_output_len - (pool.computed(req) + 1 - req.prompt_len - req.num_extra_tokens)

    def total(self, pool: DecodePool) -> int:
        members, steps = pool.members, pool.steps
        if pool.speculative:
            return sum(_clip(self._remaining(pool, r)) for r in members.values())
        key = self.key
        for rid in reversed(members):  # the joins since the last look, newest first
            if rid in key:
                break
            k = self._remaining(pool, members[rid]) + steps
            key[rid] = k
            self.sum += k
            if k - steps > CLIP_MAX_NEW_TOKENS:
                self.long[rid] = k
        if len(key) != len(members):  # a member left unseen: start over
            self.key, self.sum, self.long = {}, 0, {}
            return self.total(pool)
        excess = 0
        for rid, k in list(self.long.items()):
            over = k - steps - CLIP_MAX_NEW_TOKENS
            if over > 0:
                excess += over
            else:
                del self.long[rid]
        return self.sum - len(key) * steps - excess


@BATCHING.register("sglang")
class SGLangBatching(MixedBatching):
    """SGLang's step: prefill-first, or mixed with ``enable_mixed_chunk``, under SGLang's
    ``max_prefill_tokens`` cap and its KV-reservation admission (``new_token_ratio``)."""

    name = "sglang"
    Options = SGLangOptions

    def __init__(self, state: EngineState, options: object = None) -> None:
        super().__init__(state, options)
        opts = options if isinstance(options, SGLangOptions) else SGLangOptions()
        self.mixed = opts.enable_mixed_chunk
        self.max_prefill_tokens = opts.max_prefill_tokens
        self.init_ratio = min(INIT_NEW_TOKEN_RATIO * opts.schedule_conservativeness, 1.0)
        self.min_ratio = min(self.init_ratio * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.ratio_decay = (self.init_ratio - self.min_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.new_token_ratio = self.init_ratio
        self.batch_is_full = False
        """SGLang's flag: admission refused for KV; no prefill is tried until one leaves."""
        self._retracted = False
        self._remaining = _Remaining()
        n = opts.scheduler_recv_interval
        self.recv = RecvGate(n) if n > 1 else None
        """``--scheduler-recv-interval`` > 1: which waiting requests SGLang has received."""

    def reserved_by_running(self, plan: StepPlan) -> float:
        """``new_token_ratio`` × Σ ``min(max_new − output, 4096)`` over the decoding requests
        (a prefilling one reserves only when its last chunk is scheduled: SGLang keeps the
        chunked request out of its running batch)."""
        return self._remaining.total(self.state.pool) * self.new_token_ratio

    def schedule(self, now_ns: int) -> StepPlan:
        st = self.state
        st.waiting.refresh(now_ns)
        if self.recv is not None:
            self.recv.on_schedule(st.waiting, not st.running)
        plan = StepPlan()
        self._retracted = False
        if self.mixed:
            budget = st.schedule_running(plan, st.step_budget)
            if plan.preempted:
                self._retract()
                return plan
            # the decodes count against the cap as they do against the chunk budget
            cap, decodes = self.max_prefill_tokens - plan.num_decodes, plan.num_decodes
        else:
            budget, _ = st.continue_prefills(plan, st.step_budget)
            cap, decodes = self.max_prefill_tokens, 0
        if self.batch_is_full and st.running:  # SGLang tries no admission (get_new_batch_prefill)
            st.admission_blocked_by_kv = bool(len(st.waiting))
        else:
            self._admit(plan, budget, now_ns, cap, decodes)
        if not self.mixed and not plan.prefills:
            st.schedule_running(plan, 0, prefills=False)
            if plan.preempted:
                self._retract()
        return plan

    def _admit(self, plan: StepPlan, budget: int, now_ns: int, cap: int, decodes: int) -> None:
        """Admission from the queue head through :class:`_Adder`; sets ``batch_is_full`` on a
        refusal for KV (SGLang's ``NO_TOKEN``) or a reservation the step used up."""
        st = self.state
        test = _Adder(self, plan, cap, decodes)
        st.admit(plan, budget, now_ns, None, test)
        gate, waiting = self.recv, st.waiting
        unreceived = gate is not None and bool(len(waiting)) and not gate.admits(waiting.peek())
        if test.refused or unreceived:  # the cap or the receive gate, not KV: the next step may
            st.admission_blocked_by_kv = False  # admit it
        elif st.admission_blocked_by_kv or test.used_up():
            self.batch_is_full = bool(st.running)

    def _retract(self) -> None:
        """A decode step ran out of KV and retracted requests: SGLang re-estimates the ratio
        from the requests left, ``min(1, (Σ output + 20 · n) / (Σ max_new + 1))``."""
        pool = self.state.pool
        decoded = maxnew = 0
        for req in pool.members.values():
            decoded += pool.computed(req) + 1 - req.prompt_len - req.num_extra_tokens
            maxnew += req.max_output_len
        n = len(pool.members)
        self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * n) / (maxnew + 1))
        self._retracted = True

    def before_apply(self, plan: StepPlan, end_ns: int, num_steps: int) -> None:
        """After each pure decode step without retraction the ratio decays toward its floor
        (``update_running_batch``), once per repeated step; the receive gate counts the steps."""
        if self.recv is not None:
            self.recv.after_step(plan, num_steps)
        if plan.prefills or not plan.num_decodes or self._retracted:
            return
        ratio, decay, floor = self.new_token_ratio, self.ratio_decay, self.min_ratio
        for _ in range(num_steps):
            if ratio <= floor:
                break
            ratio = max(ratio - decay, floor)
        self.new_token_ratio = ratio

    def on_finished(self, req: Request, now_ns: int) -> None:
        self.batch_is_full = False
        self._remaining.leave(req)
        if self.recv is not None:
            self.recv.leave(req)

    def on_preempted(self, req: Request, lost_tokens: int) -> None:
        self.batch_is_full = False
        self._remaining.leave(req)

    def on_aborted(self, req: Request, now_ns: int) -> None:
        self.batch_is_full = False
        self._remaining.leave(req)
        if self.recv is not None:
            self.recv.leave(req)

    def repeatable_steps(self, plan: StepPlan) -> tuple[int, bool]:
        """MB's run (:meth:`MixedBatching.repeatable_steps`); while ``batch_is_full`` nothing is
        admitted until the first departure, which ends the run, so no arrival can change it."""
        k, sensitive = super().repeatable_steps(plan)
        if self.recv is not None:  # a run never crosses a receive (sglang_recv: exactness)
            k = min(k, self.recv.steps_to_recv())
        return k, sensitive and not self.batch_is_full
