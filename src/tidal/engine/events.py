"""The interfaces around an :class:`~tidal.engine.state.EngineState`: read-only views of its
parts (:class:`StateView`), the events it emits (:class:`StateListener`: a policy or a
component overrides the hooks it needs; the state calls only those) and where augmented
requests stop for tool calls (:class:`CallStops`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tidal.core.kv import KVBlockManager
from tidal.core.request import Request
from tidal.engine.decode_pool import DecodePool
from tidal.engine.ordering import WaitingQueue

if TYPE_CHECKING:
    from tidal.engine.state import EngineState


class StateView:
    """Read-only views of the parts of ``self.state`` (an :class:`EngineState`), for the
    objects that act on one state: the scheduler facade, its policy and its components."""

    state: EngineState

    @property
    def kv(self) -> KVBlockManager:
        return self.state.kv

    @property
    def waiting(self) -> WaitingQueue:
        return self.state.waiting

    @property
    def running(self) -> dict[int, Request]:
        return self.state.running

    @property
    def prefilling(self) -> list[Request]:
        return self.state.prefilling

    @property
    def pool(self) -> DecodePool:
        return self.state.pool


class StateListener(StateView):
    """Events of an :class:`EngineState`; a component overrides those it needs."""

    def on_started(self, req: Request) -> None:
        """``req`` joined the running set (its KV, if any, is now the running set's)."""

    def on_preempted(self, req: Request, lost_tokens: int) -> None:
        """``req`` lost its KV and ``lost_tokens`` computed tokens; called before it is put
        back at the queue's front."""

    def before_finish(self, req: Request) -> None:
        """``req`` is about to finish (its KV is still held)."""

    def on_finished(self, req: Request, now_ns: int) -> None:
        """``req`` finished and left the running set (after the driver was told)."""

    def on_aborted(self, req: Request, now_ns: int) -> None:
        """``req`` was dropped before it finished (it left the running set or the queue)."""

    def on_prefix_hit(self, req: Request, hit_tokens: int) -> None:
        """``req`` was admitted with ``hit_tokens`` found in the prefix cache."""

    def reclaim(self, num_blocks: int, keep: Request | None = None) -> bool:
        """Free up to ``num_blocks`` KV blocks held outside the running set (never those of
        ``keep``); True if any were freed."""
        return False


class CallStops(Protocol):
    """Where requests stop for a tool call (augmented requests)."""

    def target(self, req: Request) -> int:
        """The output count at which ``req`` next leaves the decode pool."""
        ...

    def stopped(self, req: Request, now_ns: int) -> bool:
        """``req`` just sampled a token: if it is at a call point, pause it (it leaves the
        running set) and return True."""
        ...
