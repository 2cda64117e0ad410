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


class ThreadCPUClock:
    """The calling thread's CPU time, jumping over idle gaps: "dedicated core" time.

    On a shared machine the wall time of a compute-bound single-threaded engine stretches
    whenever other processes take its core. This clock counts only the CPU time the engine's
    thread consumed (``time.thread_time_ns``), and :meth:`advance_to` skips idle waits (an
    open-loop replay jumps to the next arrival instead of sleeping), so it measures what the
    wall clock would show on a dedicated core. Read it only from the thread that created it.
    """

    def __init__(self) -> None:
        self._t0 = time.thread_time_ns()
        self._skipped = 0

    def now_ns(self) -> int:
        return time.thread_time_ns() - self._t0 + self._skipped

    def advance_to(self, t_ns: int) -> None:
        now = self.now_ns()
        if t_ns > now:
            self._skipped += t_ns - now


CLOCKS = ("wall", "cpu")
CLOCK_CHOICES = ("auto", *CLOCKS)
"""What ``--clock`` takes: ``auto`` is ``cpu`` on a CPU device (shared machines: the engine's
thread time, other tenants skipped) and ``wall`` on an accelerator (its kernels' time is not
the host thread's)."""


def resolve_clock(kind: str, device_type: str) -> str:
    """``auto`` → ``cpu`` when the engine runs on the CPU, else ``wall``; others unchanged."""
    if kind == "auto":
        return "cpu" if device_type == "cpu" else "wall"
    if kind not in CLOCKS:
        raise ValueError(f"unknown clock {kind!r} (valid: {', '.join(CLOCK_CHOICES)})")
    return kind


def make_clock(kind: str) -> WallClock | ThreadCPUClock:
    if kind == "wall":
        return WallClock()
    if kind == "cpu":
        return ThreadCPUClock()
    raise ValueError(f"unknown clock {kind!r} (valid: {', '.join(CLOCKS)})")
