"""The hand-offs between the prefill and decode pools of a disaggregated run: prefill legs'
held blocks, decode legs' remote admission, and KV transfers over the pools' links
(:mod:`tidal.sim.disagg` builds the run; the steps are numbered in its docstring)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidal.augment.component import Augmentation
from tidal.cluster.links import LinkSpec, kv_transfer_bytes
from tidal.cluster.transfer import TransferEngine
from tidal.core.request import Request
from tidal.core.units import INF_NS
from tidal.engine.remote_kv import HeldBlocks, RemoteKV
from tidal.sim.disagg_metrics import DisaggColumns
from tidal.sim.instance import SimInstance
from tidal.sim.routers import make_router
from tidal.sim.simulator import RESUME, Simulation


class DisaggWiring:
    """The hand-offs between the pools of one simulation (module docstring, steps 2–4)."""

    def __init__(
        self,
        sim: Simulation,
        prefill: list[SimInstance],
        decode: list[SimInstance],
        link: LinkSpec,
        kv_per_gpu: tuple[float, int],
        cols: DisaggColumns,
        output_len: Any,
        router: str,
    ) -> None:
        self.sim = sim
        self.num_prefill = len(prefill)
        self.p_idx = [inst.index for inst in prefill]
        self.d_idx = [inst.index for inst in decode]
        """The pools' instances' indices in the simulation (a cluster's are anywhere)."""
        self.link = link
        self.kv_per_gpu = kv_per_gpu
        """(KV bytes per prompt token on one decode GPU, the decode pool's TP)."""
        self.cols = cols
        self.output_len = output_len
        self.links = TransferEngine({}, self._call_at)
        self.ideal_rate = 1.0
        self.held = [HeldBlocks(inst.scheduler.kv) for inst in prefill]
        self.remote = [
            RemoteKV(inst.scheduler.state, self._starter(j)) for j, inst in enumerate(decode)
        ]
        self.route_decode = _decode_router(router, decode, self.remote)
        self.augs = [_augmentation(inst) for inst in decode]
        """The decode instances' augmentations (augmented requests pause there), or None."""
        self._source: dict[int, int] = {}
        self.handoff_ns = 0
        """The serving path's fixed per-request latency (``sim/disagg_overhead.py``): pull,
        prefill token → decode leg delivered; push, decode blocks → prefill leg delivered."""

    def set_capacities(self, caps: dict[str, float]) -> None:
        """The links' bytes/s (:func:`tidal.cluster.links.pool_links`)."""
        self.links.capacity = dict(caps)
        self.ideal_rate = min(caps.values())
        """Bytes/s of one transfer alone on its path (every tx and rx port alike)."""

    def _call_at(self, t: int, fn: Callable[[int], None]) -> None:
        self.sim.call_at(t, fn, RESUME)

    # ------------------------------------------------------------------ prefill side
    def attach_prefill(self, i: int, inst: SimInstance) -> None:
        inst.scheduler.state.add_listener(self.held[i])
        inst.scheduler.on_finish = lambda leg: self.on_prefill_done(i, leg)
        _quiet_idle(inst, lambda: bool(self.held[i].held))

    def on_prefill_done(self, i: int, leg: Request) -> None:
        """The prefill leg finished (its blocks were just freed): hold them, hand off."""
        self.held[i].hold(leg)
        self.cols.prefill_done(leg, i)
        self._source[leg.request_id] = i
        at = leg.finish_ns + self.handoff_ns
        if self.handoff_ns:
            self.cols.handoff_ns[leg.request_id] = self.handoff_ns
        self.sim.call_at(at, lambda t: self._hand_off(leg, t), RESUME)

    def _decode_leg(self, leg: Request) -> Request:
        """The request as the proxy sends it to the decode pool (its full output length)."""
        rid = leg.request_id
        dleg = Request(
            rid, leg.arrival_ns, leg.prompt_len, int(self.output_len[rid]), payload=leg.payload
        )  # an augmented request's calls (payload) are the decode pool's to handle
        dleg.content = leg.content
        return dleg

    @staticmethod
    def _prefilled(dleg: Request, leg: Request) -> None:
        """The decode leg inherits the prefill's first schedule, prefix hit and preemptions."""
        dleg.first_scheduled_ns = leg.first_scheduled_ns
        dleg.num_cached_tokens = leg.num_cached_tokens
        dleg.num_preemptions += leg.num_preemptions

    def _hand_off(self, leg: Request, t: int) -> None:
        rid = leg.request_id
        dleg = self._decode_leg(leg)
        self._prefilled(dleg, leg)
        j = self.route_decode(dleg)
        self.cols.decode_instance[rid] = j
        self.remote[j].expect(dleg)
        self.sim.deliver(self.d_idx[j], dleg, t)

    # ------------------------------------------------------------------ decode side
    def attach_decode(self, j: int, inst: SimInstance) -> None:
        inst.scheduler.state.waiting.arrival_can_jump_head = True  # type: ignore[misc]
        _quiet_idle(inst, lambda: self.remote[j].busy)

    def _starter(self, j: int) -> Callable[[Request, int], None]:
        def start(dleg: Request, now_ns: int) -> None:
            rid = dleg.request_id
            i = self._source.pop(rid)
            # the decode side's own prefix hit (num_computed_tokens) is not transferred
            tokens = dleg.prompt_len - dleg.num_computed_tokens
            nbytes = kv_transfer_bytes(*self.kv_per_gpu, tokens)
            self.cols.transfer_started(rid, now_ns, nbytes)
            self.links.start(
                now_ns,
                nbytes,
                (f"tx:p{i}", f"rx:d{j}"),
                lambda t: self._transferred(i, j, dleg, t),
                latency_ns=self.link.latency_ns,
            )

        return start

    def _transferred(self, i: int, j: int, dleg: Request, t: int) -> None:
        self.cols.kv_transfer_end_ns[dleg.request_id] = t
        self.held[i].release(dleg.request_id)
        self.sim.wake(self.p_idx[i], t)
        self.remote[j].loaded(dleg)
        aug = self.augs[j]
        if aug is not None:  # its loaded blocks are idle KV until it starts
            aug.adopt_idle(dleg, t)
        self.sim.notify(self.d_idx[j], t)


def _quiet_idle(inst: SimInstance, holding: Callable[[], bool]) -> None:
    """The "head cannot be admitted into an empty instance" check does not apply while
    blocks are held for transfers (they come back when the transfers end)."""
    check = inst._on_idle

    def on_idle(now_ns: int) -> None:
        if not holding():
            check(now_ns)

    inst.engine.on_idle = on_idle


def _decode_router(
    name: str, decode: list[SimInstance], remote: list[RemoteKV]
) -> Callable[[Request], int]:
    """The pool router; ``least-loaded`` counts the legs whose KV is in flight as load."""
    if name != "least-loaded":
        return make_router(name, decode)
    scheds = [inst.scheduler for inst in decode]
    n = len(scheds)
    last = [n - 1]

    def least_loaded(req: Request) -> int:
        best, best_load = 0, -1
        for k in range(1, n + 1):
            i = (last[0] + k) % n
            s = scheds[i]
            load = len(s.running) + len(s.waiting) + len(remote[i].loading)
            if best_load < 0 or load < best_load:
                best, best_load = i, load
        last[0] = best
        return best

    return least_loaded


def _augmentation(inst: SimInstance) -> Augmentation | None:
    aug = inst.scheduler.augmentation
    return aug if isinstance(aug, Augmentation) else None


def never() -> int:
    return INF_NS


def prefill_leg(req: Request) -> Request:
    """The request as the proxy sends it to the prefill pool: ``max_tokens = 1``."""
    req.max_output_len = 1
    return req
