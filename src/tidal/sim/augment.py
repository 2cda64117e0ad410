"""Augmented serving in the simulator: the typed settings (``augment:`` in the YAML config,
``--serving-policy`` and ``--predictor`` on the command line) and the scheduler they build.

Host swap space is a resource: ``swap_space_gb`` per GPU of host memory holds swapped-out KV blocks
(INFERCEPT's experiment scripts use 128 GiB for the 6B model and 64 GiB for the 13B,
docs/research/augserve.md §2.4). The host link carries ``host_link_efficiency`` × the GPU's PCIe
bandwidth per direction; with tensor parallelism each GPU moves its own shard, so the per-token
transfer time is ``KV bytes per token per GPU / (efficiency · PCIe bandwidth)``. Left unset, the
efficiency is the deployment's measured one where a measurement exists (INFERCEPT's profiled swap
budget, :func:`tidal.hardware.calibration.measured_host_link`) and 0.8 otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from tidal.augment.bundles import SERVING_POLICIES, AugmentSpec, build_augmented_scheduler
from tidal.augment.env import AugmentEnv
from tidal.augment.intercept import INTERCEPTS
from tidal.augment.ordering import AUGMENT_ORDERINGS
from tidal.augment.waste import IterationProfile
from tidal.core.kv import KVBlockManager
from tidal.core.prefix_cache import prefix_cache_kv
from tidal.core.strict import StrictModel
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.hardware.calibration import INFERCEPT_PROFILES, measured_host_link
from tidal.hardware.gpus import GPUSpec, get_gpu
from tidal.hardware.memory import MemoryPlan
from tidal.hardware.models import ModelSpec
from tidal.hardware.perf import PerfModel

if TYPE_CHECKING:
    from tidal.sim.config import SimulationConfig


class AugmentConfig(StrictModel):
    """Serving policy for augmented workloads (:mod:`tidal.augment.bundles`)."""

    model_config = ConfigDict(extra="forbid")

    serving_policy: str = "vllm"
    """vllm | infercept | augserve | augserve-ordering | augserve-budget."""
    predictor: Literal["oracle", "noisy", "mean", "none"] = "noisy"
    predictor_p: float = Field(default=0.8, ge=0, le=1)
    """noisy: probability that the output-length bucket is right."""
    predictor_sigma: float = Field(default=0.3, ge=0)
    """noisy: σ of the LogNormal(0, σ) factor on call durations."""
    ordering: str | None = None
    """Override the bundle's ready-queue ordering (fcfs | infercept | augserve)."""
    intercept: str | None = None
    """Override the bundle's intercept handling (vllm | infercept | preserve | discard | swap)."""
    token_budget: Literal["static", "dynamic"] | None = None
    static_budget: int | None = Field(default=None, ge=1)
    """Tokens per step of the static budget (bundle default: vllm 2048, infercept 384)."""
    budget_min: int = Field(default=384, ge=1)
    budget_max: int = Field(default=8192, ge=1)
    budget_reserve: int = Field(default=1000, ge=0)
    budget_cooldown_s: float = Field(default=600.0, ge=0)
    """The dynamic budget's memory-pressure fallback: for this long after a preemption or a
    reclaim of idle contexts, the budget is ``budget_min`` (INFERCEPT's static 384; 0: off).
    A cache that ran out once is KV-bound for the rest of a run's regime, and INFERCEPT's
    budget is what holds there (issue 18, docs/design/augserve-defaults.md); a cache that
    never runs out never enters it."""
    budget_step_factor: float = Field(default=2.0, ge=0)
    """The dynamic budget's chunk is capped where a step would take longer than this ×
    ``slo.ttft_s`` by the iteration profile (0: off; only slow deployments reach it:
    docs/design/augserve-defaults.md)."""
    budget_growth: float = Field(default=3.0, ge=0)
    """γ: the dynamic budget keeps γ × the running set's predicted growth to its next stop
    free (:mod:`tidal.augment.budget`; 0: the spec's one-step need)."""
    saturation_tokens: int = Field(default=384, ge=1)
    """INFERCEPT's saturation point N_sat (its chunked-recompute waste and swap budget)."""
    prefix_caching: bool = False
    """Cache augmented requests' own contexts (with ``memory.prefix_caching``): a discarded
    or preempted context re-hits the blocks not yet evicted when it is re-admitted, and the
    waste accounting counts those tokens as spared (``recompute_hit_tokens``). Off by default
    so that the issue 4 tables stay comparable (the vLLM baseline there has no cache)."""
    swap_space_gb: float = Field(default=64.0, ge=0)
    host_link_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Share of the GPU's PCIe bandwidth the KV swap achieves per direction; None: measured
    where available (module docstring), else 0.8."""
    value_form: Literal["memory", "time"] = "memory"
    stage2: bool = True
    """AugServe Stage II: recompute the value whenever a request re-enters the queue."""
    starvation_fcfs: float = Field(default=1.0, ge=0)
    """κ of the FCFS-relative anti-starvation rule (:mod:`tidal.augment.ordering`): a
    queued request is promoted to the FCFS tier at ``ready + κ·W_F + F``, ``W_F`` its wait
    under FCFS by original arrival (INFERCEPT's order, tracked on the real admissions) and
    ``F = starvation_floor_factor × slo.ttft_s``; no request is promoted that FCFS would not
    yet have served. 0: the fixed rule ``starvation_factor`` instead."""
    starvation_floor_factor: float = Field(default=5.0, ge=0)
    """F of the FCFS-relative rule in units of ``slo.ttft_s`` (the spec's 5× τ)."""
    starvation_factor: float = Field(default=60.0, ge=0)
    """Fixed anti-starvation threshold τ = factor × slo.ttft_s, used when ``starvation_fcfs`` is 0
    (0: off). The spec's default is 5× (docs/research/augserve.md §3.3 [DEF]); measured
    (BENCHMARKS.md, issue 4, GPT-J-6B at 5 req/s, past AugServe's knee), 5× turns AugServe most of
    the way back into FCFS under sustained overload — every queued request soon starves (0.43 req/s
    effective vs 2.46 without the tier) — so the default is 60× (τ = 60 s at a 1 s TTFT SLO): 0.97
    req/s, with a p99 TTFT (253 s) below INFERCEPT's (624 s) instead of 1448 s without the tier.
    Below the knee no request waits τ and the choice does not matter."""

    @field_validator("serving_policy", "ordering", "intercept")
    @classmethod
    def _known(cls, v: str | None, info: ValidationInfo) -> str | None:
        names = {
            "serving_policy": SERVING_POLICIES.names,
            "ordering": AUGMENT_ORDERINGS.names,
            "intercept": INTERCEPTS.names,
        }[str(info.field_name)]()
        if v is not None and v not in names:
            raise ValueError(f"unknown value {v!r} (valid: {', '.join(names)})")
        return v


DEFAULT_HOST_LINK_EFFICIENCY = 0.8


def host_link_bytes_per_s(
    cfg: SimulationConfig, model: ModelSpec | None = None, gpu: GPUSpec | None = None, tp: int = 0
) -> float:
    """KV bytes per second per GPU and direction over the host link (module docstring), for
    the run's deployment or the given one (a cluster engine)."""
    model = model or cfg.model_spec()
    gpu = gpu or get_gpu(cfg.gpu)
    tp = tp or cfg.tp
    eff = cfg.augment.host_link_efficiency
    if eff is None:
        measured = measured_host_link(model, gpu, tp)
        if measured is not None:
            return measured[0]
        eff = DEFAULT_HOST_LINK_EFFICIENCY
    return eff * gpu.pcie_gbs * 1e9


def measured_iteration_profile(
    cfg: SimulationConfig, model: str = "", gpu: str = "", tp: int = 0
) -> IterationProfile | None:
    """INFERCEPT's profiled ``It(N) = α·N + γ`` when the run's step times are that profile
    (``perf_model`` auto or linear on a deployment INFERCEPT measured): its waste formulas then
    use the paper's own constants, not a line refitted to the (13B: floored) step model."""
    p = INFERCEPT_PROFILES.get((model or cfg.model, gpu or cfg.gpu, tp or cfg.tp))
    if p is None or cfg.perf_model not in ("auto", "auto-vidur", "linear"):
        return None
    return IterationProfile(p.alpha_ms / 1e3, p.gamma_ms / 1e3, cfg.augment.saturation_tokens)


def host_tier_size(
    cfg: SimulationConfig, model: ModelSpec, gpu: GPUSpec, tp: int, block_size: int
) -> tuple[int, float]:
    """(blocks of the prefix cache's host tier, ns to load one over the host link) of one GPU's
    KV shard: ``memory.host_cache_gib · 2³⁰ // bytes per block`` with ``bytes per block = KV
    bytes per token per GPU × block_size``; a load takes ``bytes per block / host link`` (the
    swaps' :func:`host_link_bytes_per_s`). (0, 0.0) without a tier. The tier is host memory of
    its own, beside the swap space (``augment.swap_space_gb``), as vLLM's CPU offload buffer
    is beside its swap space: a host holds both."""
    gib = cfg.memory.host_cache_gib
    if gib <= 0:
        return 0, 0.0
    per_block = model.kv_bytes_per_token_per_gpu(tp) * block_size
    load_ns = per_block / host_link_bytes_per_s(cfg, model, gpu, tp) * 1e9
    return int(gib * 2**30 // per_block), load_ns


def host_blocks(cfg: SimulationConfig, model: ModelSpec, tp: int, block_size: int) -> int:
    """Host swap space (``augment.swap_space_gb`` per GPU) in KV blocks of one GPU's shard."""
    per_tok = model.kv_bytes_per_token_per_gpu(tp)
    return int(cfg.augment.swap_space_gb * 1e9 // (per_tok * block_size))


def augmented_engine(
    cfg: SimulationConfig,
    sched_cfg: SchedulerConfig,
    kv: KVBlockManager,
    perf: PerfModel,
    policy_seed: int,
    deployment: tuple[ModelSpec, GPUSpec, int] | None = None,
) -> Scheduler:
    """The augmented scheduler on ``kv`` (which holds the host swap space): the cost
    environment of the deployment (default: the run's; a cluster engine passes its own) and
    the bundle of policies over the batching policy ``scheduler.batching``
    (``scheduler.ordering`` does not apply: the bundle's ``augment.ordering`` does; an
    explicitly set ``scheduler.token_budget`` is the static budget unless
    ``augment.static_budget`` is given)."""
    a = cfg.augment
    model, gpu, tp = deployment or (cfg.model_spec(), get_gpu(cfg.gpu), cfg.tp)
    env = AugmentEnv.build(
        perf,
        int(model.kv_bytes_per_token_per_gpu(tp)),
        host_link_bytes_per_s(cfg, model, gpu, tp),
        a.saturation_tokens,
        measured_iteration_profile(cfg, model.name, gpu.name, tp),
    )
    spec = AugmentSpec(
        serving_policy=a.serving_policy,
        ordering=a.ordering,
        intercept=a.intercept,
        token_budget=a.token_budget,
        static_budget=a.static_budget
        or (sched_cfg.max_num_batched_tokens if _own_budget(cfg) else None),
        budget_min=a.budget_min,
        budget_max=a.budget_max,
        budget_reserve=a.budget_reserve,
        budget_cooldown_ns=round(a.budget_cooldown_s * 1e9),
        budget_growth=a.budget_growth,
        budget_step_ns=round(a.budget_step_factor * cfg.slo.ttft_s * 1e9),
        predictor=a.predictor,
        predictor_p=a.predictor_p,
        predictor_sigma=a.predictor_sigma,
        predictor_seed=policy_seed,
        value_form=a.value_form,
        stage2=a.stage2,
        starvation_ns=round(a.starvation_factor * cfg.slo.ttft_s * 1e9),
        starvation_fcfs=a.starvation_fcfs,
        starvation_floor_ns=round(a.starvation_floor_factor * cfg.slo.ttft_s * 1e9),
        batching=cfg.scheduler.batching,
    )
    return build_augmented_scheduler(sched_cfg, kv, env, spec)


def _own_budget(cfg: SimulationConfig) -> bool:
    """Whether ``scheduler.token_budget`` was chosen (it then overrides the bundle's static
    budget): a value other than the field's default. Not ``model_fields_set``: a config
    dumped and loaded again (a sweep cell, a run directory's ``config.yaml``) has every field
    set, and INFERCEPT would then run with 8192 tokens instead of its 384 (issue 18). Setting
    the default value itself keeps the bundle's budget."""
    default = type(cfg.scheduler).model_fields["token_budget"].default
    return bool(cfg.scheduler.token_budget != default)


def build_augmented(
    cfg: SimulationConfig,
    sched_cfg: SchedulerConfig,
    mem: MemoryPlan,
    perf: PerfModel,
    policy_seed: int,
) -> Scheduler:
    """The augmented scheduler of a single-instance run (:func:`augmented_engine`) on a KV
    cache with ``augment.swap_space_gb`` of host swap space and, with the prefix cache,
    ``memory.host_cache_gib`` of host tier (:func:`host_tier_size`)."""
    model = cfg.model_spec()
    hb = host_blocks(cfg, model, cfg.tp, mem.block_size)
    kv: KVBlockManager
    if cfg.augment.prefix_caching and cfg.memory.prefix_caching:
        tier, ns = host_tier_size(cfg, model, get_gpu(cfg.gpu), cfg.tp, mem.block_size)
        kv = prefix_cache_kv(mem.num_blocks, mem.block_size, cfg.memory.watermark, hb, tier, ns)
    else:
        kv = KVBlockManager(mem.num_blocks, mem.block_size, cfg.memory.watermark, hb)
    return augmented_engine(cfg, sched_cfg, kv, perf, policy_seed)
