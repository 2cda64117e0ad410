"""Clocks: virtual time in the simulator, wall time in the real engine. Both count integer ns."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ns(self) -> int: ...


class VirtualClock:
    """Set by the simulator's event loop; never moves backwards."""

    def __init__(self, start_ns: int = 0) -> None:
        self._now = start_ns

    def now_ns(self) -> int:
        return self._now

    def advance_to(self, t_ns: int) -> None:
        if t_ns < self._now:
            raise ValueError(f"time moved backwards: {t_ns} < {self._now}")
        self._now = t_ns


class WallClock:
    """Monotonic wall time since construction."""

    def __init__(self) -> None:
        self._t0 = time.monotonic_ns()

    def now_ns(self) -> int:
        return time.monotonic_ns() - self._t0
