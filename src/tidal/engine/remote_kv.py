"""Both ends of a pulled KV transfer between engine instances (disaggregated prefill/decode,
vLLM's NixlConnector; docs/design/disaggregation-speculation.md §1.2–1.3). Small components
over an :class:`~tidal.engine.state.EngineState` and its KV manager's public methods.

Decode side, :class:`RemoteKV` (``state.remote``): a decode leg announced with
:meth:`RemoteKV.expect` waits in the queue like any request; when admission reaches it (under
``max_num_seqs`` and the token budget, as vLLM's waiting loop) it reuses the prompt prefix the
instance's prefix cache holds and takes blocks for the rest (the KV watermark applies, as to
any admission), leaves the queue without computing
anything (vLLM's ``WAITING_FOR_REMOTE_KVS``: not running, no token of the budget) and
:attr:`RemoteKV.on_transfer` starts the transfer. :meth:`RemoteKV.loaded` (the transfer
ended) sets ``num_computed_tokens = prompt_len − 1`` — vLLM's
``_update_waiting_for_remote_kv`` recomputes the last prompt token to sample the first output
token — and it goes back to the queue's front; the next admission starts loaded legs first,
wherever they stand in the queue, with a 1-token chunk and no new block (so a loaded request
never waits behind a head refused for KV, e.g. a preempted one, while holding its blocks).
A decode leg preempted later recomputes its prompt locally, as vLLM does.

Prefill side, :class:`HeldBlocks`: a finished prefill leg's blocks stay taken until its
transfer ends (vLLM's delayed free): :meth:`HeldBlocks.hold` right after the leg's free
takes back exactly the blocks that free returned; :meth:`HeldBlocks.release` gives them back.
With prefix caching the prompt's content is cached at the free and the held count is taken
from the LRU head (the least recently used content is evicted first), so the free-block count
is exact while the held prompt's own cached blocks may stay evictable meanwhile.

Invariant (decode side): ``Σ blocks of running + loading + ready requests + free == total``;
a loading request holds ``blocks_for(prompt_len)`` blocks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from tidal.core.kv import KVBlockManager
from tidal.core.request import Request
from tidal.engine.events import StateListener
from tidal.engine.plan import StepPlan

if TYPE_CHECKING:
    from tidal.engine.state import EngineState


class RemoteKV:
    """The decode side of pulled transfers on one engine state (module docstring)."""

    def __init__(self, state: EngineState, on_transfer: Callable[[Request, int], None]) -> None:
        self.state = state
        self.kv = state.kv
        self.on_transfer = on_transfer
        """Called with (request, now) once its blocks are allocated: start the transfer."""
        self.expected: set[int] = set()
        """Decode legs in the queue whose prompt KV is remote."""
        self.loading: dict[int, Request] = {}
        """Legs holding their blocks while their KV is in flight."""
        self.ready: deque[Request] = deque()
        """Loaded legs, admitted first at the next schedule."""
        state.remote = self

    def expect(self, req: Request) -> None:
        """``req`` (about to be queued) gets its prompt's KV from a prefill instance."""
        self.expected.add(req.request_id)

    def claims(self, req: Request) -> bool:
        return req.request_id in self.expected

    def allocate(self, req: Request, now_ns: int) -> bool:
        """Admission reached ``req``: reuse the prompt prefix this instance's cache holds (it is
        not transferred, as NIXL skips locally computed blocks), take blocks for the rest and
        start the transfer of ``prompt_len − num_computed_tokens`` tokens; False (nothing
        taken) when the KV cache refuses the blocks."""
        kv = self.kv
        hit, shared = kv.match_prefix(req)
        if not kv.can_admit(kv.blocks_for(req.prompt_len) - req.num_blocks - shared):
            return False
        kv.commit_prefix(req, hit)
        kv.allocate(req, req.prompt_len)
        self.expected.discard(req.request_id)
        self.loading[req.request_id] = req
        self.on_transfer(req, now_ns)
        return True

    def loaded(self, req: Request) -> None:
        """The transfer of ``req``'s KV ended: it is ready for its 1-token recompute."""
        del self.loading[req.request_id]
        req.num_computed_tokens = req.prompt_len - 1
        self.ready.append(req)
        self.state.waiting.push_front(req)  # (queued, so every policy calls admission)

    def admit_ready(self, plan: StepPlan, budget: int, now_ns: int, max_seqs: int) -> int:
        """Start loaded legs (first loaded, first started) while under ``max_seqs`` and the
        budget: one token each, no new block. Returns the budget left."""
        st, ready = self.state, self.ready
        while ready and len(st.running) < max_seqs and budget > 0:
            req = ready.popleft()
            st.waiting.remove(req)
            st.start_running(req, now_ns)
            st.add_chunk(plan, req, 1)
            budget -= 1
        return budget

    @property
    def busy(self) -> bool:
        """Legs hold blocks outside the running set (loading or ready)."""
        return bool(self.loading or self.ready)

    def held_blocks(self) -> int:
        return sum(r.num_blocks for r in self.loading.values()) + sum(
            r.num_blocks for r in self.ready
        )


class HeldBlocks(StateListener):
    """The prefill side: finished legs' blocks held until their transfers end."""

    def __init__(self, kv: KVBlockManager) -> None:
        self._kv = kv
        self.held: dict[int, int] = {}
        """Request id → blocks held for its transfer."""
        self._free_before = 0

    def before_finish(self, req: Request) -> None:
        self._free_before = self._kv.num_free_blocks

    def hold(self, req: Request) -> int:
        """Called right after ``req``'s free: take back the blocks the free returned."""
        n = self._kv.num_free_blocks - self._free_before
        self._kv.take(n)
        self.held[req.request_id] = n
        return n

    def release(self, request_id: int) -> None:
        """The transfer ended: the held blocks are free again."""
        n = self.held.pop(request_id)
        holder = Request(-1, 0, 0, 0)  # no content: the manager frees its blocks as anonymous
        holder.num_blocks = n
        self._kv.free(holder)

    @property
    def num_held(self) -> int:
        return sum(self.held.values())
