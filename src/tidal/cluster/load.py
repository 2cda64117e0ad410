"""Per-model in-flight load, as the WarmServe controller tracks it (docs/research/warmserve.md §2.1,
§2.6).

A request counts from its arrival at the router to its completion (held requests included).
Two views:

* autoscaler: the time-averaged count over the last ``window`` (5 s), from (time, count) stamps,
  exactly as the artifact's ``get_avg_load`` (a window with no stamp returns the last count;
  otherwise ∫ count dt from the last stamp at or before the window's start, or from its start
  when there is none, to now, over the window's length). Each stamp carries the running
  integral ∫₀ᵗ count dt (exact integer request·ns), so a query is one subtraction after
  dropping expired stamps: amortised O(1);
* forecaster: per forecast window, the integral of the count (→ average) and the largest count
  seen at arrivals (→ peak), reset when the window closes.
"""

from __future__ import annotations

from collections import deque


class ModelLoad:
    def __init__(self) -> None:
        self.inflight = 0
        self.stamps: deque[tuple[int, int, int]] = deque()
        """(time, count after the change, ∫₀ᵗ count dt) per change."""
        self._cum = 0
        self._sum = 0  # request·ns since the window opened
        self._last = 0
        self._peak = 0
        self.total_arrivals = 0
        self.keep_stamps = True
        """Record (time, count) stamps for :meth:`avg_load` (off for static policies)."""

    def change(self, now_ns: int, delta: int) -> None:
        area = (now_ns - self._last) * self.inflight
        self._sum += area
        self._cum += area
        self._last = now_ns
        self.inflight += delta
        if delta > 0:
            self.total_arrivals += delta
            if self.inflight > self._peak:
                self._peak = self.inflight
        if self.keep_stamps:
            self.stamps.append((now_ns, self.inflight, self._cum))

    def avg_load(self, now_ns: int, window_ns: int) -> float:
        st = self.stamps
        if not st:
            return 0.0
        start = now_ns - window_ns
        if len(st) == 1:
            t, load, _ = st[0]
            return float(load) if t < start else load * (now_ns - t) / window_ns
        while len(st) >= 2 and st[1][0] <= start:
            st.popleft()
        if len(st) == 1:
            return float(st[0][1])
        # count 0 before a first stamp after ``start``: both cases integrate from st[0]'s time
        t_last, load_last, cum_last = st[-1]
        return (cum_last + load_last * (now_ns - t_last) - st[0][2]) / window_ns

    def close_window(self, now_ns: int, window_ns: int) -> tuple[float, float]:
        """(average, peak) of the window ending now; opens the next one."""
        area = (now_ns - self._last) * self.inflight
        self._sum += area
        self._cum += area
        self._last = now_ns
        avg = self._sum / window_ns
        peak = float(self._peak)
        self._sum = 0
        self._peak = 0
        return avg, peak
