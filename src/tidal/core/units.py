"""Time units. Every simulated time is an integer number of nanoseconds (docs/DESIGN.md §2)."""

from __future__ import annotations

import math

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
INF_NS = 2**62
"""A time later than any simulated event (about 146 years)."""


def s_to_ns(seconds: float) -> int:
    """Seconds to integer nanoseconds, rounded half up; ``inf`` maps to :data:`INF_NS`."""
    if math.isinf(seconds):
        return INF_NS
    return math.floor(seconds * NS_PER_S + 0.5)


def ns_to_s(ns: int) -> float:
    return ns / NS_PER_S
