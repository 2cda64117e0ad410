"""Typed policy statistics: summable counters and busy time by batching mode.

A batching policy reports a :class:`PolicyStats`; engines' stats add up (a model's replicas, a
cluster's engines) and subtract (a measured phase after a warm-up), and every ratio is derived
here, once: ``eb_time_share = eb_ns / (eb_ns + mb_ns)`` (absent when no mode time was counted,
e.g. plain mixed batching).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class PolicyStats:
    counters: dict[str, int] = field(default_factory=dict)
    """Event counts (``mode_switches``, ``eb_refills``, ``eb_oom_preemptions``, …)."""
    eb_ns: int = 0
    """Time of the steps run in exclusive batching."""
    mb_ns: int = 0
    """Time of the steps run in mixed batching by a policy that switches (EB⁺)."""

    def __add__(self, other: PolicyStats) -> PolicyStats:
        keys = self.counters.keys() | other.counters.keys()
        c = {k: self.counters.get(k, 0) + other.counters.get(k, 0) for k in sorted(keys)}
        return PolicyStats(c, self.eb_ns + other.eb_ns, self.mb_ns + other.mb_ns)

    def __sub__(self, other: PolicyStats) -> PolicyStats:
        c = {k: v - other.counters.get(k, 0) for k, v in self.counters.items()}
        return PolicyStats(c, self.eb_ns - other.eb_ns, self.mb_ns - other.mb_ns)

    @property
    def eb_time_share(self) -> float | None:
        busy = self.eb_ns + self.mb_ns
        return self.eb_ns / busy if busy else None

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.counters)
        share = self.eb_time_share
        if share is not None:
            out["eb_time_share"] = share
        return out

    @staticmethod
    def total(stats: Iterable[PolicyStats]) -> PolicyStats:
        out = PolicyStats()
        for s in stats:
            out = out + s
        return out
