"""WarmServe's peak hold (``docs/design/warmserve-high-rate.md``): per model, the
largest in-flight count seen at an arrival over the last ``peak_keep_s``.

Invariant: each model's deque holds ``(arrival ns, count)`` with times increasing and counts
strictly decreasing (a monotone queue), so its head is the window's maximum; every push and
expiry is amortised O(1).
"""

from __future__ import annotations

from collections import deque


class PeakHold:
    def __init__(self, num_models: int, keep_ns: int) -> None:
        self.keep_ns = keep_ns
        self.peaks: list[deque[tuple[int, int]]] = [deque() for _ in range(num_models)]

    def note(self, m: int, now_ns: int, count: int) -> None:
        """Record model ``m``'s in-flight ``count`` at an arrival at ``now_ns``."""
        pk = self.peaks[m]
        while pk and pk[-1][1] <= count:
            pk.pop()
        pk.append((now_ns, count))

    def peak(self, m: int, now_ns: int) -> int:
        """The largest count noted over the last ``keep_ns`` (0: none)."""
        pk = self.peaks[m]
        while pk and now_ns - pk[0][0] >= self.keep_ns:
            pk.popleft()
        return pk[0][1] if pk else 0

    def next_expiry(self, now_ns: int, until: int) -> int:
        """The earliest instant before ``until`` at which some model's held peak expires (the
        peak rule's input moves then), else ``until``."""
        for m, pk in enumerate(self.peaks):
            if self.peak(m, now_ns):
                until = min(until, pk[0][0] + self.keep_ns)
        return until
