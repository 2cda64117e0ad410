"""Runs in phases on one instance: warm-up requests, the way ``vllm bench serve --num-warmups W``
measures a server, and consecutive measured phases (non-stationary workloads, EB paper §4.4).

W warm-up requests are sent first (closed loop at the run's concurrency, or all at once) and
complete before the measured workload starts; their completions are not measured. The instance keeps
its state across the boundary — online estimators in particular (the EB paper's runs use 100
warm-ups, so its controller starts the measured phase with one estimate: docs/research/ebplus.md
§5.1). Without warm-up, EB's cold start (θ = 0.7, N = N_max) overruns the KV cache once.

Warm-up requests come from the same synthetic generator with a seed stream of their own (the
first W requests of the trace for a trace workload). Measured arrivals are shifted to start when
the last warm-up request finished.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from typing import Any

import numpy as np

from tidal.core.histogram import LogHistogram
from tidal.core.kv import KVBlockManager
from tidal.core.metrics import summarize
from tidal.hardware.calibration import client_side_metrics, perf_model_source, perf_model_tables
from tidal.hardware.gpus import get_gpu
from tidal.hardware.roofline import roofline_token_throughput
from tidal.sim.config import SimulationConfig
from tidal.sim.instance import SimInstance
from tidal.sim.recorder import RequestRecorder
from tidal.sim.simulator import Simulation
from tidal.sim.single import (
    SEED_STREAMS,
    SimResult,
    build_instance,
    check_context,
    load_instance_requests,
    prefix_cache_metrics,
    run_single,
)
from tidal.workload.base import RequestSet
from tidal.workload.build import build_workload
from tidal.workload.content import PrefixContent
from tidal.workload.prefill_bound import unavoidable_prefill


def warmup_requests(cfg: SimulationConfig, n: int, reqs: RequestSet) -> RequestSet:
    if cfg.workload.trace is not None:
        return reqs.take(slice(0, n))
    # a child of the run seed beyond the named streams: independent of the measured draw
    child = np.random.SeedSequence(cfg.seed).spawn(len(SEED_STREAMS) + 1)[-1]
    wl = cfg.workload.model_copy(update={"num_requests": n})
    return build_workload(wl, np.random.default_rng(child))


def run_with_warmup(
    cfg: SimulationConfig, warmup: int, requests: RequestSet | None = None
) -> SimResult:
    """One instance's run (:func:`tidal.sim.single.run_single`) after ``warmup`` warm-up
    requests (0: identical)."""
    if warmup <= 0:
        return run_single(cfg, requests)
    reqs = requests if requests is not None else load_instance_requests(cfg)
    warm = warmup_requests(cfg, warmup, reqs)
    return run_phases(cfg, [(reqs, cfg.workload.concurrency)], warm)


def phased_prefill_bound(
    cfg: SimulationConfig, phases: list[RequestSet], warmup: RequestSet | None
) -> tuple[float, float] | None:
    """The measured phases' unavoidable prefill (:func:`tidal.workload.prefill_bound.
    unavoidable_prefill`): a content node computed by the warm-up or an earlier phase is free
    in a later one — as :func:`tidal.sim.single.cached_prefill_bound` for one phase; None (every
    prompt token) without the prefix cache or without content."""
    if not cfg.memory.prefix_caching or all(r.content is None for r in phases):
        return None

    seen = [_row_hashes(warmup.content)] if warmup is not None and warmup.content else []
    tokens = positions = 0.0
    for reqs in phases:
        known = np.unique(np.concatenate(seen)) if seen else None
        t, p = unavoidable_prefill(reqs.prompt_len, reqs.content, known)
        tokens, positions = tokens + t, positions + p
        if reqs.content is not None:
            seen.append(_row_hashes(reqs.content))
    return tokens, positions


def _measured_cache_metrics(kv: KVBlockManager, queries: int, hits: int) -> dict[str, Any]:
    """:func:`tidal.sim.single.prefix_cache_metrics` with the queries and hits of the measured
    phases only (the counts at the warm-up's end subtracted); evictions and the host tier's
    counters cover the whole run."""
    out = prefix_cache_metrics(kv)
    st = kv.cache_stats()
    q, h = st.queries - queries, st.hits - hits
    rate = h / q if q else 0.0
    out.update(prefix_cache_queries=q, prefix_cache_hits=h, prefix_cache_hit_rate=rate)
    return out


def _row_hashes(content: PrefixContent) -> np.ndarray:
    """The node hashes of ``content``'s rows (its flat arrays are shared with other rows)."""
    count = content.count
    flat = np.repeat(content.offset, count) + (
        np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    )
    return content.hashes[flat]


def run_phases(
    cfg: SimulationConfig,
    phases: list[tuple[RequestSet, int | None]],
    warmup: RequestSet | None = None,
) -> SimResult:
    """Measured phases back to back on one instance (its state carries over), each a request
    set with its own closed-loop concurrency (None: open loop, arrival times shifted to the
    phase start); a phase starts when the previous one has drained — as consecutive
    ``vllm bench serve`` runs against one server. Metrics cover all measured phases together;
    ``warmup`` (if any) runs first, unmeasured, at the first phase's concurrency."""
    t0 = time.perf_counter()
    model = cfg.model_spec()
    sets = [r for r, _ in phases] + ([warmup] if warmup is not None else [])
    for r in sets:
        check_context(model, r)
    max_tokens = int(max((r.prompt_len + r.output_len).max() for r in sets))
    content = any(r.content is not None for r in sets)  # prefix caching has prompts to match
    scheduler, perf, mem = build_instance(cfg, max_tokens, content)
    inst = SimInstance(0, scheduler, perf, cfg.fast_forward)
    now = 0
    events = 0
    before = scheduler.stats()
    if warmup is not None:
        warm_conc = phases[0][1] or len(warmup)
        warm_sim = Simulation([inst], warmup, RequestRecorder(warmup), warm_conc)
        warm_sim.run()
        now, events = warm_sim.now_ns, warm_sim.num_events
        inst.itl = LogHistogram()
        inst.busy_ns = 0
        before = scheduler.stats()
    cache = scheduler.kv.cache_stats()
    cache_before = (cache.queries, cache.hits)
    t_measured = now
    parts = []
    t_sim = 0.0
    for reqs, conc in phases:
        shifted = (
            reqs
            if conc is not None
            else dataclasses.replace(reqs, arrival_ns=reqs.arrival_ns - reqs.arrival_ns.min() + now)
        )  # content and payloads kept: the measured requests are the same requests
        recorder = RequestRecorder(shifted)
        sim = Simulation([inst], shifted, recorder, conc)
        sim.now_ns = now
        if conc is not None:
            sim.arrivals._ready = deque([now] * len(sim.arrivals._ready))
        t1 = time.perf_counter()
        sim.run()
        t_sim += time.perf_counter() - t1
        now = sim.now_ns
        events += sim.num_events
        parts.append(recorder.columns())
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    metrics = summarize(cols, cfg.slo.ttft_s, cfg.slo.tpot_s, inst.itl)
    all_reqs = [r for r, _ in phases]
    metrics["roofline_token_throughput"] = roofline_token_throughput(
        model,
        get_gpu(cfg.gpu),
        cfg.tp * cfg.data_parallel_size * cfg.pipeline_parallel_size,  # every GPU
        np.concatenate([r.prompt_len for r in all_reqs]),
        np.concatenate([r.output_len for r in all_reqs]),
        mem.kv_capacity_tokens,
        cfg.scheduler.max_seqs * cfg.data_parallel_size,
        prefill=phased_prefill_bound(cfg, all_reqs, warmup),
    )
    metrics.update(mem.summary())
    metrics["num_steps"] = scheduler.num_steps
    metrics["busy_fraction"] = inst.busy_ns / max(now - t_measured, 1)
    metrics["perf_model"] = perf.name
    metrics["perf_model_source"] = perf_model_source(perf)
    metrics.update(perf_model_tables(perf))
    metrics.update(client_side_metrics(perf, cols))
    metrics["warmup_requests"] = 0 if warmup is None else len(warmup)
    if content:
        metrics.update(_measured_cache_metrics(scheduler.kv, *cache_before))
    metrics.update(scheduler.extra_metrics())
    metrics.update((scheduler.stats() - before).metrics())  # the measured phases only
    n = sum(len(r) for r in all_reqs)
    run_info = {
        "wall_s": time.perf_counter() - t0,
        "simulate_s": t_sim,
        "num_events": events,
        "simulated_requests_per_s": n / max(t_sim, 1e-9),
    }
    tables = {"timeline": inst.timeline_columns(), **scheduler.extra_tables()}
    return SimResult(cfg, metrics, cols, run_info, {"tables": tables})
