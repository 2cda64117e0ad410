"""One instance's simulation: build it from a :class:`SimulationConfig` (KV manager, memory
plan, scheduler, step model), run it and summarise it (:func:`run_single`); the seed streams and
result type every run shares. :func:`tidal.sim.run.run_simulation` picks this, the cluster
(:mod:`tidal.sim.cluster_run`) or the warm-up phases (:mod:`tidal.sim.phased`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import tidal.cluster.registries  # noqa: F401  (every policy registered)
from tidal.core.augmented_metrics import augmented_metrics
from tidal.core.errors import ConfigError
from tidal.core.kv import KVBlockManager, KVCacheStats, cdiv
from tidal.core.metrics import summarize
from tidal.core.prefix_cache import prefix_cache_kv
from tidal.engine.build import build_scheduler
from tidal.engine.ordering import ORDERINGS
from tidal.engine.policy import validate_options
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.hardware.calibration import (
    build_perf_model,
    client_side_metrics,
    engine_choice,
    perf_model_source,
    perf_model_tables,
)
from tidal.hardware.gpus import get_gpu
from tidal.hardware.interference import has_measured_interference, step_costs
from tidal.hardware.memory import MemoryPlan, plan_memory
from tidal.hardware.models import ModelSpec
from tidal.hardware.perf import PerfModel
from tidal.hardware.roofline import roofline_token_throughput
from tidal.sim.augment import build_augmented, host_tier_size
from tidal.sim.config import SimulationConfig
from tidal.sim.instance import SimInstance
from tidal.sim.recorder import RequestRecorder
from tidal.sim.simulator import Simulation
from tidal.sim.speculation import announce_requests, base_perf, build_speculation
from tidal.workload.base import RequestSet
from tidal.workload.build import build_workload
from tidal.workload.content import unique_content
from tidal.workload.prefill_bound import unavoidable_prefill

SEED_STREAMS = ("workload", "policy", "cluster", "noise")
"""Named random streams, spawned in this order from the run seed (``SeedSequence.spawn``)."""


def rng_streams(seed: int) -> dict[str, np.random.Generator]:
    children = np.random.SeedSequence(seed).spawn(len(SEED_STREAMS))
    return {name: np.random.default_rng(s) for name, s in zip(SEED_STREAMS, children, strict=True)}


@dataclass
class SimResult:
    config: SimulationConfig
    metrics: dict[str, Any]
    columns: MutableMapping[str, np.ndarray]
    """Per-request columns (a cluster run's are read from disk on demand: a
    :class:`~tidal.core.spool.ColumnSet`)."""
    run_info: dict[str, Any]
    """Wall-clock and event counts: not deterministic, kept out of ``summary.json``."""
    extras: dict[str, Any] = field(default_factory=dict)


def check_context(model: ModelSpec, reqs: RequestSet) -> None:
    """Refuse requests longer than the model's context window (vLLM's ``max_model_len``)."""
    total = reqs.prompt_len + reqs.output_len + reqs.extra.get("return_tokens", 0)
    over = int((total > model.max_context).sum())
    if over:
        raise ConfigError(
            "workload",
            f"{over} of {len(reqs)} requests exceed {model.name}'s context of "
            f"{model.max_context} tokens (longest: {int(total.max())} prompt + output tokens)",
            "cap them with max_prompt_len / max_output_len (--max-prompt-len, --max-output-len; "
            "augmented workloads: workload.max_context) or pick a model with a longer context",
        )


def make_kv(cfg: SimulationConfig, num_blocks: int, content: bool) -> KVBlockManager:
    """The instance's KV manager: prefix caching if on and the workload has content to match
    (otherwise the plain manager, whose results and speed caching cannot change)."""
    mem = cfg.memory
    if mem.prefix_caching and content:
        host, ns = host_cache_blocks(cfg)
        ns = ns if host else 0.0
        return prefix_cache_kv(num_blocks, mem.block_size, mem.watermark, 0, host, ns)
    return KVBlockManager(num_blocks, mem.block_size, mem.watermark)


def host_cache_blocks(cfg: SimulationConfig) -> tuple[int, float]:
    """(blocks of the host prefix-cache tier, ns to load one over the host link) of the run's
    deployment (:func:`tidal.sim.augment.host_tier_size`)."""
    model, gpu = cfg.model_spec(), get_gpu(cfg.gpu)
    return host_tier_size(cfg, model, gpu, cfg.tp, cfg.memory.block_size)


def cached_prefill_bound(cfg: SimulationConfig, reqs: RequestSet) -> tuple[float, float] | None:
    """The prefill the roofline charges when the prefix cache may serve shared content
    (:func:`tidal.workload.prefill_bound.unavoidable_prefill`); None: every prompt token."""
    if not cfg.memory.prefix_caching or reqs.content is None:
        return None

    return unavoidable_prefill(reqs.prompt_len, reqs.content)


def check_host_tier(cfg: SimulationConfig, content: bool) -> None:
    """A host tier needs prompt content to cache (the config's own checks refuse it without
    the prefix cache: :class:`~tidal.sim.config.SimulationConfig`); turning the cache off
    needs it too, or the setting would change nothing (issue 32 §2)."""
    if cfg.memory.host_cache_gib > 0 and not content:
        raise ConfigError(
            "memory.host_cache_gib",
            "the workload gives no prompt content, so the prefix cache and its host tier "
            "have nothing to cache",
            "use a workload with content (Mooncake hash_ids, --shared-prefix-groups, "
            "sessions, parallel sampling; augmented: augment.prefix_caching) or set "
            "--host-cache-gib 0",
        )
    if not cfg.memory.prefix_caching and not content:
        raise ConfigError(
            "memory.prefix_caching",
            "off (--no-prefix-caching), but the workload gives no prompt content, so nothing "
            "would be cached with it on either: the setting would change nothing",
            "remove --no-prefix-caching (memory.prefix_caching: false)",
        )


def prefix_cache_metrics(kv: KVBlockManager) -> dict[str, Any]:
    """vLLM's prefix-cache counters (tokens), the hit rate, and evicted cached blocks."""
    st = kv.cache_stats()
    return {
        "prefix_caching": st.prefix_caching,
        "prefix_cache_queries": st.queries,
        "prefix_cache_hits": st.hits,
        "prefix_cache_hit_rate": st.hit_rate,
        "prefix_cache_evicted_blocks": st.evicted_blocks,
        **host_tier_metrics(st),
    }


def host_tier_metrics(st: KVCacheStats) -> dict[str, Any]:
    """The host tier's capacity, hits (tokens, part of ``prefix_cache_hits``), load time and
    dropped blocks; empty without a host tier."""
    if not st.host_tier_blocks:
        return {}
    return {
        "prefix_cache_host_blocks": st.host_tier_blocks,
        "prefix_cache_host_hits": st.host_hit_tokens,
        "prefix_cache_host_hit_rate": st.host_hit_tokens / st.queries if st.queries else 0.0,
        "prefix_cache_host_load_s": st.host_load_ns / 1e9,
        "prefix_cache_host_evicted_blocks": st.host_evicted_blocks,
    }


def check_num_blocks(num_blocks: int, block_size: int, watermark: float, tokens: int) -> None:
    """``memory.num_blocks`` must hold the longest request (``⌈tokens / block_size⌉`` blocks)
    with the admission watermark (``⌊watermark · num_blocks⌋`` blocks) kept free."""
    need = cdiv(tokens, block_size)
    least = need
    while least - int(watermark * least) < need:
        least += 1
    if num_blocks < least:
        raise ConfigError(
            "memory.num_blocks",
            f"{num_blocks} blocks of {block_size} tokens cannot hold the longest request "
            f"({tokens} tokens = {need} blocks, plus the {watermark:g} watermark): at least "
            f"{least} blocks are needed",
            f"set memory.num_blocks ≥ {least}, or leave it unset to plan from GPU memory",
        )


def memory_plan(cfg: SimulationConfig, max_request_tokens: int = 0) -> MemoryPlan:
    """The configured instance's KV plan (vLLM's profile at the scheduler's token budget, or
    SGLang's static fraction where ``memory.mem_fraction_static`` is set), or
    ``memory.num_blocks`` blocks where the config fixes them."""
    mem = cfg.memory
    plan = plan_memory(
        cfg.model_spec(),
        get_gpu(cfg.gpu),
        cfg.tp,
        mem.block_size,
        mem.gpu_memory_utilization,
        mem.activation_reserve_gb,
        min_tokens=max_request_tokens,
        token_budget=cfg.scheduler.token_budget,
        max_seqs=cfg.scheduler.max_seqs,
        non_torch_gib_per_gpu=mem.non_torch_gib,
        cuda_graph_gib=mem.cuda_graph_gib,
        moe_gpus=cfg.tp * cfg.data_parallel_size,
        pp=cfg.pipeline_parallel_size,
        mem_fraction_static=mem.mem_fraction_static,
    )
    if mem.num_blocks is not None:
        check_num_blocks(mem.num_blocks, mem.block_size, mem.watermark, max_request_tokens)
        plan = dataclasses.replace(plan, num_blocks=mem.num_blocks, method="num_blocks")
    return plan


def instance_token_budget(cfg: SimulationConfig) -> int:
    """Tokens one step of the instance may schedule over its ``data_parallel_size`` ranks.
    vLLM: each DP engine has its own ``--max-num-batched-tokens`` (dp × the budget). SGLang:
    ``--chunked-prefill-size`` is the instance's, and DP attention divides it among the ranks
    (``server_args``: ``chunked_prefill_size // dp_size`` when ``--enable-dp-attention``), so
    the budget stands as given."""
    dp, budget = cfg.data_parallel_size, cfg.scheduler.token_budget
    if cfg.engine == "sglang":
        return max(budget // dp, 1) * dp
    return dp * budget


def build_instance(
    cfg: SimulationConfig, max_request_tokens: int, content: bool = False
) -> tuple[Scheduler, PerfModel, MemoryPlan]:
    check_host_tier(cfg, content)
    model, gpu = cfg.model_spec(), get_gpu(cfg.gpu)
    plan = memory_plan(cfg, max_request_tokens)
    interference = cfg.interference
    if interference == "auto":
        interference = has_measured_interference(model, gpu, cfg.tp)
    perf = build_perf_model(
        cfg.perf_model, model, gpu, cfg.tp, interference=bool(interference), host=cfg.perf_host,
        engine=engine_choice(cfg, cfg.data_parallel_size, cfg.moe_tp_size),
    )  # fmt: skip
    costs = step_costs(model, gpu, cfg.tp, perf)  # the target's own steps (EB's costs)
    perf, accept = build_speculation(cfg, perf)
    dp = cfg.data_parallel_size  # dp engines in one scheduler: dp times the KV and limits
    if dp > 1:
        plan = dataclasses.replace(plan, num_blocks=dp * plan.num_blocks)
    kv = make_kv(cfg, plan.num_blocks, content)
    s = cfg.scheduler
    sched_cfg = SchedulerConfig(
        instance_token_budget(cfg),
        dp * s.max_seqs,
        s.long_prefill_token_threshold,
        costs=costs,
        eb=s.eb,
        options=validate_options(s.batching, s.options),
        speculation=accept,
    )
    if cfg.workload.augmented is not None:
        seed = int(rng_streams(cfg.seed)["policy"].integers(1 << 62))
        return build_augmented(cfg, sched_cfg, plan, perf, seed), perf, plan
    scheduler = build_scheduler(sched_cfg, kv, s.batching, ORDERINGS.get(s.ordering)())
    return scheduler, perf, plan


def load_instance_requests(cfg: SimulationConfig) -> RequestSet:
    """The requests of one instance's workload (``cfg.workload``, the seed's workload stream)."""
    rng = rng_streams(cfg.seed)["workload"]
    reqs = build_workload(cfg.workload, rng)
    if len(reqs) == 0:
        raise ConfigError("workload", "the workload has no requests", "widen the time window")
    return reqs


def run_single(
    cfg: SimulationConfig,
    requests: RequestSet | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Simulate one instance serving ``requests`` (default: its workload), no warm-up."""
    t0 = time.perf_counter()
    reqs = requests if requests is not None else load_instance_requests(cfg)
    if cfg.workload.augmented and cfg.augment.prefix_caching and reqs.content is None:
        reqs = dataclasses.replace(reqs, content=unique_content(reqs.prompt_len))
    t_load = time.perf_counter()
    check_context(cfg.model_spec(), reqs)
    max_tokens = int((reqs.prompt_len + reqs.output_len + reqs.extra.get("return_tokens", 0)).max())
    scheduler, perf, mem = build_instance(cfg, max_tokens, reqs.content is not None)
    announce_requests(scheduler, reqs)
    inst = SimInstance(0, scheduler, perf, cfg.fast_forward)
    recorder = RequestRecorder(reqs)
    n = len(reqs)
    cb = (lambda done: progress(done, n)) if progress is not None else None
    sim = Simulation([inst], reqs, recorder, cfg.workload.concurrency, progress=cb)
    sim.run()
    t_sim = time.perf_counter()
    cols = recorder.columns()
    metrics = summarize(cols, cfg.slo.ttft_s, cfg.slo.tpot_s, inst.itl)
    model, gpu = cfg.model_spec(), get_gpu(cfg.gpu)
    metrics["roofline_token_throughput"] = roofline_token_throughput(
        model,
        gpu,
        cfg.tp * cfg.data_parallel_size * cfg.pipeline_parallel_size,  # every GPU
        reqs.prompt_len,
        reqs.output_len,
        mem.kv_capacity_tokens,
        cfg.scheduler.max_seqs * cfg.data_parallel_size,
        prefill=cached_prefill_bound(cfg, reqs),
    )
    metrics.update(mem.summary())
    metrics["num_steps"] = scheduler.num_steps
    metrics["busy_fraction"] = inst.busy_ns / max(sim.now_ns, 1)
    target = base_perf(perf)
    metrics["perf_model"] = perf.name
    metrics["perf_model_source"] = perf_model_source(target)
    metrics.update(perf_model_tables(target))
    metrics.update(client_side_metrics(target, cols))
    if "call_ns" in cols:
        metrics.update(augmented_metrics(cols, cfg.slo.ttft_s, cfg.slo.norm_latency_s))
    if reqs.content is not None:
        metrics.update(prefix_cache_metrics(scheduler.kv))
    metrics.update(scheduler.extra_metrics())
    t_end = time.perf_counter()
    run_info = {
        "wall_s": t_end - t0,
        "load_s": t_load - t0,
        "simulate_s": t_sim - t_load,
        "num_events": sim.num_events,
        "simulated_requests_per_s": n / max(t_sim - t_load, 1e-9),
    }
    tables = {"timeline": inst.timeline_columns(), **scheduler.extra_tables()}
    return SimResult(cfg, metrics, cols, run_info, {"tables": tables})
