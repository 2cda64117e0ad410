"""The driver's per-request objects: the event a request streams and the handle it is held by.

A :class:`TokenEvent` is one sampled token or one ending; a :class:`RequestHandle` is a
request's entry in :class:`tidal.runtime.driver.EngineDriver` (its sampling, stop rules, and
where its events go: an asyncio queue on the caller's loop, or a callback in the driver thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from tidal.core.request import Request
from tidal.runtime.sampling import GREEDY, SamplingParams

log = logging.getLogger("tidal.runtime.driver")
"""The driver's logger (delivery runs in the driver thread, its failures are the driver's)."""


@dataclass(slots=True)
class TokenEvent:
    token: int | None
    """The sampled token, or None for a terminal event that carries no token (abort)."""
    finish_reason: str | None = None
    """``length`` (max tokens), ``stop`` (stop token), ``abort``, ``error``; None while running."""


@dataclass(eq=False)
class RequestHandle:
    request: Request
    params: SamplingParams = GREEDY
    stop_token_ids: frozenset[int] = frozenset()
    loop: asyncio.AbstractEventLoop | None = None
    queue: asyncio.Queue[TokenEvent] | None = None
    callback: Callable[[TokenEvent], None] | None = None
    """Called in the driver thread for every event (when no event loop is attached)."""
    stop_check: Callable[[int], bool] | None = None
    """Called in the driver thread with each sampled token; True ends the request ("stop")."""
    stop_error: str | None = None
    """Why ``stop_check`` raised (the request then ends with an error)."""
    finish_reason: str | None = None
    error: str | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class GuardedCheck:
    """A request's ``stop_check`` that cannot fail the step it runs in: an exception ends the
    request (a stop), and the driver then reports it as an error."""

    def __init__(self, handle: RequestHandle, check: Callable[[int], bool]) -> None:
        self.handle = handle
        self.check = check

    def __call__(self, token: int) -> bool:
        try:
            return self.check(token)
        except Exception as err:
            self.handle.stop_error = f"stop check: {err!r}"
            return True


def put_all(items: list[tuple[RequestHandle, TokenEvent]]) -> None:
    """Put each event on its handle's asyncio queue (run on that queue's event loop)."""
    for h, ev in items:
        assert h.queue is not None
        h.queue.put_nowait(ev)


def deliver(out: list[tuple[RequestHandle, TokenEvent]]) -> None:
    """Hand a step's events to their consumers: one ``call_soon_threadsafe`` per event loop,
    callbacks in this thread (a failing callback is logged, never raised)."""
    by_loop: dict[asyncio.AbstractEventLoop, list] = {}
    for h, ev in out:
        if h.loop is not None:
            by_loop.setdefault(h.loop, []).append((h, ev))
        elif h.callback is not None:
            try:
                h.callback(ev)
            except Exception:
                log.exception("request %d's event callback failed", h.request.request_id)
    for loop, items in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is listening
            loop.call_soon_threadsafe(put_all, items)
