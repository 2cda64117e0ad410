"""Ready-queue orderings for augmented serving (registry ``AUGMENT_ORDERINGS``).

* ``infercept`` — INFERCEPT serves running → swapped → waiting, each FCFS by the request's
  *original* arrival (augserve.md §2.4, policy ``fcfs``): key ``(stage, arrival)`` with stage
  0 for a request whose KV is already on the GPU (a returned Preserve/Swap request) and 1 for
  one that needs a prefill (new, or returned after a Discard).
* ``augserve`` — AugServe's Stage-II value, lower first, with anti-starvation (augserve.md
  §3.3 [INF]/[DEF]): a request that has waited ``τ`` since it last became ready moves to a
  tier served FCFS by original arrival, ahead of all others except those whose KV is
  already on the GPU (the running set keeps its requests, §3.4: a returned Preserve or
  swapped-in request is served first, by value); the rest go by ``(value, arrival)``.

Both read their keys through :meth:`KeyedQueue.bind` (the scheduler's per-request state), so
they live in their own registry ``AUGMENT_ORDERINGS`` (with ``fcfs``), not in ``ORDERINGS``:
they mean nothing to a scheduler that keeps no such state, and the deployment planner
searches every name of ``ORDERINGS``. Queues are sorted lists (``bisect``),
O(log n) search and O(n) memmove per insertion, fast for the thousands a run queues.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterator

from tidal.core.registry import Registry
from tidal.core.request import Request
from tidal.engine.ordering import FCFSQueue, WaitingQueue

Key = tuple[float, ...]

AUGMENT_ORDERINGS: Registry[type[WaitingQueue]] = Registry("augment ordering")
AUGMENT_ORDERINGS.register("fcfs")(FCFSQueue)


class KeyedQueue(WaitingQueue):
    """A waiting queue sorted by ``key(req)`` (ties by push order)."""

    name = "keyed"
    arrival_can_jump_head = True

    def __init__(self) -> None:
        self._q: list[tuple[Key, int, Request]] = []
        self._where: dict[int, tuple[Key, int]] = {}
        self._seq = 0
        self.key: Callable[[Request], Key] = lambda r: (float(r.arrival_ns),)

    def bind(self, key: Callable[[Request], Key]) -> None:
        self.key = key

    def _entry(self, req: Request) -> tuple[Key, int, Request]:
        self._seq += 1
        return (self.key(req), self._seq, req)

    def push(self, req: Request) -> None:
        e = self._entry(req)
        self._where[req.request_id] = (e[0], e[1])
        bisect.insort(self._q, e, key=lambda x: (x[0], x[1]))

    def push_front(self, req: Request) -> None:
        """Preempted requests keep their key's place (the key already ranks them)."""
        self.push(req)

    def peek(self) -> Request:
        return self._q[0][2]

    def pop(self) -> Request:
        _, _, req = self._q.pop(0)
        del self._where[req.request_id]
        return req

    def remove(self, req: Request) -> None:
        key, seq = self._where.pop(req.request_id)
        i = bisect.bisect_left(self._q, (key, seq), key=lambda x: (x[0], x[1]))
        assert self._q[i][2] is req
        del self._q[i]

    def __contains__(self, req: object) -> bool:
        return isinstance(req, Request) and req.request_id in self._where

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self) -> Iterator[Request]:
        return (e[2] for e in self._q)


@AUGMENT_ORDERINGS.register("infercept")
class InterceptFCFSQueue(KeyedQueue):
    """FCFS by original arrival, KV-resident requests first (the scheduler binds the key
    ``(stage, arrival_ns)``). A new arrival is the latest of stage 1, so it never becomes the
    head of a non-empty queue."""

    name = "infercept"
    arrival_can_jump_head = False


def _main_key(e: tuple[float, float, int, int, Request]) -> tuple[float, ...]:
    return e[:4]


def _starving_key(e: tuple[int, int, Request]) -> tuple[float, ...]:
    return e[:2]


@AUGMENT_ORDERINGS.register("augserve")
class ValueQueue(WaitingQueue):
    """Value order with a starvation tier. The bound key returns ``(stage, value, ready_ns)``;
    the order is: stage-0 requests (KV already on the GPU: returned Preserve/Swap requests,
    which INFERCEPT keeps in its running list and AugServe's running set keeps, augserve.md
    §3.4) by value, then the starving tier by original arrival, then the rest by value."""

    name = "augserve"
    arrival_can_jump_head = True

    def __init__(self, starvation_ns: int = 10_000_000_000) -> None:
        self.starvation_ns = starvation_ns
        self._main: list[tuple[float, float, int, int, Request]] = []  # stage, value, arr, seq
        self._starving: list[tuple[int, int, Request]] = []  # arrival, seq, req
        self._where: dict[int, tuple[bool, tuple[float, ...]]] = {}
        self._age: deque[tuple[int, int, int]] = deque()  # ready_ns, seq, request id
        self._seq = 0
        self.key: Callable[[Request], tuple[float, float, int]] = lambda r: (
            1.0,
            0.0,
            r.arrival_ns,
        )
        self.num_promoted = 0

    def bind(self, key: Callable[[Request], tuple[float, float, int]]) -> None:
        self.key = key

    def refresh(self, now_ns: int) -> None:
        """Move every request that became ready at least ``τ`` ago to the starving tier."""
        age, lim = self._age, now_ns - self.starvation_ns
        while age and age[0][0] <= lim:
            _, seq, rid = age.popleft()
            where = self._where.get(rid)
            if where is None or where[0] or where[1][3] != seq or where[1][0] == 0:
                continue
            key = where[1]
            i = bisect.bisect_left(self._main, key, key=_main_key)
            req = self._main.pop(i)[4]
            arrival = int(key[2])
            bisect.insort(self._starving, (arrival, seq, req), key=_starving_key)
            self._where[rid] = (True, (arrival, seq))
            self.num_promoted += 1

    def push(self, req: Request) -> None:
        stage, value, ready_ns = self.key(req)
        self._seq += 1
        seq = self._seq
        key = (stage, value, req.arrival_ns, seq)
        bisect.insort(self._main, (*key, req), key=_main_key)
        self._where[req.request_id] = (False, key)
        self._age.append((ready_ns, seq, req.request_id))

    def push_front(self, req: Request) -> None:
        self.push(req)

    def _main_first(self) -> bool:
        return bool(self._main) and (self._main[0][0] == 0 or not self._starving)

    def peek(self) -> Request:
        return self._main[0][4] if self._main_first() else self._starving[0][2]

    def pop(self) -> Request:
        req = self._main.pop(0)[4] if self._main_first() else self._starving.pop(0)[2]
        del self._where[req.request_id]
        return req

    def remove(self, req: Request) -> None:
        starving, key = self._where.pop(req.request_id)
        if starving:
            i = bisect.bisect_left(self._starving, key, key=_starving_key)
            del self._starving[i]
        else:
            i = bisect.bisect_left(self._main, key, key=_main_key)
            del self._main[i]

    def __contains__(self, req: object) -> bool:
        return isinstance(req, Request) and req.request_id in self._where

    def __len__(self) -> int:
        return len(self._main) + len(self._starving)

    def __iter__(self) -> Iterator[Request]:
        main = self._main
        n0 = bisect.bisect_left(main, 1.0, key=lambda x: x[0])
        yield from (e[4] for e in main[:n0])
        yield from (e[2] for e in self._starving)
        yield from (e[4] for e in main[n0:])
