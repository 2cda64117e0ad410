"""The simulator as a cluster backend: many engines (one :class:`SimInstance` per model
instance, each with its own scheduler, KV cache and step-time model) under the cluster
controller's placement, prewarming and scaling (``tidal.cluster``).

Arrivals go to the controller (the router); it hands requests to engines with
:meth:`Simulation.deliver` from arrivals or control events only, and control events run with
:data:`CONTROL` priority (after step ends and arrivals at the same instant). Engines are added
as instances become ready. A run ends when every request has finished; then the controller
shuts the cluster down, and GPU memory must be empty again.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tidal.cluster.controller import ClusterController
from tidal.cluster.models import ServedModel, served_models, service_ms
from tidal.cluster.topology import parse_cluster
from tidal.cluster.unit import UnitParts
from tidal.core.augmented_metrics import augmented_metrics
from tidal.core.errors import ConfigError
from tidal.core.histogram import LogHistogram
from tidal.core.kv import KVBlockManager
from tidal.core.metrics import summarize
from tidal.core.request import Request
from tidal.core.units import INF_NS, s_to_ns
from tidal.engine.build import build_scheduler
from tidal.engine.ordering import ORDERINGS
from tidal.engine.policy import validate_options
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.hardware.interference import StepCosts, step_costs
from tidal.hardware.perf import PerfModel
from tidal.sim.augment import augmented_engine, host_blocks, host_tier_size
from tidal.sim.cluster_disagg import DisaggEngines
from tidal.sim.cluster_metrics import (
    RetiredStats,
    Selected,
    cache_counts,
    latency_p95,
    model_rows,
    policy_metrics,
)
from tidal.sim.cluster_spec import (
    ClusterSpeculation,
    mean_lengths,
    service_times,
    spec_capacities,
)
from tidal.sim.cluster_stream import streamed_workload, streams
from tidal.sim.cluster_units import add_unit_columns, unit_model_metrics, unit_table, units_of
from tidal.sim.cluster_workload import next_arrivals, workload_stats
from tidal.sim.config import SimulationConfig
from tidal.sim.instance import SimInstance
from tidal.sim.recorder import SpooledRecorder
from tidal.sim.simulator import CONTROL, Simulation
from tidal.sim.single import SimResult, check_host_tier, rng_streams
from tidal.sim.speculation import base_perf
from tidal.workload.base import RequestSet
from tidal.workload.multimodel import (
    MixWorkload,
    augment_mix,
    azure_mix,
    read_aggregate_rates,
    servegen_mix,
)
from tidal.workload.paths import resolve_trace
from tidal.workload.stream import LazyColumn
from tidal.workload.traces import load_azure


@functools.lru_cache(maxsize=2)
def _mix_cached(cfg_json: str) -> MixWorkload:
    cfg = SimulationConfig.model_validate_json(cfg_json)
    c = cfg.cluster
    assert c is not None
    topo = parse_cluster(c.spec)
    models = served_models(
        c.models, topo.gpu, topo.gpus_per_node, c.page_mib * 2**20, c.block_size, c.unit_pools
    )
    rng = rng_streams(cfg.seed)["workload"]
    mix = c.mix
    if mix.kind == "azure":
        if cfg.workload.trace is None:
            raise ConfigError(
                "workload.trace",
                "the Azure mix needs a trace",
                "e.g. --trace azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz",
            )
        trace = load_azure(cfg.workload.trace)
        w = azure_mix(trace, [service_ms(m.spec) for m in models], mix, rng, read_aggregate_rates())
        speculating = cfg.speculative is not None or bool(c.speculative)
        caps = spec_capacities(cfg, mean_lengths(w.requests, len(models))) if speculating else []
        if any(caps):  # the priors at speculation's decode rate (the same requests, draws)
            rng = rng_streams(cfg.seed)["workload"]
            w = azure_mix(trace, service_times(cfg, caps), mix, rng, read_aggregate_rates())
    else:
        path = resolve_trace(cfg.workload.trace) if cfg.workload.trace else None
        w = servegen_mix(mix, len(models), rng, read_aggregate_rates(path))
    rs = w.requests
    if mix.augmented is not None:
        rs = augment_mix(rs, mix.augmented, rng, c.max_model_len)
    shifted = RequestSet(
        rs.arrival_ns + s_to_ns(c.warmup_s),
        rs.prompt_len,
        rs.output_len,
        f"{rs.source}; +{c.warmup_s:g} s warm-up",
        rs.extra,
        rs.payloads,
    )
    return MixWorkload(shifted, w.shares, w.prior_avg, w.prior_peak, w.description)


def cluster_workload(cfg: SimulationConfig) -> MixWorkload:
    """The multi-model workload of a cluster run (arrivals shifted by the warm-up)."""
    return _mix_cached(cfg.model_dump_json())


class SimBackend:
    """Implements :class:`tidal.cluster.backend.Backend` on a :class:`Simulation`."""

    def __init__(self, cfg: SimulationConfig, sim: Simulation) -> None:
        self.cfg = cfg
        self.sim = sim
        c = cfg.cluster
        assert c is not None
        self.gpu = parse_cluster(c.spec).gpu
        self.names: list[str] = []
        self.model_index: dict[str, int] = {}
        """Model name → index (engines serve one model for life)."""
        self.free_engines: dict[str, list[int]] = {}
        self.policy_seed = int(rng_streams(cfg.seed)["policy"].integers(1 << 62))
        self.num_started = 0
        self.prefix_caching = False
        """Engines cache prompt prefixes: ``memory.prefix_caching`` and a workload with
        content (as one instance, :func:`tidal.sim.single.make_kv`)."""
        self.retired: list[tuple[str, RetiredStats]] = []
        """Per model, the summed counters of its stopped schedulers (engines reused)."""
        self._retired_of: dict[str, RetiredStats] = {}
        topo = parse_cluster(c.spec)
        self.disagg = DisaggEngines(sim, self.gpu, len(sim.requests), topo, c.network)
        """The disaggregated units' engines."""
        self.spec = ClusterSpeculation(cfg, self.gpu)
        """Speculative decoding of the engines (``sim/cluster_spec.py``)."""
        self._costs: dict[int, tuple[PerfModel, StepCosts]] = {}
        """EB step costs by step-time model (kept alive here, so ``id`` stays unique)."""

    def now_ns(self) -> int:
        return self.sim.now_ns

    def call_at(self, t_ns: int, fn: Callable[[int], None]) -> None:
        self.sim.call_at(t_ns, fn, CONTROL)

    def scheduler(
        self,
        model: ServedModel,
        kv: KVBlockManager,
        perf: PerfModel,
        plain: bool = False,
        tp: int = 0,
    ) -> Scheduler:
        """An engine's scheduler: ``scheduler.batching`` and ``scheduler.ordering`` of the run,
        the cluster's token budget and N_max = max(256, B) (the router caps an engine at B);
        EB and EB⁺ get the step costs of the engine's own step-time model (shared GPUs:
        the slowed one). Its KV cache gets its host memory now: the prefix cache's host tier
        (``memory.host_cache_gib`` per GPU) and, serving augmented requests, swap space
        (``plain``: a disaggregated unit's prefill engine, never augmented). ``tp``: the
        engine's GPUs (default ``model.engine_tp``; a unit's prefill engine its pool's)."""
        c, s = self.cfg.cluster, self.cfg.scheduler
        assert c is not None
        tp = tp or model.engine_tp
        costs, target = None, base_perf(perf)  # (EB's costs: the target's own steps)
        if s.batching != "mb":
            hit = self._costs.get(id(target))
            if hit is None:
                hit = (target, step_costs(model.spec, self.gpu, tp, target))
                self._costs[id(target)] = hit
            costs = hit[1]
        opts = validate_options(s.batching, s.options)
        sched_cfg = SchedulerConfig(
            c.token_budget, max(256, c.batch), costs=costs, eb=s.eb, options=opts,
            speculation=None if plain else self.spec.acceptance(perf),
        )  # fmt: skip
        if self.prefix_caching and self.cfg.memory.host_cache_gib > 0:
            tier = host_tier_size(self.cfg, model.spec, self.gpu, tp, kv.block_size)
            kv.add_host_tier(*tier)
        if c.mix.augmented is not None and not plain:
            kv.add_host_space(host_blocks(self.cfg, model.spec, model.engine_tp, kv.block_size))
            self.num_started += 1
            seed = self.policy_seed + self.num_started
            deployment = (model.spec, self.gpu, model.engine_tp)
            return augmented_engine(self.cfg, sched_cfg, kv, perf, seed, deployment)
        return build_scheduler(sched_cfg, kv, s.batching, ORDERINGS.get(s.ordering)())

    def start_engine(
        self, model: ServedModel, kv: KVBlockManager, perf: PerfModel, unit: UnitParts | None = None
    ) -> int:
        name = model.name
        if model.disaggregated:  # a unit of prefill and decode engines (sim/cluster_disagg.py)
            add = lambda s, p: self._add_engine(model, s, p)  # noqa: E731
            self.disagg.caching = self.prefix_caching
            unit = unit or UnitParts(kv.num_blocks, perf)
            perfs = (unit.prefill_perf, self.spec.wrap(model, perf, model.engine_tp))
            return self.disagg.start(
                model, kv, perfs, self.scheduler, add, unit.prefill_blocks, unit.gpus
            )
        perf = self.spec.wrap(model, perf, model.engine_tp)  # (speculating: verify + draft)
        sched = self.scheduler(model, kv, perf)
        free = self.free_engines.get(name)
        if free:
            idx = free.pop()
            self._retire_scheduler(name, self.sim.instances[idx].scheduler)
            self.sim.replace_scheduler(idx, sched)
            self.sim.instances[idx].perf = perf
            return idx
        return self._add_engine(model, sched, perf)

    def _add_engine(self, model: ServedModel, sched: Scheduler, perf: PerfModel) -> int:
        inst = SimInstance(
            len(self.sim.instances),
            sched,
            perf,
            self.cfg.fast_forward,
            timeline_interval_ns=INF_NS,  # a cluster run reports no per-engine timeline
            buffer_capacity=16,
        )
        self.names.append(model.name)
        self.model_index[model.name] = model.index
        return self.sim.add_instance(inst)

    def _retire_scheduler(self, name: str, sched: Scheduler) -> None:
        acc = self._retired_of.get(name)
        if acc is None:
            acc = self._retired_of[name] = RetiredStats(sched.name)
            self.retired.append((name, acc))
        acc.add(sched)

    def release_engine(self, engine: int) -> None:
        if engine in self.disagg.units:
            self.disagg.release(engine)
            return
        self.free_engines.setdefault(self.names[engine], []).append(engine)

    def deliver(self, engine: int, req: Request, now_ns: int) -> None:
        if engine in self.disagg.units:
            self.disagg.deliver(engine, req, now_ns)
            return
        self.sim.deliver(engine, req, now_ns)


def run_cluster(
    cfg: SimulationConfig,
    requests: RequestSet | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Any:
    c = cfg.cluster
    assert c is not None
    t0 = time.perf_counter()
    next_of: np.ndarray | LazyColumn
    if requests is None and streams(cfg):
        reqs, next_of, next_own, stats, meta = streamed_workload(cfg)
        shares, description = meta["shares"], meta["description"]
        prior_avg = prior_peak = None
    else:
        mix = cluster_workload(cfg)
        reqs = requests if requests is not None else mix.requests
        shares, description = mix.shares, mix.description
        prior_avg, prior_peak = mix.prior_avg, mix.prior_peak
        stats = workload_stats(c, reqs)
        if any(caps := spec_capacities(cfg, stats)):  # speculating: their decode rate
            stats = workload_stats(c, reqs, service_times(cfg, caps))
        next_of, next_own = next_arrivals(reqs, len(c.models))
    caps = spec_capacities(cfg, stats, annotate=True)  # (MuxServe's too; summary.json)
    t_load = time.perf_counter()
    model_of = reqs.extra["model"]
    recorder = SpooledRecorder(reqs)
    n = len(reqs)
    cb = (lambda done: progress(done, n)) if progress is not None else None
    sim = Simulation([], reqs, recorder, progress=cb)
    backend = SimBackend(cfg, sim)
    backend.prefix_caching = cfg.memory.prefix_caching and reqs.content is not None
    check_host_tier(cfg, reqs.content is not None)
    first = int(reqs.arrival_ns[0]) if n else 0
    ctl = ClusterController(
        c,
        backend,
        model_of,
        prior_avg,
        prior_peak,
        [s["concurrency"] for s in stats],
        stats,
        first_arrival_ns=first,
    )

    def route(req: Request) -> int:
        rid = req.request_id
        next_own[int(model_of[rid])] = int(next_of[rid])
        ctl.on_arrival(req, sim.now_ns)
        return -1

    def horizon(idx: int) -> Callable[[], int]:
        """Engine ``idx`` stops its runs at its model's next arrival or its own next call
        return; everything else reaches it through ``deliver`` (which cuts runs)."""
        m = backend.model_index[backend.names[idx]]
        resumes = sim.next_resume_ns
        return lambda: min(next_own[m], resumes(idx))

    sim.route = route
    sim.horizon = horizon
    sim.on_request_finish = lambda req: ctl.on_finish(req, sim.now_ns)
    ctl.start()
    sim.run()
    end_ns = sim.now_ns
    ctl.shutdown(end_ns)
    ctl.memory.check()
    t_sim = time.perf_counter()

    cols = recorder.columns()
    if cols.dtype("model") != np.int64:
        cols["model"] = np.asarray(cols["model"], dtype=np.int64)

    def merged(engines: list[int]) -> LogHistogram:
        h = LogHistogram()
        for e in engines:
            h.merge(sim.instances[e].itl)
        return h

    metrics = summarize(
        cols, cfg.slo.ttft_s, cfg.slo.tpot_s, merged(list(range(len(sim.instances))))
    )
    metrics.update(latency_p95(cols))
    t_end = max(end_ns, first)
    metrics.update(ctl.cluster_metrics(None, first, t_end))
    metrics["num_engines"] = len(sim.instances)
    if backend.disagg.every:  # disaggregated units: transfer columns (sim/cluster_units.py)
        add_unit_columns(cols, backend.disagg)
        metrics["kv_transfer_bytes"] = int(backend.disagg.cols.kv_transfer_bytes.sum())
    augmented = "call_ns" in cols
    if augmented:
        metrics.update(augmented_metrics(cols, cfg.slo.ttft_s, cfg.slo.norm_latency_s))
    scheds = backend.retired + [
        (backend.names[i], inst.scheduler) for i, inst in enumerate(sim.instances)
    ]
    for k, v in policy_metrics([s for _, s in scheds]).items():
        metrics.setdefault(k, v)
    if reqs.content is not None:  # as one instance: reported where prompts have content
        metrics.update(cache_counts([s for _, s in scheds]).metrics(backend.prefix_caching))
    per_model: dict[str, dict[str, Any]] = {}
    for m in ctl.models:
        sel = model_rows(cols, m.index)
        sub = Selected(cols, sel)
        engines = [e for e, name in enumerate(backend.names) if name == m.name]
        pm = summarize(sub, cfg.slo.ttft_s, cfg.slo.tpot_s, merged(engines))
        pm.update(latency_p95(sub))
        pm.update(ctl.cluster_metrics(m.index, first, t_end))
        if augmented:
            pm.update(augmented_metrics(sub, cfg.slo.ttft_s, cfg.slo.norm_latency_s))
        for k, v in policy_metrics([s for name, s in scheds if name == m.name]).items():
            pm.setdefault(k, v)
        if reqs.content is not None:
            counts = cache_counts([s for name, s in scheds if name == m.name])
            pm.update(counts.metrics(backend.prefix_caching))
        pm["tp"] = m.engine_tp
        if m.mixed_tp:  # a unit whose prefill engines have their own TP
            pm["prefill_tp"] = m.prefill_engine_tp
        if m.disaggregated:  # a unit of P prefill + D decode engines (sim/cluster_disagg.py)
            pm["deployment"] = f"{m.prefill_engines}p{m.decode_engines}d"
            pm.update(unit_model_metrics(m, units_of(backend.disagg, m.name), sub, t_end))
        cap = caps[m.index]
        if cap is not None:  # speculation in the load estimates (sim/cluster_spec.py)
            pm["spec_capacity"] = cap.summary()
        pm["share"] = float(shares[m.index])
        per_model[m.name] = pm
    if backend.disagg.every:  # the cluster's stall: the unit models' sum
        stalls = [pm["kv_transfer_stall_s"] for pm in per_model.values() if "pools" in pm]
        metrics["kv_transfer_stall_s"] = sum(stalls)
    run_info = {
        "wall_s": t_sim - t0,
        "load_s": t_load - t0,
        "simulate_s": t_sim - t_load,
        "num_events": sim.num_events,
        "simulated_requests_per_s": n / max(t_sim - t_load, 1e-9),
    }
    tables: dict[str, Any] = {
        "gpu_memory": ctl.memory.log_columns(),
        "instances": ctl.instance_table(),
    }
    if backend.disagg.every:  # one row per unit (sim/cluster_units.py)
        tables["units"] = unit_table(backend.disagg, backend.model_index, cols, t_end)
    extras = {
        "tables": tables,
        "summary": {
            "per_model": per_model,
            "models": [m.name for m in ctl.models],
            "workload": description,
        },
        "controller": ctl,
        "json": None,
    }
    return SimResult(cfg, metrics, cols, run_info, extras)
