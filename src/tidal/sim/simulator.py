"""The discrete-event loop (docs/DESIGN.md §3).

Three sources of events, merged by ``(time_ns, priority, seq)``:

* step ends — one pending per busy instance, priority 0;
* timers — callbacks scheduled with :meth:`Simulation.call_at` (tool-call returns at priority 1,
  cluster control ticks at priority 3);
* arrivals, priority 2 — a sorted stream (open loop) or released by completions (closed loop),
  merged in without going through the heap. A router may return −1: the request is then held
  outside the instances (a cluster's queue) and handed over later with :meth:`deliver`.

So at equal times: step ends, then resumes, then arrivals, then control ticks, each group in
insertion order (``seq`` is a per-run counter; no event object has ``__lt__``). A step that starts
at the instant of an arrival does not see it. Instances fast-forward only up to the next
external event (:meth:`Simulation.next_external_ns`), so the result equals step-by-step
simulation exactly. A cluster narrows that horizon per instance (:attr:`Simulation.horizon`):
the next arrival of the instance's own model and the instance's own tool-call returns; work
that reaches an instance by any other path goes through :meth:`Simulation.deliver`, which cuts
a run where stepping would first see it.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

from tidal.core.request import Request
from tidal.core.units import INF_NS
from tidal.engine.scheduler import Scheduler
from tidal.sim.instance import SimInstance
from tidal.sim.recorder import Recorder
from tidal.workload.base import RequestSet

STEP_END = 0
RESUME = 1
ARRIVAL = 2
CONTROL = 3


_CHUNK = 65_536
_LEN_CHUNK = 4096


class ArrivalStream:
    """Yields request ids and their arrival times. Open loop: the workload's times (read from
    the array in chunks of Python ints, so memory does not grow with the trace). Closed loop
    (``concurrency`` c): c requests at t = 0, then one more at each completion."""

    def __init__(self, requests: RequestSet, concurrency: int | None = None) -> None:
        self.n = len(requests)
        self.next_id = 0
        self.concurrency = concurrency
        self._arrival = requests.arrival_ns
        self._chunk: list[int] = []
        self._base = 0
        self._ready: deque[int] = deque()
        if concurrency is not None:
            self._ready = deque([0] * min(concurrency, self.n))
        self._sessions = _SessionArrivals.of(requests) if concurrency is None else None

    def peek(self) -> int:
        if self._sessions is not None:
            return self._sessions.peek()
        if self.next_id >= self.n:
            return INF_NS
        if self.concurrency is None:
            i = self.next_id - self._base
            if i >= len(self._chunk):
                self._base = self.next_id
                self._chunk = self._arrival[self.next_id : self.next_id + _CHUNK].tolist()
                i = 0
            return self._chunk[i]
        return self._ready[0] if self._ready else INF_NS

    def pop(self) -> tuple[int, int]:
        if self._sessions is not None:
            self.next_id += 1
            return self._sessions.pop()
        t = self.peek()
        if self.concurrency is not None:
            self._ready.popleft()
        i = self.next_id
        self.next_id += 1
        return i, t

    def on_finish(self, t_ns: int, request_id: int = -1) -> None:
        if self._sessions is not None:
            self._sessions.on_finish(t_ns, request_id)
        elif self.concurrency is not None:
            self._ready.append(t_ns)


class _SessionArrivals:
    """Open loop with multi-turn sessions: a request whose ``prev_turn`` column is d > 0 is
    released ``think_ns`` after request ``i − d`` finishes; the others arrive at their times.
    Ties: released turns before scheduled arrivals of the same time, each in release order."""

    def __init__(self, times: list[int], prev: list[int], think: list[int]) -> None:
        self._times = times
        self._think = think
        self._next: dict[int, int] = {}
        self._order = [i for i, d in enumerate(prev) if d <= 0 or i - d < 0]
        for i, d in enumerate(prev):
            if d > 0 and i - d >= 0:
                self._next[i - d] = i
        self._pos = 0
        self._released: list[tuple[int, int, int]] = []
        self._seq = 0

    @classmethod
    def of(cls, requests: RequestSet) -> _SessionArrivals | None:
        prev = requests.extra.get("prev_turn")
        if prev is None or not prev.any():
            return None
        think = requests.extra.get("think_ns")
        th = think.tolist() if think is not None else [0] * len(requests)
        return cls(requests.arrival_ns.tolist(), prev.tolist(), th)

    def peek(self) -> int:
        t = self._times[self._order[self._pos]] if self._pos < len(self._order) else INF_NS
        if self._released and self._released[0][0] <= t:
            return self._released[0][0]
        return t

    def pop(self) -> tuple[int, int]:
        t = self.peek()
        if self._released and self._released[0][0] == t:
            _, _, rid = heapq.heappop(self._released)
            return rid, t
        rid = self._order[self._pos]
        self._pos += 1
        return rid, t

    def on_finish(self, t_ns: int, request_id: int) -> None:
        nxt = self._next.pop(request_id, None)
        if nxt is not None:
            self._seq += 1
            heapq.heappush(self._released, (t_ns + self._think[nxt], self._seq, nxt))


class Simulation:
    def __init__(
        self,
        instances: list[SimInstance],
        requests: RequestSet,
        recorder: Recorder,
        concurrency: int | None = None,
        route: Callable[[Request], int] | None = None,
        progress: Callable[[int], None] | None = None,
        make_request: Callable[[int, int], Request] | None = None,
    ) -> None:
        self.instances = instances
        self.requests = requests
        self.recorder = recorder
        self.arrivals = ArrivalStream(requests, concurrency)
        self.route = route
        self.progress = progress
        self.now_ns = 0
        self.num_events = 0
        self._steps: list[tuple[int, int, int]] = []  # (end, seq, instance)
        self._timers: list[tuple[int, int, int, Callable[[int], None]]] = []
        self._seq = 0
        self._prompt = requests.prompt_len
        self._output = requests.output_len
        self._payloads = requests.payloads
        self._content = requests.content
        self._len_base = -_LEN_CHUNK
        self._prompt_chunk: list[int] = []
        self._output_chunk: list[int] = []
        self.make_request = make_request or self._default_request
        self.on_request_finish: Callable[[Request], None] | None = None
        """Called after a request finishes (the cluster's in-flight accounting)."""
        self._cur_seq: list[int] = []
        self._stale: set[int] = set()
        self._resumes: list[list[int]] = []
        """Per instance, a heap of the return times of its paused requests."""
        self.horizon: Callable[[int], Callable[[], int]] | None = None
        """Per-instance fast-forward horizon (a cluster's): given an instance index, the
        callable its runs stop at; None: :meth:`next_external_ns` for every instance."""
        for inst in instances:
            self._register(inst)

    def _default_request(self, rid: int, t_ns: int) -> Request:
        payload = self._payloads[rid] if self._payloads is not None else None
        i = rid - self._len_base
        if not 0 <= i < _LEN_CHUNK:  # the lengths as Python ints, a chunk at a time
            self._len_base = rid
            self._prompt_chunk = self._prompt[rid : rid + _LEN_CHUNK].tolist()
            self._output_chunk = self._output[rid : rid + _LEN_CHUNK].tolist()
            i = 0
        req = Request(rid, t_ns, self._prompt_chunk[i], self._output_chunk[i], payload=payload)
        if self._content is not None:
            req.content = self._content.block_content(rid, rid)
        return req

    def _pauser(self, idx: int) -> Callable[[Request, int], None]:
        """Tool calls are timers (docs/DESIGN.md §1): a paused request resumes at its return time,
        then its instance is woken if idle."""

        def on_pause(req: Request, resume_ns: int) -> None:
            heapq.heappush(self._resumes[idx], resume_ns)

            def fire(t: int) -> None:
                heapq.heappop(self._resumes[idx])
                self.instances[idx].scheduler.resume(req, t)
                self.wake(idx, t)

            self.call_at(resume_ns, fire, RESUME)

        return on_pause

    def _register(self, inst: SimInstance) -> None:
        inst.scheduler.on_finish = self._on_finish
        idx = len(self._cur_seq)
        inst.scheduler.on_pause = self._pauser(idx)
        self._resumes.append([])
        horizon = self.next_external_ns if self.horizon is None else self.horizon(idx)
        inst.engine.next_event_ns = horizon
        self._cur_seq.append(-1)

    def _on_finish(self, req: Request) -> None:
        self.recorder.on_finish(req)
        self.arrivals.on_finish(req.finish_ns, req.request_id)
        if self.on_request_finish is not None:
            self.on_request_finish(req)

    # ------------------------------------------------------------------ API for policies
    def call_at(self, t_ns: int, fn: Callable[[int], None], priority: int = RESUME) -> None:
        """Run ``fn(t_ns)`` at ``t_ns`` (≥ now). Instances stop fast-forwarding before it."""
        if t_ns < self.now_ns:
            raise ValueError(f"timer in the past: {t_ns} < {self.now_ns}")
        self._seq += 1
        heapq.heappush(self._timers, (t_ns, priority, self._seq, fn))

    def wake(self, idx: int, t_ns: int) -> None:
        """Let instance ``idx`` start a step at ``t_ns`` if it is idle (after a resume, say)."""
        end = self.instances[idx].kick(t_ns)
        if end is not None:
            self._push_step(end, idx)

    def add_instance(self, inst: SimInstance) -> int:
        """Add an instance while running (a cluster starts engines); returns its index."""
        inst.index = len(self.instances)
        self.instances.append(inst)
        self._register(inst)
        return inst.index

    def replace_scheduler(self, idx: int, scheduler: Scheduler) -> None:
        """Give idle instance ``idx`` a fresh scheduler (a cluster reusing a stopped engine)."""
        inst = self.instances[idx]
        assert not inst.busy
        inst.scheduler = scheduler
        inst.scheduler.on_finish = self._on_finish
        inst.scheduler.on_pause = self._pauser(idx)

    def deliver(self, idx: int, req: Request, t_ns: int) -> None:
        """Hand ``req`` to instance ``idx`` at ``t_ns`` from a timer or an arrival (a cluster
        router). A busy instance in the middle of a fast-forwarded run is interrupted at its
        first step boundary after ``t_ns``, as step-by-step simulation would see it."""
        inst = self.instances[idx]
        self.recorder.assign(req.request_id, idx)
        if not inst.busy:
            end = inst.on_arrival(req, t_ns)
            if end is not None:
                self._push_step(end, idx)
            return
        inst.engine.submit(req)
        end = inst.interrupt(t_ns)
        if end is not None:
            self._stale.add(self._cur_seq[idx])
            self._push_step(end, idx)

    def notify(self, idx: int, t_ns: int) -> None:
        """Work already inside instance ``idx`` became schedulable at ``t_ns`` (a KV transfer
        ended): start the idle instance, or cut its fast-forwarded run at its first step
        boundary after ``t_ns``, as :meth:`deliver` does."""
        inst = self.instances[idx]
        if not inst.busy:
            self.wake(idx, t_ns)
            return
        end = inst.interrupt(t_ns)
        if end is not None:
            self._stale.add(self._cur_seq[idx])
            self._push_step(end, idx)

    def next_external_ns(self) -> int:
        """The next time something outside an instance may change its schedule."""
        t = self.arrivals.peek()
        if self._timers and self._timers[0][0] < t:
            return self._timers[0][0]
        return t

    def next_resume_ns(self, idx: int) -> int:
        """The earliest return of a paused request of instance ``idx`` (INF_NS: none)."""
        r = self._resumes[idx]
        return r[0] if r else INF_NS

    def _push_step(self, end: int, idx: int) -> None:
        self._seq += 1
        self._cur_seq[idx] = self._seq
        heapq.heappush(self._steps, (end, self._seq, idx))

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        steps, timers = self._steps, self._timers
        instances = self.instances
        arrivals = self.arrivals
        recorder = self.recorder
        make_request = self.make_request
        route = self.route
        progress = self.progress
        events = 0
        next_progress = 4096
        push = heapq.heappush
        pop = heapq.heappop
        cur_seq = self._cur_seq
        stale = self._stale
        peek = arrivals.peek
        while True:
            t_arr = peek()
            t_step = steps[0][0] if steps else INF_NS
            if timers:
                t_tim, prio = timers[0][0], timers[0][1]
            else:
                t_tim, prio = INF_NS, CONTROL
            if t_step <= t_arr and t_step <= t_tim and t_step < INF_NS:
                t, seq, idx = pop(steps)
                if stale and seq in stale:
                    stale.discard(seq)
                    continue
                self.now_ns = t
                end = instances[idx].on_step_end(t)
                if end is not None:
                    self._seq += 1
                    cur_seq[idx] = self._seq
                    push(steps, (end, self._seq, idx))
            elif t_tim < INF_NS and (t_tim < t_arr or (t_tim == t_arr and prio < ARRIVAL)):
                t, _, _, fn = pop(timers)
                self.now_ns = t
                fn(t)
            elif t_arr < INF_NS:
                rid, t = arrivals.pop()
                self.now_ns = t
                req = make_request(rid, t)
                recorder.arrival_ns[rid] = t
                idx = route(req) if route is not None else 0
                if idx >= 0:
                    recorder.assign(rid, idx)
                    end = instances[idx].on_arrival(req, t)
                    if end is not None:
                        self._seq += 1
                        cur_seq[idx] = self._seq
                        push(steps, (end, self._seq, idx))
            else:
                break
            events += 1
            if progress is not None and events >= next_progress:
                next_progress += 4096
                progress(recorder.num_finished)
        self.num_events = events
        if progress is not None:
            progress(recorder.num_finished)
