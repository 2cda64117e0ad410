"""Ready-queue orderings for augmented serving (registry ``AUGMENT_ORDERINGS``).

* ``infercept`` — INFERCEPT serves running → swapped → waiting, each FCFS by the request's
  *original* arrival (docs/research/augserve.md §2.4, policy ``fcfs``): key ``(stage, arrival)``
  with stage 0 for a request whose KV is already on the GPU (a returned Preserve/Swap request) and 1
  for one that needs a prefill (new, or returned after a Discard).
* ``augserve`` — AugServe's Stage-II value, lower first, with anti-starvation
  (docs/research/augserve.md §3.3 [INF]/[DEF]): a *starving* request moves to a tier served FCFS by
  original arrival, ahead of all others except those whose KV is already on the GPU (the running set
  keeps its requests, §3.4: a returned Preserve or swapped-in request is served first, by value);
  the rest go by ``(value, arrival)``. Starving means, by default, waiting longer than FCFS would
  have made it wait (:class:`VirtualFCFS`): with ``W_F`` the request's wait under FCFS and ``F`` a
  floor, it is promoted at ``ready + κ·W_F + F`` — so no request waits more than ``κ·W_F + F`` plus
  the starving tier's own FCFS wait, and the P99 TTFT is tied to INFERCEPT's (issue 18). Without
  ``κ`` the spec's fixed rule: promoted at ``ready + τ``.

Both read their keys through :meth:`KeyedQueue.bind` (the scheduler's per-request state), so
they live in their own registry ``AUGMENT_ORDERINGS`` (with ``fcfs``), not in ``ORDERINGS``:
they mean nothing to a scheduler that keeps no such state, and the deployment planner
searches every name of ``ORDERINGS``. Queues are sorted lists (``bisect``),
O(log n) search and O(n) memmove per insertion, fast for the thousands a run queues.
"""

from __future__ import annotations

import bisect
import heapq
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


class VirtualFCFS:
    """The order in which FCFS by original arrival (INFERCEPT) would admit the stage-1
    requests, driven by the real admissions. Each real stage-1 admission is one FCFS
    admission slot, given to the earliest-arriving entry of ``_q`` (sorted by
    ``(arrival, seq)``): if that is the request really admitted, nothing happens; if it is a
    *ghost* (a request really admitted earlier, out of FCFS order), the slot is FCFS's
    admission of it; otherwise that request is *due* now — FCFS would have admitted it — and
    its FCFS wait is ``due − ready``. Invariant: the requests FCFS has admitted are those
    popped from ``_q``; after ``n`` slots they are the ``n`` earliest arrivals, so a queued
    request is due exactly when FCFS, given the same admission slots, would have admitted it.
    With AugServe admitting at least as many requests per second as INFERCEPT, that is no
    later than INFERCEPT itself would have."""

    def __init__(self) -> None:
        self._q: list[tuple[int, int, int]] = []  # arrival, seq, request id
        self._ghosts: set[int] = set()  # seqs of entries really admitted, not yet by FCFS
        self.due: dict[int, int] = {}

    def push(self, arrival: int, seq: int, rid: int) -> None:
        self.due.pop(rid, None)
        bisect.insort(self._q, (arrival, seq, rid))

    def remove(self, arrival: int, seq: int, rid: int) -> None:
        """The request left the queue without an admission (reclaimed, aborted)."""
        if self.due.pop(rid, None) is None:
            self._drop(arrival, seq, rid)

    def _find(self, arrival: int, seq: int, rid: int) -> int:
        i = bisect.bisect_left(self._q, (arrival, seq, rid))
        return i if i < len(self._q) and self._q[i][1] == seq else -1

    def _drop(self, arrival: int, seq: int, rid: int) -> None:
        i = self._find(arrival, seq, rid)
        if i >= 0:
            del self._q[i]

    def admitted(self, arrival: int, seq: int, rid: int, now_ns: int) -> tuple[int, int] | None:
        """A real stage-1 admission at ``now_ns``; returns ``(request id, seq)`` of the entry
        made due, if any."""
        made_due = None
        if self._q:
            _, s, h = self._q.pop(0)
            if s in self._ghosts:
                self._ghosts.discard(s)
            elif s != seq:
                self.due[h] = now_ns
                made_due = (h, s)
            else:
                return None
        if self.due.pop(rid, None) is None and self._find(arrival, seq, rid) >= 0:
            self._ghosts.add(seq)
        return made_due

    def __len__(self) -> int:
        return len(self._q) - len(self._ghosts)


@AUGMENT_ORDERINGS.register("augserve")
class ValueQueue(WaitingQueue):
    """Value order with a starvation tier. The bound key returns ``(stage, value, ready_ns)``; the
    order is: stage-0 requests (KV already on the GPU: returned Preserve/Swap requests, which
    INFERCEPT keeps in its running list and AugServe's running set keeps, docs/research/augserve.md
    §3.4) by value, then the starving tier by original arrival, then the rest by value."""

    name = "augserve"
    arrival_can_jump_head = True

    def __init__(
        self, starvation_ns: int = 10_000_000_000, fcfs_factor: float = 0.0, floor_ns: int = 0
    ) -> None:
        self.starvation_ns = starvation_ns
        """τ of the fixed rule (``1 << 62``: off)."""
        self.fcfs_factor = fcfs_factor
        """κ of the FCFS-relative rule (0: off; module docstring)."""
        self.floor_ns = floor_ns
        self._fcfs = VirtualFCFS() if fcfs_factor > 0 else None
        self._promo: list[tuple[int, int, int]] = []  # promotion ns, seq, request id (heap)
        self._ready: dict[int, int] = {}  # seq → ready ns of stage-1 entries (FCFS rule)
        self._now = 0
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
        """Move every starving request to the starving tier: ready at least ``τ`` ago, or
        (FCFS rule) past its promotion time ``ready + κ·W_F + F``."""
        self._now = now_ns
        age, lim = self._age, now_ns - self.starvation_ns
        while age and age[0][0] <= lim:
            _, seq, rid = age.popleft()
            self._promote(seq, rid)
        promo = self._promo
        while promo and promo[0][0] <= now_ns:
            _, seq, rid = heapq.heappop(promo)
            self._promote(seq, rid)

    def _promote(self, seq: int, rid: int) -> None:
        where = self._where.get(rid)
        if where is None or where[0] or where[1][3] != seq or where[1][0] == 0:
            return
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
        if self._fcfs is not None and stage != 0:
            self._fcfs.push(req.arrival_ns, seq, req.request_id)
            if req.first_token_ns < 0:  # its TTFT is still open: the FCFS rule
                self._ready[seq] = ready_ns
                return
        if self.starvation_ns < 1 << 62:
            self._age.append((ready_ns, seq, req.request_id))

    def _left(self, req: Request, key: tuple[float, ...], admitted: bool) -> None:
        """FCFS rule bookkeeping of an entry that left the queue (``key``: its stored key)."""
        fcfs = self._fcfs
        if fcfs is None or (len(key) == 4 and key[0] == 0):
            return
        seq = int(key[-1])
        self._ready.pop(seq, None)
        rid = req.request_id
        if not admitted:
            fcfs.remove(req.arrival_ns, seq, rid)
            return
        due = fcfs.admitted(req.arrival_ns, seq, rid, self._now)
        if due is not None and due[1] in self._ready:
            ready = self._ready[due[1]]
            at = ready + round(self.fcfs_factor * (self._now - ready)) + self.floor_ns
            heapq.heappush(self._promo, (at, due[1], due[0]))

    def push_front(self, req: Request) -> None:
        self.push(req)

    def _main_first(self) -> bool:
        return bool(self._main) and (self._main[0][0] == 0 or not self._starving)

    def peek(self) -> Request:
        return self._main[0][4] if self._main_first() else self._starving[0][2]

    def pop(self) -> Request:
        req = self._main.pop(0)[4] if self._main_first() else self._starving.pop(0)[2]
        self._left(req, self._where.pop(req.request_id)[1], True)
        return req

    def remove(self, req: Request) -> None:
        starving, key = self._where.pop(req.request_id)
        self._left(req, key, False)
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
