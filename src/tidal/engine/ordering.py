"""Waiting-queue orderings. The batching policy asks the queue for its head; a new ordering
(priority, value-based, fair share) is one new class registered under a name."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator

from tidal.core.registry import Registry
from tidal.core.request import Request


class WaitingQueue(ABC):
    name = "base"
    arrival_can_jump_head = False
    """True when a newly arrived request may become the head. The simulator then stops a
    fast-forwarded run at the next arrival even if the current head cannot be admitted."""

    def refresh(self, now_ns: int) -> None:  # noqa: B027 - optional hook
        """Called at the start of every schedule; time-dependent orderings re-rank here."""

    @abstractmethod
    def push(self, req: Request) -> None: ...

    @abstractmethod
    def push_front(self, req: Request) -> None:
        """Re-queue a preempted request ahead of the others (vLLM's ``prepend_request``)."""

    @abstractmethod
    def peek(self) -> Request: ...

    @abstractmethod
    def pop(self) -> Request: ...

    @abstractmethod
    def remove(self, req: Request) -> None: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __iter__(self) -> Iterator[Request]: ...


ORDERINGS: Registry[type[WaitingQueue]] = Registry("ordering")


@ORDERINGS.register("fcfs")
class FCFSQueue(WaitingQueue):
    """First come, first served; preempted requests go back to the front."""

    name = "fcfs"

    def __init__(self) -> None:
        self._q: deque[Request] = deque()

    def push(self, req: Request) -> None:
        self._q.append(req)

    def push_front(self, req: Request) -> None:
        self._q.appendleft(req)

    def peek(self) -> Request:
        return self._q[0]

    def pop(self) -> Request:
        return self._q.popleft()

    def remove(self, req: Request) -> None:
        self._q.remove(req)

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._q)
