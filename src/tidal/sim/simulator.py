"""The discrete-event loop (DESIGN.md §3).

Events are ``(time_ns, priority, seq, instance)`` tuples on one heap; ``seq`` is a per-run
counter so ties resolve in insertion order. Arrivals are not on the heap: they come from a
sorted stream (open loop) or from completions (closed loop) and are merged in. Same-time rule:
step ends (priority 0) before arrivals (priority 1); a step that starts at the instant of an
arrival does not see it. Each instance has at most one pending step-end event.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

from tidal.core.request import Request
from tidal.core.units import INF_NS
from tidal.sim.instance import SimInstance
from tidal.sim.recorder import RequestRecorder
from tidal.workload.base import RequestSet

STEP_END = 0
ARRIVAL = 1


class ArrivalStream:
    """Yields request ids and their arrival times. Open loop: the workload's times. Closed loop
    (``concurrency`` c): c requests at t = 0, then one more at each completion."""

    def __init__(self, requests: RequestSet, concurrency: int | None = None) -> None:
        self.n = len(requests)
        self.next_id = 0
        self.concurrency = concurrency
        if concurrency is None:
            self._times: list[int] = requests.arrival_ns.tolist()
            self._ready: deque[int] = deque()
        else:
            self._times = []
            self._ready = deque([0] * min(concurrency, self.n))

    def peek(self) -> int:
        if self.next_id >= self.n:
            return INF_NS
        if self.concurrency is None:
            return self._times[self.next_id]
        return self._ready[0] if self._ready else INF_NS

    def pop(self) -> tuple[int, int]:
        t = self.peek()
        if self.concurrency is not None:
            self._ready.popleft()
        i = self.next_id
        self.next_id += 1
        return i, t

    def on_finish(self, t_ns: int) -> None:
        if self.concurrency is not None:
            self._ready.append(t_ns)


class Simulation:
    def __init__(
        self,
        instances: list[SimInstance],
        requests: RequestSet,
        recorder: RequestRecorder,
        concurrency: int | None = None,
        route: Callable[[Request], int] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.instances = instances
        self.requests = requests
        self.recorder = recorder
        self.arrivals = ArrivalStream(requests, concurrency)
        self.route = route
        self.progress = progress
        self.now_ns = 0
        self.num_events = 0
        self._prompt = requests.prompt_len.tolist()
        self._output = requests.output_len.tolist()
        models = requests.extra.get("model_name")
        self._model = models.tolist() if models is not None else None
        for inst in instances:
            inst.scheduler.on_finish = self._on_finish
            inst.next_arrival_ns = self.arrivals.peek

    def _on_finish(self, req: Request) -> None:
        self.recorder.on_finish(req)
        self.arrivals.on_finish(req.finish_ns)

    def run(self) -> None:
        heap: list[tuple[int, int, int, int]] = []
        instances = self.instances
        arrivals = self.arrivals
        recorder = self.recorder
        prompt, output, model = self._prompt, self._output, self._model
        route = self.route
        seq = 0
        events = 0
        progress = self.progress
        next_progress = 4096
        while True:
            t_arr = arrivals.peek()
            if heap and heap[0][0] <= t_arr:
                t, _, _, idx = heapq.heappop(heap)
                self.now_ns = t
                end = instances[idx].on_step_end(t)
            elif t_arr < INF_NS:
                rid, t = arrivals.pop()
                self.now_ns = t
                req = Request(rid, t, prompt[rid], output[rid], model[rid] if model else "")
                recorder.arrival_ns[rid] = t
                idx = route(req) if route is not None else 0
                recorder.instance[rid] = idx
                end = instances[idx].on_arrival(req, t)
            else:
                break
            if end is not None:
                seq += 1
                heapq.heappush(heap, (end, STEP_END, seq, idx))
            events += 1
            if progress is not None and events >= next_progress:
                next_progress += 4096
                progress(recorder.num_finished)
        self.num_events = events
        if progress is not None:
            progress(recorder.num_finished)
