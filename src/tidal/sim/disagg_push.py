"""The push path with layer-wise overlap, ``deployment.kv_transfer.protocol: push`` (SGLang +
Mooncake; docs/design/disaggregation-speculation.md §1.1, §1.3).

1. arrival → a prefill instance i and a decode instance j are picked at once (each pool's
   router); the decode leg is delivered to j first, which pre-allocates its prompt's blocks
   when admission reaches it (``RemoteKV``: its own prefix-cache hit is not sent);
2. then (a timer at that instant, or ``deployment.request_overhead_ms`` later: the handshake)
   the prefill leg is delivered to i — SGLang's prefill server holds a request in its bootstrap
   queue until the decode side has reserved its KV;
3. the KV streams while the prompt is computed: one transfer of the prompt's bytes starts on
   ``tx:p{i}`` → ``rx:d{j}`` when the prefill leg is first scheduled, and the KV is complete at
   ``max(link done, prefill end + ⌈bytes / (L · rate)⌉) + latency`` — the last layer's share
   cannot leave before the prefill ends (L layers, ``rate`` the path's rate alone); a
   two-term approximation (design §7.3);
4. then, as in the pull path, the prefill blocks are released and the decode leg recomputes the
   last prompt token to sample its first token (design §7.1: whether SGLang streams the prefill's
   token instead is open; this keeps the first token on the decode side).

The TTFT breakdown of a push run (``decode_alloc_ns`` column) is kv_wait (arrival → decode
blocks), handoff (the request overhead, if any), queue (→ prefill start), prefill, transfer
(the exposed tail: prefill end → KV complete), first_decode; it telescopes to TTFT as the pull
one does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tidal.cluster.links import kv_transfer_bytes
from tidal.core.request import Request
from tidal.engine.events import StateListener
from tidal.sim.disagg_wiring import DisaggWiring
from tidal.sim.instance import SimInstance
from tidal.sim.simulator import RESUME


class _Started(StateListener):
    def __init__(self, fn: Callable[[Request], None]) -> None:
        self.fn = fn

    def on_started(self, req: Request) -> None:
        self.fn(req)


class PushWiring(DisaggWiring):
    """Hand-offs of the push path (module docstring)."""

    def __init__(self, *args: Any, layers: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.layers = layers
        self.route_prefill: Callable[[Request], int] | None = None
        self._legs: dict[int, tuple[Request, int, int, Request]] = {}
        """Request id → (prefill leg, i, j, decode leg) until its KV is complete."""
        self._link_end: dict[int, int] = {}
        self._tail: dict[int, int] = {}
        self._sent: set[int] = set()

    def route(self, leg: Request) -> int:
        """The simulation's router: pair the pools, deliver the decode leg; the prefill leg
        waits outside the instances (−1) until its decode blocks are reserved."""
        rid, t = leg.request_id, self.sim.now_ns
        i = self.route_prefill(leg) if self.route_prefill is not None else 0
        dleg = self._decode_leg(leg)
        j = self.route_decode(dleg)
        self.cols.decode_instance[rid] = j
        self._legs[rid] = (leg, i, j, dleg)
        self.remote[j].expect(dleg)
        self.sim.deliver(self.d_idx[j], dleg, t)
        return -1

    def attach_prefill(self, i: int, inst: SimInstance) -> None:
        super().attach_prefill(i, inst)
        inst.scheduler.state.add_listener(_Started(self._prefill_started))

    # ------------------------------------------------------------------ events
    def _starter(self, j: int) -> Callable[[Request, int], None]:
        def reserved(dleg: Request, now_ns: int) -> None:
            rid = dleg.request_id
            self.cols.decode_alloc_ns[rid] = now_ns
            leg, i, _, _ = self._legs[rid]
            if self.handoff_ns:  # the bootstrap handshake before the prefill may start
                self.cols.handoff_ns[rid] = self.handoff_ns
            at = now_ns + self.handoff_ns
            self.sim.call_at(at, lambda t: self._send_prefill(leg, i, j, t), RESUME)

        return reserved

    def _send_prefill(self, leg: Request, i: int, j: int, t: int) -> None:
        self.sim.deliver(self.p_idx[i], leg, t)
        self.sim.recorder.assign(leg.request_id, self.d_idx[j])  # the serving engine

    def _prefill_started(self, leg: Request) -> None:
        rid = leg.request_id
        if rid in self._sent:  # re-admitted after a preemption: the stream is running
            return
        self._sent.add(rid)
        _, i, j, dleg = self._legs[rid]
        now = self.sim.now_ns
        nbytes = kv_transfer_bytes(*self.kv_per_gpu, dleg.prompt_len - dleg.num_computed_tokens)
        self.cols.transfer_started(rid, now, nbytes)
        self._tail[rid] = math.ceil(nbytes / (self.layers * self.ideal_rate) * 1e9)
        self.links.start(now, nbytes, (f"tx:p{i}", f"rx:d{j}"), lambda t: self._link_done(rid, t))

    def on_prefill_done(self, i: int, leg: Request) -> None:
        rid = leg.request_id
        self.held[i].hold(leg)
        self.cols.prefill_done(leg, i)
        self._prefilled(self._legs[rid][3], leg)
        done = self._link_end.pop(rid, None)
        if done is not None:
            self._complete_at(rid, max(done, leg.finish_ns + self._tail[rid]))

    def _link_done(self, rid: int, t: int) -> None:
        end = int(self.cols.prefill_end_ns[rid])
        if end >= 0:
            self._complete_at(rid, max(t, end + self._tail[rid]))
        else:
            self._link_end[rid] = t

    def _complete_at(self, rid: int, t: int) -> None:
        self.sim.call_at(t + self.link.latency_ns, lambda now: self._complete(rid, now), RESUME)

    def _complete(self, rid: int, t: int) -> None:
        _, i, j, dleg = self._legs.pop(rid)
        del self._tail[rid]
        self._sent.discard(rid)
        self._transferred(i, j, dleg, t)
