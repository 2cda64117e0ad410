"""A disaggregated prefill/decode deployment in one event loop: the pull path of vLLM's
NixlConnector (docs/design/disaggregation-speculation.md §1.3–1.4).

Instances 0…P−1 are the prefill pool, P…P+D−1 the decode pool (``sim/deployment.py``). A
request's path:

1. arrival → router over the prefill pool → the **prefill leg**, the request with
   ``max_tokens = 1``, on prefill instance i (chunked prefill, prefix caching, any policy);
2. the leg samples its token and finishes; its blocks stay held (:class:`HeldBlocks`) and the
   hand-off is a timer at the same instant (priority 1: after every step end of that instant,
   so a decode step that starts then does not see it — the rule fast-forward cuts by);
3. router over the decode pool → the **decode leg** (the request with its full output length)
   is delivered to decode instance j and queued; when admission reaches it, it reuses the
   prefix j's cache holds, takes blocks for the rest of its prompt (:class:`RemoteKV`) and the
   transfer of the missing tokens' KV starts on the links ``tx:p{i}`` → ``rx:d{j}``
   (``cluster/links.py``, max-min shared);
4. transfer end (+ the link's latency): the prefill blocks are released (the instance is woken),
   the decode leg is loaded and its instance notified; the next step recomputes the last prompt
   token (1-token chunk) and samples the first output token — the client's first token.

Exactness: prefill instances never fast-forward (their requests leave at their first token);
decode instances get work only by :meth:`Simulation.deliver` and :meth:`Simulation.notify`,
both of which cut a run where stepping would first see the work, so their horizon is infinite;
their queue lets arrivals jump the head (a loaded leg needs no block), so their runs stay
interruptible unless the running set is full (then nothing can be admitted until a departure,
which ends the run anyway).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tidal.cluster.links import LinkSpec, kv_transfer_bytes, pool_links, resolve_link
from tidal.cluster.transfer import TransferEngine
from tidal.core.request import Request
from tidal.core.units import INF_NS
from tidal.engine.remote_kv import HeldBlocks, RemoteKV
from tidal.hardware.gpus import get_gpu
from tidal.sim.config import SimulationConfig
from tidal.sim.deployment import pool_config
from tidal.sim.disagg_metrics import DisaggColumns, disagg_result
from tidal.sim.instance import SimInstance
from tidal.sim.recorder import RequestRecorder
from tidal.sim.routers import make_router
from tidal.sim.run import SimResult, build_instance, check_context, load_requests
from tidal.sim.simulator import RESUME, Simulation
from tidal.workload.base import RequestSet


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
        self._source: dict[int, int] = {}

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
        self.sim.call_at(leg.finish_ns, lambda t: self._hand_off(leg, t), RESUME)

    def _decode_leg(self, leg: Request) -> Request:
        """The request as the proxy sends it to the decode pool (its full output length)."""
        rid = leg.request_id
        dleg = Request(rid, leg.arrival_ns, leg.prompt_len, int(self.output_len[rid]))
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
        self.sim.deliver(self.num_prefill + j, dleg, t)

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
        self.sim.wake(i, t)
        self.remote[j].loaded(dleg)
        self.sim.notify(self.num_prefill + j, t)


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


def run_disaggregated(
    cfg: SimulationConfig,
    requests: RequestSet | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Simulate ``cfg``'s disaggregated deployment on its workload (module docstring)."""
    assert cfg.deployment is not None
    dep = cfg.deployment
    t0 = time.perf_counter()
    reqs = requests if requests is not None else load_requests(cfg)
    t_load = time.perf_counter()
    check_context(cfg.model_spec(), reqs)
    pcfg, dcfg = pool_config(cfg, "prefill"), pool_config(cfg, "decode")
    content = reqs.content is not None
    longest = int((reqs.prompt_len + reqs.output_len).max())
    pre = [build_instance(pcfg, int(reqs.prompt_len.max()) + 1, content) for _ in range(
        dep.prefill.instances)]  # fmt: skip
    dec = [build_instance(dcfg, longest, content) for _ in range(dep.decode.instances)]
    recorder = RequestRecorder(reqs)
    n = len(reqs)
    cb = (lambda done: progress(done, n)) if progress is not None else None
    sim = Simulation([], reqs, recorder, cfg.workload.concurrency, progress=cb)
    n_pre = len(pre)
    sim.horizon = lambda idx: sim.next_external_ns if idx < n_pre else _never
    insts = [SimInstance(i, s, p, cfg.fast_forward) for i, (s, p, _) in enumerate(pre + dec)]
    for inst in insts:
        sim.add_instance(inst)
    p_insts, d_insts = insts[:n_pre], insts[n_pre:]
    cols = DisaggColumns(n, dep.kv_transfer.protocol == "push")
    wiring = _wire(cfg, sim, (pcfg, p_insts), (dcfg, d_insts), cols, reqs.output_len)
    default = sim.make_request
    sim.make_request = lambda rid, t: _prefill_leg(default(rid, t))
    sim.run()
    t_sim = time.perf_counter()
    timing = {
        "wall_s": t_sim - t0,
        "load_s": t_load - t0,
        "simulate_s": t_sim - t_load,
        "num_events": sim.num_events,
        "simulated_requests_per_s": n / max(t_sim - t_load, 1e-9),
    }
    pools = {"prefill": (pcfg, p_insts, pre), "decode": (dcfg, d_insts, dec)}
    return disagg_result(cfg, recorder, cols, pools, wiring, sim.now_ns, timing)


def _wire(
    cfg: SimulationConfig,
    sim: Simulation,
    prefill: tuple[SimulationConfig, list[SimInstance]],
    decode: tuple[SimulationConfig, list[SimInstance]],
    cols: DisaggColumns,
    output_len: Any,
) -> DisaggWiring:
    """The link between the pools, the wiring of the run's protocol attached to every
    instance, and the simulation's router (over the prefill pool; push: both pools)."""
    assert cfg.deployment is not None
    dep, (pcfg, p_insts), (dcfg, d_insts) = cfg.deployment, prefill, decode
    n_pre, n_dec = len(p_insts), len(d_insts)
    link = resolve_link(
        dep.kv_transfer.link, get_gpu(pcfg.gpu), get_gpu(dcfg.gpu),
        n_pre * pcfg.tp + n_dec * dcfg.tp, dep.kv_transfer.bandwidth_gbs,
        dep.kv_transfer.latency_us, dep.kv_transfer.efficiency,
    )  # fmt: skip
    per_gpu = dcfg.model_spec().kv_bytes_per_token_per_gpu(dcfg.tp)
    args = (sim, p_insts, d_insts, link, (per_gpu, dcfg.tp), cols, output_len, dep.router)
    route = make_router(dep.router, p_insts) if n_pre > 1 else None
    wiring: DisaggWiring
    if dep.kv_transfer.protocol == "push":
        from tidal.sim.disagg_push import PushWiring

        wiring = pushed = PushWiring(*args, layers=dcfg.model_spec().num_layers)
        pushed.route_prefill = route
        route = pushed.route
    else:
        wiring = DisaggWiring(*args)
    wiring.set_capacities(pool_links(link, n_pre, pcfg.tp, n_dec, dcfg.tp))
    for i, inst in enumerate(p_insts):
        wiring.attach_prefill(i, inst)
    for j, inst in enumerate(d_insts):
        wiring.attach_decode(j, inst)
    sim.route = route
    return wiring


def _never() -> int:
    return INF_NS


def _prefill_leg(req: Request) -> Request:
    """The request as the proxy sends it to the prefill pool: ``max_tokens = 1``."""
    req.max_output_len = 1
    return req
