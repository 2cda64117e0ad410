"""A minimal timer loop standing in for a backend in cluster unit tests."""

from __future__ import annotations

import heapq
from collections.abc import Callable


class TimerLoop:
    def __init__(self) -> None:
        self.now = 0
        self._heap: list[tuple[int, int, Callable[[int], None]]] = []
        self._seq = 0

    def now_ns(self) -> int:
        return self.now

    def call_at(self, t: int, fn: Callable[[int], None]) -> None:
        assert t >= self.now
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn))

    def run(self, until: int = 1 << 62) -> None:
        while self._heap and self._heap[0][0] <= until:
            t, _, fn = heapq.heappop(self._heap)
            self.now = t
            fn(t)
        self.now = max(self.now, min(until, self.now if not self._heap else until))


class FakeBackend(TimerLoop):
    """Timers plus engines that only record what they were given."""

    def __init__(self) -> None:
        super().__init__()
        self.engines: list[tuple[str, object, object]] = []
        self.delivered: list[tuple[int, int, int]] = []
        self.released: list[int] = []

    def start_engine(self, model, kv, perf) -> int:
        self.engines.append((model.name, kv, perf))
        return len(self.engines) - 1

    def release_engine(self, engine) -> None:
        self.released.append(engine)

    def deliver(self, engine, req, now_ns) -> None:
        self.delivered.append((engine, req.request_id, now_ns))
