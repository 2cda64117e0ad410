"""``warmserve``: WarmServe (arXiv 2512.09472) as its artifact implements it, each part behind a
flag (``cluster.warmserve.disable``) so the ablations (a)–(f) of docs/research/warmserve.md §3.5 are
one config each (:data:`tidal.cluster.config.ABLATIONS`).

* **Universal GPU workers** (``device-prewarm``): the per-GPU worker and CUDA context exist
  from the start, so no instance pays stage (a).
* **Engine pool** (``engine-prewarm``): 32 prewarmed engine processes; an activation pays the
  argument handoff (stage (b) otherwise).
* **Unified memory** (``unified-memory``): each GPU's memory is one page pool; weights of any
  model can sit in it as replicas; a stopped instance keeps its weights as a warm replica (warm
  scale-down); an activation evicts other replicas on its GPUs and hands the weights over with
  zero copy.
* **Forecast-driven prewarming** (``forecast``): every 0.5 s the planner (§2.2–2.4) places new
  replicas by score from the window forecaster (§2.1).
* **Evict-aware placement** (``placement``): laminar, score-aware groups (§2.3) and, on a miss,
  the idle GPUs that overlap the fewest replicas (§2.5); off: round-robin first fit.
* **KV reservation** (``kv-reservation``): every 0.5 s a running instance's target of free KV
  blocks is ``⌊total · in-flight / B⌋``; extra free blocks are reserved at free events and their
  pages return to the GPU pool for background prewarming (§2.7).
* **Memory switching** (``memory-switching``): page mapping overlaps the weight copy and KV is
  mapped lazily; off: a load pays copy + mapping (0.2 s per 10 GB) and an activation maps all of
  its KV before serving (§2.8).

Weights load from host DRAM by default (the artifact reads local files through the page cache,
or a pinned preload); ``cluster.warmserve.checkpoints: ssd`` starts from a cold page cache.

Autoscaler and router (§2.6), shared by all variants: scale on the 5-s average in-flight load,
scale-down held at the recent peak, a router queue, a starvation guard, triage and an opt-in
overload fallback; the rules and why they hold P99 TTFT ≤ ServerlessLLM's at high rates are in
``docs/design/warmserve-high-rate.md`` ("The autoscaler and router as implemented").
"""

from __future__ import annotations

import math
from collections import deque

from tidal.cluster.coldstart import StartupPlan
from tidal.cluster.config import WARMSERVE_FEATURES
from tidal.cluster.forecast import WindowForecaster
from tidal.cluster.instance import ModelInstance, Replica, State
from tidal.cluster.kv import reservation_of
from tidal.cluster.models import ServedModel
from tidal.cluster.policies.base import PLACEMENTS, ClusterPolicy
from tidal.cluster.policies.common import RoundRobin, least_loaded
from tidal.cluster.policies.warmserve_fallback import OverloadFallback
from tidal.cluster.policies.warmserve_peak import PeakHold
from tidal.cluster.policies.warmserve_plan import model_scores
from tidal.cluster.policies.warmserve_prewarm import prewarm_actions
from tidal.cluster.policies.warmserve_startup import load_extra_s, miss_gpus, startup_plan
from tidal.cluster.policies.warmserve_starve import StarvationGuard
from tidal.cluster.policies.warmserve_triage import ServiceDensity
from tidal.cluster.view import ClusterActions, ClusterView, LaunchParams
from tidal.core.request import Request
from tidal.core.units import s_to_ns


@PLACEMENTS.register("warmserve")
class WarmServe(ClusterPolicy):
    name = "warmserve"
    uses_load_stamps = True

    def __init__(self, view: ClusterView, act: ClusterActions) -> None:
        super().__init__(view, act)
        ws = self.cfg.warmserve
        self.ws = ws
        self.on = {f: ws.enabled(f) for f in WARMSERVE_FEATURES}
        self.unified = self.on["unified-memory"]
        self.window_ns = s_to_ns(ws.window_s)
        self.window_k = 0
        per_day = max(1, round(86400 / ws.window_s))
        pa, pp = view.prior_avg, view.prior_peak
        self.forecasters = [
            WindowForecaster(
                None if pa is None else pa[m.index],
                None if pp is None else pp[m.index],
                ws.history,
                per_day,
            )
            for m in view.models
        ]
        mcfg = self.cfg
        self.min_free = (
            ws.min_free_blocks
            if ws.min_free_blocks >= 0
            else -(-mcfg.max_model_len // mcfg.block_size)
        )
        per_req = -(-mcfg.max_model_len // mcfg.block_size)
        self.min_total = mcfg.batch * per_req if ws.kv_floor == "batch" else 0
        self.tcold = [m.spec.weight_bytes / m.min_tp / 2**30 / ws.score_gbs for m in view.models]
        self._scores_key: tuple[int, ...] = ()
        self._quiet_version = -1
        self._quiet_until = 0
        self._scores_val: list[list[float]] = []
        nm = len(view.models)
        self.queues: list[deque[Request]] = [deque() for _ in range(nm)]
        self.keep_ns = s_to_ns(ws.peak_keep_s)
        self.peaks = PeakHold(nm, self.keep_ns)
        self._pending = [False] * nm
        self.rr = RoundRobin(nm)
        self.guard: StarvationGuard | None = None
        if ws.starve_wait_s > 0 and ws.peak_keep_s > 0:
            window = s_to_ns(ws.scale_window_s)
            self.guard = StarvationGuard(
                view, ws.starve_wait_s, ws.starve_fill, window, ws.starve_give_up_s
            )
            if ws.triage_ratio > 0:
                self.guard.triage = ServiceDensity(view, ws.triage_window_s)
                self.guard.triage_ratio = ws.triage_ratio
                self.guard.triage_wait_ns = s_to_ns(ws.triage_wait_s)
        self.fallback: OverloadFallback | None = None
        if ws.overload_fallback and self.guard is not None:
            self.fallback = OverloadFallback(
                view,
                self.cfg.serverlessllm,
                ws.overload_enter_s,
                ws.overload_exit_s,
                ws.overload_hold_s,
            )

    # ------------------------------------------------------------------ loops
    def setup(self, now_ns: int) -> None:
        self.act.every(self.ws.control_period_s, self.tick, now_ns)

    def tick(self, now_ns: int) -> None:
        """One control period. A tick that changed nothing, with every input that moves with
        the clock already settled (see :meth:`_settled`), is repeated exactly by every later
        tick until the controller's version changes, the forecast window closes or a held peak
        expires (:class:`PeakHold`): those return at once."""
        view = self.view
        if view.version == self._quiet_version and now_ns < self._quiet_until:
            return
        v0 = view.version
        fb = self._overloaded(now_ns)
        if fb and self.fallback is not None:
            self.fallback.autoscale(now_ns, self.acquire, self.act.stop)
            self._reserve_kv()
        else:
            self._autoscale(now_ns)
        if self.on["forecast"]:
            self._forecast(now_ns)
            self._prewarm(now_ns)
        if self.guard is not None and not fb:
            protect = s_to_ns(self.ws.protect_s)
            self.guard.hand_back(self.queues, now_ns, self.cfg.batch, protect, self.act.stop)
        if view.version == v0 and not fb and self._settled(now_ns):
            self._quiet_version = v0
            until = view.first_arrival_ns + (self.window_k + 1) * self.window_ns
            self._quiet_until = self.peaks.next_expiry(now_ns, until)
        else:
            self._quiet_version = -1

    def _overloaded(self, now_ns: int) -> bool:
        """The overload fallback's detector (:class:`OverloadFallback`) on the longest wait of
        any model's oldest waiting request; whether ServerlessLLM's rules apply this period.
        Leaving it, FIFOs of models without instances go back to the retry path (:meth:`_drain`)."""
        fb, guard = self.fallback, self.guard
        if fb is None or guard is None:
            return False
        times = [guard.oldest(m, q) for m, q in enumerate(self.queues)]
        wait = max((now_ns - t for t in times if t is not None), default=0)
        if fb.update(wait, now_ns) and not fb.engaged:
            for m in range(len(self.queues)):
                self._drain(m, now_ns)
        return fb.engaged

    def _settled(self, now_ns: int) -> bool:
        """Whether the tick's clock-driven inputs hold still from now on while nothing else
        changes: traffic has started (warm-up ticks reset the window statistics), every
        model's 5-s average is its current count (its last stamp is a whole window old), and
        every serving instance is past its scale-down protection; with the starvation guard,
        no request is waiting (its wait grows with the clock)."""
        view, ws = self.view, self.ws
        if now_ns < view.first_arrival_ns:
            return False
        if self.guard is not None and self.guard.any_waiting(self.queues):
            return False
        start = now_ns - s_to_ns(ws.scale_window_s)
        for load in view.loads:
            if load.stamps and load.stamps[-1][0] > start:
                return False
        protect = s_to_ns(ws.protect_s)
        return all(now_ns - i.created_ns > protect for insts in view.serving for i in insts)

    def _forecast(self, now_ns: int) -> None:
        start = self.view.first_arrival_ns
        while now_ns >= start + (self.window_k + 1) * self.window_ns:
            for m, f in enumerate(self.forecasters):
                avg, peak = self.act.close_window(m, now_ns, self.window_ns)
                f.observe(avg, peak)
            self.window_k += 1
            self.act.changed()
        if now_ns < start:
            # before traffic: discard the empty warm-up from the window statistics
            for m in range(len(self.view.loads)):
                self.act.close_window(m, now_ns, self.window_ns)

    def _autoscale(self, now_ns: int) -> None:
        view, ws, b = self.view, self.ws, self.cfg.batch
        window = s_to_ns(ws.scale_window_s)
        protect = s_to_ns(ws.protect_s)
        can_create = True
        order = list(range(len(view.models)))
        if self.guard is not None:  # starved models get the first idle GPUs
            first = self.guard.starved(self.queues, now_ns)
            order = first + [m for m in order if m not in first]
        for m in order:
            model, insts = view.models[m], view.serving[m]
            n = len(insts)
            load = view.loads[m].avg_load(now_ns, window)
            bm = b * model.slots  # (a disaggregated unit: B per decode engine)
            cap = n * bm
            if load < cap * ws.scale_down:
                keep = math.ceil(load / ws.scale_down / bm)
                keep = max(keep, math.ceil(self.peaks.peak(m, now_ns) / (ws.peak_headroom * bm)))
                n_stop = n - keep
                old = [i for i in insts if now_ns - i.created_ns > protect]
                if n_stop > 0 and old:
                    old.sort(key=lambda i: i.inflight)
                    for inst in old[:n_stop]:
                        self.act.stop(inst, now_ns)
            elif load > cap * ws.scale_up and can_create:
                for _ in range(math.ceil(load / ws.scale_up / bm) - n):
                    if self.acquire(model, now_ns) is None:
                        can_create = False
                        break
        self._reserve_kv()

    def _reserve_kv(self) -> None:
        view, b = self.view, self.cfg.batch
        if self.on["kv-reservation"]:
            for insts in view.serving:
                for inst in insts:  # (a disaggregated unit's engines keep their KV whole)
                    if inst.kv is not None and inst.state == State.READY and not (
                        inst.model.disaggregated
                    ):
                        target = int(reservation_of(inst.kv).initial_blocks * inst.inflight / b)
                        self.act.set_kv_target(inst, target)

    # ------------------------------------------------------------------ prewarming
    def _prewarm(self, now_ns: int) -> None:
        view, ws = self.view, self.ws
        for m, group in prewarm_actions(view, self._scores(), ws.max_slots, self.on["placement"]):
            self.act.prewarm(view.models[m], group, now_ns)

    def _scores(self) -> list[list[float]]:
        """Every model's replica scores (§2.2). Their inputs change only when a forecast
        window closes (predictions) or an instance starts or stops (running counts), so they
        are recomputed only then."""
        view = self.view
        key = (self.window_k, *(len(s) for s in view.serving))
        if key != self._scores_key:
            self._scores_key = key
            self._scores_val = []
            for m in range(len(view.models)):
                f = self.forecasters[m]
                _, _, s = model_scores(
                    f.pred_avg, f.pred_peak, len(view.serving[m]),
                    self.cfg.batch * view.models[m].slots, self.tcold[m],
                )
                self._scores_val.append(s)
        return self._scores_val

    # ------------------------------------------------------------------ activation
    def acquire(self, model: ServedModel, now_ns: int) -> ModelInstance | None:
        """ACQUIRE (§2.5): a warm replica on idle GPUs, a loading one, or idle GPUs."""
        view = self.view
        busy = view.gpu_busy
        replica: Replica | None = None
        kind = "miss"
        if self.unified:
            mine = [r for r in view.replicas.values() if r.model is model]
            for want_warm in (True, False):
                for r in mine:
                    if r.warm == want_warm and all(busy[g] is None for g in r.gpus):
                        replica, kind = r, ("hit" if want_warm else "partial")
                        break
                if replica is not None:
                    break
        gpus = replica.gpus if replica is not None else self._miss_gpus(model)
        if gpus is None:
            return None
        if self.unified:
            for g in gpus:
                for r in list(view.gpu_replicas[g]):
                    if r is not replica:
                        self.act.evict(r, now_ns)
        params = LaunchParams(
            kind, replica=replica, min_free_blocks=self.min_free, min_total_blocks=self.min_total
        )
        return self.act.launch(model, gpus, self._plan(model, kind, gpus, now_ns), params, now_ns)

    def _miss_gpus(self, model: ServedModel) -> tuple[int, ...] | None:
        return miss_gpus(self.view, model, self.on["placement"] and self.unified)

    def _plan(
        self, model: ServedModel, kind: str, gpus: tuple[int, ...], now_ns: int
    ) -> StartupPlan:
        return startup_plan(self.view, self.cfg, self.on, model, kind, gpus, now_ns)

    # ------------------------------------------------------------------ routing
    def route(self, req: Request, m: int, now_ns: int) -> None:
        """With ``router_queue``: a ready instance below B (:meth:`_pick`), else, when the
        model has serving instances, the model's FIFO (drained in order as slots free or
        instances become ready; one instance is acquired unless one is starting). Otherwise
        (the artifact): the least-loaded instance below B, starting ones included (a request
        bound to one waits for its whole start), else a new one, else a retry later."""
        view = self.view
        q = self.queues[m]
        if self.keep_ns:
            self.peaks.note(m, now_ns, view.loads[m].inflight)
        if self.guard is not None:
            self.guard.routed(m, req)
        if self.fallback is not None:
            self.fallback.arrived(m)
            if self.fallback.engaged:  # ServerlessLLM's router: the FIFO, no acquire
                q.append(req)
                self._drain(m, now_ns)
                return
        if not self.ws.router_queue:
            inst = least_loaded(view.serving[m])
        else:
            inst = None if q else self._pick(m)
        if inst is None and self.ws.router_queue and view.serving[m]:
            q.append(req)
            if all(i.state != State.STARTING for i in view.serving[m]):
                self.acquire(view.models[m], now_ns)
            self._drain(m, now_ns)
            return
        if inst is None:
            inst = self.acquire(view.models[m], now_ns)
        if inst is None:
            self._retry(req, m, now_ns)
        else:
            self.act.assign(req, inst, now_ns)

    def _drain(self, m: int, now_ns: int) -> None:
        """Dispatch the model's FIFO head-first (:meth:`_pick`); requests
        left when the model has no serving instance go back to the router's retry path."""
        self._pending[m] = False
        q, insts = self.queues[m], self.view.serving[m]
        while q:
            inst = self._pick(m)
            if inst is None:
                break
            self.act.assign(q.popleft(), inst, now_ns)
        if q and not insts and not (self.fallback is not None and self.fallback.engaged):
            while q:
                self._retry(q.popleft(), m, now_ns)

    def _retry(self, req: Request, m: int, now_ns: int) -> None:
        if self.guard is not None:
            self.guard.retried(m, req)
        self.act.retry_later(req, m, now_ns, self.cfg.retry_s)

    def _pick(self, m: int) -> ModelInstance | None:
        """Round-robin over the model's ready instances below B."""
        return self.rr.pick(m, self.view.serving[m])

    def _drain_soon(self, m: int, now_ns: int) -> None:
        if self.queues[m] and not self._pending[m]:
            self._pending[m] = True
            self.act.at(now_ns, lambda t: self._drain(m, t))

    def on_finish(self, inst: ModelInstance, now_ns: int) -> None:
        if self.guard is not None and self.guard.triage is not None:
            self.guard.triage.finished(inst.model.index, now_ns)
        self._drain_soon(inst.model.index, now_ns)

    def on_ready(self, inst: ModelInstance, now_ns: int) -> None:
        self._drain_soon(inst.model.index, now_ns)

    def on_stopped(self, inst: ModelInstance, now_ns: int) -> None:
        if self.guard is not None:
            m = self.guard.retired(inst)
            if m is not None and self.acquire(self.view.models[m], now_ns) is not None:
                self._drain_soon(m, now_ns)
        self._drain_soon(inst.model.index, now_ns)

    # ------------------------------------------------------------------ mechanisms
    def keep_weights(self, inst: ModelInstance) -> bool:
        return self.unified

    def in_dram(self, model: ServedModel, node: int) -> bool:
        """With ``checkpoints: ssd``, whether the node's page cache holds the checkpoint: a
        model of the same catalog id was read there before (the artifact's repeated models are
        symlinks to one set of files)."""
        if self.ws.checkpoints == "dram":
            return True
        cached = self.view.dram[node]
        return any(m.index in cached for m in self.view.models if m.spec.name == model.spec.name)

    def load_extra_s(self, model: ServedModel) -> float:
        return load_extra_s(self.cfg.startup, self.on, model)

    def load_rate_cap(self) -> float:
        if self.unified and self.on["memory-switching"]:
            return self.cfg.startup.map_gbs * 1e9
        return math.inf
