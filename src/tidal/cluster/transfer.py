"""Bandwidth-limited, cancellable transfers over shared links (docs/research/warmserve.md §4.1 item
4).

A transfer moves ``nbytes`` over a path of links (e.g. ``ssd:0`` then ``pcie:3``). Concurrent
transfers share every link max-min fairly (progressive filling; each transfer may also carry its
own rate cap, e.g. the page-mapping throughput). Rates change only when a transfer starts, ends
or is cancelled; between such events every transfer progresses linearly, so completion times are
exact: ``t_done = now + ⌈remaining / rate⌉`` ns, recomputed at each change. The engine keeps one
pending timer (a token invalidates stale ones) and calls ``on_done(now)`` of each finished
transfer in start order.

A transfer may carry a one-way ``latency_ns`` (a network link's, :mod:`tidal.cluster.links`):
its callback then fires ``latency_ns`` after the last byte left, as a timer; the latency does
not occupy the links (the next transfer's bytes flow meanwhile).

A cancelled transfer stops at once and never calls back (the caller frees its pages).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tidal.core.units import NS_PER_S


@dataclass(eq=False)
class Transfer:
    tid: int
    nbytes: float
    links: tuple[str, ...]
    on_done: Callable[[int], None]
    max_rate: float = math.inf
    remaining: float = 0.0
    rate: float = 0.0
    started_ns: int = 0
    finished_ns: int = -1
    cancelled: bool = False
    latency_ns: int = 0

    @property
    def active(self) -> bool:
        return self.finished_ns < 0 and not self.cancelled

    @property
    def done_fraction(self) -> float:
        return 1.0 - self.remaining / self.nbytes if self.nbytes else 1.0


class TransferEngine:
    def __init__(
        self, links: dict[str, float], call_at: Callable[[int, Callable[[int], None]], None]
    ) -> None:
        self.capacity = dict(links)
        """Bytes per second of each link."""
        self.call_at = call_at
        self.active: dict[int, Transfer] = {}
        self._next_id = 0
        self._last_ns = 0
        self._token = 0
        self.bytes_moved = 0.0

    def start(
        self,
        now_ns: int,
        nbytes: float,
        links: tuple[str, ...],
        on_done: Callable[[int], None],
        max_rate: float = math.inf,
        latency_ns: int = 0,
    ) -> Transfer:
        """Start moving ``nbytes`` over ``links`` at ``now_ns``; ``on_done(t)`` is called at
        ``t`` = the last byte's time + ``latency_ns``."""
        for link in links:
            if link not in self.capacity:
                raise KeyError(f"unknown link {link!r}")
        self._advance(now_ns)
        tr = Transfer(self._next_id, float(nbytes), links, on_done, max_rate, float(nbytes))
        tr.started_ns = now_ns
        tr.latency_ns = latency_ns
        self._next_id += 1
        self.active[tr.tid] = tr
        self._reshare(now_ns)
        return tr

    def cancel(self, now_ns: int, tr: Transfer) -> None:
        if not tr.active:
            return
        self._advance(now_ns)
        tr.cancelled = True
        del self.active[tr.tid]
        self._reshare(now_ns)

    def sync(self, now_ns: int) -> None:
        """Bring every transfer's ``remaining`` up to ``now`` (rates unchanged)."""
        self._advance(now_ns)

    # ------------------------------------------------------------------ internals
    def _advance(self, now_ns: int) -> None:
        dt = (now_ns - self._last_ns) / NS_PER_S
        if dt > 0:
            for tr in self.active.values():
                moved = min(tr.remaining, tr.rate * dt)
                tr.remaining -= moved
                self.bytes_moved += moved
        self._last_ns = now_ns

    def _allocate(self) -> None:
        """Max-min fair rates by progressive filling."""
        left = dict(self.capacity)
        todo = sorted(self.active.values(), key=lambda t: t.tid)
        for tr in todo:
            tr.rate = 0.0
        while todo:
            count: dict[str, int] = {}
            for tr in todo:
                for link in tr.links:
                    count[link] = count.get(link, 0) + 1
            share = min((left[k] / n for k, n in count.items()), default=math.inf)
            share = min(share, min(tr.max_rate - tr.rate for tr in todo))
            tight = {k for k, n in count.items() if left[k] / n <= share * (1 + 1e-12)}
            keep = []
            for tr in todo:
                tr.rate += share
                capped = tr.max_rate < math.inf and tr.max_rate - tr.rate <= tr.max_rate * 1e-12
                if capped or any(k in tight for k in tr.links):
                    continue
                keep.append(tr)
            for k, n in count.items():
                left[k] = max(left[k] - share * n, 0.0)
            todo = keep

    def _reshare(self, now_ns: int) -> None:
        self._allocate()
        self._token += 1
        if not self.active:
            return
        t_next = min(
            now_ns + max(math.ceil(tr.remaining / tr.rate * NS_PER_S), 0)
            if tr.rate > 0
            else 1 << 62
            for tr in self.active.values()
        )
        token = self._token
        self.call_at(t_next, lambda t: self._on_timer(t, token))

    def _on_timer(self, now_ns: int, token: int) -> None:
        if token != self._token:
            return
        self._advance(now_ns)
        done = [tr for tr in self.active.values() if tr.remaining <= max(1.0, 1e-9 * tr.nbytes)]
        for tr in done:
            self.bytes_moved += tr.remaining
            tr.remaining = 0.0
            tr.finished_ns = now_ns
            del self.active[tr.tid]
        self._reshare(now_ns)
        for tr in sorted(done, key=lambda t: t.tid):
            if tr.latency_ns > 0:
                self.call_at(now_ns + tr.latency_ns, tr.on_done)
            else:
                tr.on_done(now_ns)
