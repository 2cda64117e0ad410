"""The pool of prewarmed engine processes a cold start activates (docs/research/warmserve.md §4.1):
a handoff per activation, and a refill ``engine_s`` after the pool falls below its refill mark."""

from __future__ import annotations

from tidal.cluster.config import StartupConfig
from tidal.core.units import NS_PER_S, s_to_ns


class EnginePool:
    """Invariant: ``size`` processes are ready; at most one refill is pending
    (``refill_at`` ≥ 0), adding ``startup.engine_pool`` processes when it lands."""

    def __init__(self, startup: StartupConfig) -> None:
        self.startup = startup
        self.size = startup.engine_pool
        self.refill_at = -1

    def handoff_s(self, now_ns: int) -> float:
        """Seconds until a prewarmed engine process is ready for ``now``'s activation: the
        handoff, plus the wait for a refill when the pool is empty (32 processes, refilled
        ``engine_s`` after falling below 10)."""
        st = self.startup
        if self.refill_at >= 0 and now_ns >= self.refill_at:
            self.size += st.engine_pool
            self.refill_at = -1
        wait = 0.0
        if self.size == 0 and self.refill_at < 0:
            self.refill_at = now_ns + s_to_ns(st.engine_s)
        if self.size == 0:
            wait = (self.refill_at - now_ns) / NS_PER_S
            self.size += st.engine_pool
            self.refill_at = -1
        self.size -= 1
        if self.size < st.engine_pool_refill_below and self.refill_at < 0:
            self.refill_at = now_ns + s_to_ns(st.engine_s)
        return wait + st.handoff_s
