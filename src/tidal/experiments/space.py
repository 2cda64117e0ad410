"""The planner's input: a base config, a search space over dotted keys, SLO targets and costs.

A plan file is YAML::

    base:                          # a SimulationConfig: model, workload, memory, ...
      model: llama-3.1-8b
      workload: {trace: azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz, rate_scale: 4}
    search:                        # dotted config key -> values; the cartesian product is searched
      gpu: [h100, h200, l40s]
      tp: [1, 2]
      scheduler.batching: [mb, eb, ebplus]        # any names registered in BATCHING
      scheduler.ordering: [fcfs]                  # any names registered in ORDERINGS
      scheduler.token_budget: [512, 2048, 8192]
      scheduler.max_seqs: [128, 256]
    slo: {ttft_p99_s: 2.0, tpot_p99_s: 0.1}
    max_replicas: 16
    router: round-robin
    objective: gpu_hours           # or dollars

The search space is data: any dotted key of the config is an axis, so a policy registered
later is one value in a list away. Unset axes default to every registered batching policy
and ordering, and to ``gpu``/``tp``/``token_budget``/``max_seqs`` lists below; with a
``cluster`` in the base, to every placement (and not to the per-instance axes, which the
cluster sets); with augmented requests (``workload.augmented`` or
``cluster.mix.augmented``), to the serving policies vllm, infercept and augserve
(``augment.serving_policy``). All three papers' policies compose in one option, e.g.
``cluster.placement: warmserve``, ``scheduler.batching: ebplus``,
``augment.serving_policy: augserve`` (tests/test_composition.py).

The capacity dimension is searched by the planner, not listed: by default the number of
replicas of the per-replica config (each ``tp`` GPUs, see :mod:`tidal.experiments.replicas`).
``capacity_key`` names an integer config key to search instead (e.g. a cluster's GPU count),
each unit of it costing ``gpus_per_unit`` GPUs; the run is then a plain ``run_simulation``.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator

import tidal.cluster.registries  # noqa: F401  (every policy registered)
from tidal.core.errors import ConfigError
from tidal.core.strict import StrictModel
from tidal.engine.ordering import ORDERINGS
from tidal.engine.scheduler import BATCHING
from tidal.experiments.plan_precision import CHECKPOINT, UNQUANTIZED
from tidal.experiments.replicas import ROUTERS
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.hardware.precision import QUANTIZATION_METHODS, check_kv_cache_dtype
from tidal.sim.config import format_validation_error
from tidal.sim.fieldcheck import check_field_value

DEFAULT_TP = [1, 2, 4]
DEFAULT_SERVING_POLICIES = ["vllm", "infercept", "augserve"]
"""Augmented workloads: the baseline, INFERCEPT and AugServe (the ablations on request)."""
DEFAULT_TOKEN_BUDGETS = [512, 2048, 8192]
DEFAULT_MAX_SEQS = [128, 256]
MODES = ("mb", "ebplus", "disagg")
"""Deployment modes of ``tidal plan --pareto`` (:mod:`tidal.experiments.pareto`)."""
SLO_METRICS = tuple(f"{m}_p{p}_s" for m in ("ttft", "tpot", "e2e") for p in (50, 90, 99))


class ParetoSettings(StrictModel):
    """``pareto:`` — the load sweep of ``tidal plan --pareto`` at a fixed GPU count, and the
    per-mode option axes (agg: ``tp``; disagg: ``prefill_tp`` × ``decode_tp`` × ``pd_ratios``)."""

    gpus: int = Field(default=8, ge=1)
    load_key: Literal["concurrency", "rate_scale"] = "concurrency"
    """``concurrency``: closed-loop clients (``workload.concurrency``); ``rate_scale``: the
    trace's arrivals sped up (``workload.rate_scale``)."""
    loads: list[float] = Field(default_factory=lambda: [1.0, 4.0, 16.0, 64.0], min_length=1)
    tp: list[int] = Field(default_factory=lambda: [1], min_length=1)
    pp: list[int] = Field(default_factory=lambda: [1], min_length=1)
    """Agg modes: pipeline stages of each replica (``pipeline_parallel_size``; tp × pp GPUs)."""
    prefill_tp: list[int] = Field(default_factory=lambda: [1], min_length=1)
    decode_tp: list[int] = Field(default_factory=lambda: [1], min_length=1)
    pd_ratios: list[str] = Field(
        default_factory=lambda: ["1:1", "1:2", "2:1", "1:3", "3:1"], min_length=1
    )

    @field_validator("loads")
    @classmethod
    def _loads(cls, v: list[float]) -> list[float]:
        if any(not math.isfinite(x) or x <= 0 for x in v):
            raise ValueError(f"{v}: each load must be a finite number > 0")
        return v

    @field_validator("tp", "pp", "prefill_tp", "decode_tp")
    @classmethod
    def _tps(cls, v: list[int]) -> list[int]:
        if any(x < 1 for x in v):
            raise ValueError(f"{v}: each TP degree must be >= 1")
        return v

    @field_validator("pd_ratios")
    @classmethod
    def _ratios(cls, v: list[str]) -> list[str]:
        for r in v:
            p, sep, d = str(r).partition(":")
            if not (sep and p.isdigit() and d.isdigit() and int(p) > 0 and int(d) > 0):
                raise ValueError(f"{r!r} is not a P:D ratio (give e.g. 1:1, 1:3)")
        return v


class PlanSpec(StrictModel):
    model_config = ConfigDict(extra="forbid")

    base: dict[str, Any] = Field(default_factory=dict)
    search: dict[str, list[Any]] = Field(default_factory=dict)
    slo: dict[str, float | None] = Field(default_factory=dict, validate_default=True)
    """SLO targets on summary metrics (``ttft_p99_s``, ``tpot_p99_s``, any ``*_p{50,90,99}_s``);
    a deployment meets the SLO when every request completes and every target holds."""
    max_replicas: int = Field(default=16, ge=1)
    router: str = "round-robin"
    objective: Literal["gpu_hours", "dollars"] = "gpu_hours"
    top: int = Field(default=5, ge=1)
    """How many of the cheapest deployments to return (found exactly: the pruning bound is
    the ``top``-th best cost)."""
    prices: dict[str, float] = Field(default_factory=dict)
    """USD per GPU-hour, overriding the catalog's ``price_per_hour``."""
    capacity_key: str = "replicas"
    capacity_template: str | None = None
    """How a capacity n is written into ``capacity_key``: e.g. ``"1x{n}:{gpu}"`` for a
    cluster spec string (``{gpu}``, ``{tp}``: the option's values); None: the integer n."""
    gpus_per_unit: int | None = Field(default=None, ge=1)
    modes: list[str] | None = None
    """``tidal plan --pareto``: deployment modes to compare (mb, ebplus, disagg; default all)."""
    speculative: list[dict[str, Any] | str] = Field(default_factory=list)
    """``tidal plan --pareto``: speculative configs (vLLM's JSON); each mode runs without
    speculation and with each of these."""
    pareto: ParetoSettings = Field(default_factory=ParetoSettings)

    @field_validator("modes")
    @classmethod
    def _modes(cls, v: list[str] | None) -> list[str] | None:
        for m in v or []:
            if m not in MODES:
                raise ValueError(f"unknown mode {m!r} (valid: {', '.join(MODES)})")
        if v is not None and not v:
            raise ValueError(f"no modes (valid: {', '.join(MODES)})")
        return v

    @field_validator("speculative")
    @classmethod
    def _speculative(cls, v: list[dict[str, Any] | str]) -> list[dict[str, Any] | str]:
        import json

        from tidal.engine.spec_config import parse_speculative_config

        for i, s in enumerate(v):
            text = s if isinstance(s, str) else json.dumps(s)
            try:
                parse_speculative_config(text, f"speculative[{i}]")
            except ConfigError as err:
                raise ValueError(str(err)) from None
        return v

    @field_validator("router")
    @classmethod
    def _router(cls, v: str) -> str:
        if v not in ROUTERS:
            raise ValueError(f"unknown value {v!r} (valid: {', '.join(ROUTERS)})")
        return v

    @field_validator("slo")
    @classmethod
    def _slo(cls, v: dict[str, float | None]) -> dict[str, float | None]:
        for k, x in v.items():
            if k not in SLO_METRICS:
                raise ValueError(f"unknown target {k!r} (valid: {', '.join(SLO_METRICS)})")
            if x is not None and x <= 0:
                raise ValueError(f"{k} must be > 0 seconds")
        if not any(x is not None for x in v.values()):
            raise ValueError("give at least one target, e.g. ttft_p99_s: 2.0")
        return v

    @field_validator("prices")
    @classmethod
    def _prices(cls, v: dict[str, float]) -> dict[str, float]:
        """A price is a finite positive USD per GPU-hour of a catalog GPU: a negative price
        would make the most GPUs the cheapest, and an unknown GPU would silently not count."""
        for gpu, price in v.items():
            try:
                get_gpu(gpu)
            except ConfigError as err:
                raise ValueError(str(err).removeprefix("gpu: ")) from None
            if not math.isfinite(price) or price <= 0:
                raise ValueError(
                    f"{gpu}={price} is not a price (give USD per GPU-hour > 0)"
                )
        return v

    @field_validator("search")
    @classmethod
    def _search(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for k, vals in v.items():
            if not vals:
                raise ValueError(f"{k}: no values")
        return v

    def targets(self) -> dict[str, float]:
        return {k: float(x) for k, x in self.slo.items() if x is not None}

    def axes(self) -> dict[str, list[Any]]:
        """The search block with the defaults filled in (registered policies, TP, budgets)."""
        axes = {k: list(v) for k, v in self.search.items()}
        cluster = self.base.get("cluster")
        axes.setdefault("gpu", [self.base.get("gpu", "h100")])
        # prefill-first is an engine's behaviour (SGLang's), not a policy to choose under vLLM
        batching = [n for n in BATCHING.names() if n != "prefill-first"]
        axes.setdefault("scheduler.batching", batching)
        if cluster is None:  # a cluster's TP, budget and batch cap come from cluster.*
            axes.setdefault("tp", list(DEFAULT_TP))
            axes.setdefault("scheduler.ordering", ORDERINGS.names())
            axes.setdefault("scheduler.token_budget", list(DEFAULT_TOKEN_BUDGETS))
            axes.setdefault("scheduler.max_seqs", list(DEFAULT_MAX_SEQS))
        placements = _registry("cluster.placement")
        if placements is not None and cluster is not None:
            axes.setdefault("cluster.placement", placements.names())
        workload = self.base.get("workload") or {}
        mix = (cluster or {}).get("mix") or {}
        if workload.get("augmented") or mix.get("augmented"):
            axes.setdefault("augment.serving_policy", list(DEFAULT_SERVING_POLICIES))
        for key, values in axes.items():
            if key == "seed" or key == "workload" or key.startswith("workload."):
                raise ConfigError(
                    f"search.{key}",
                    "the planner sizes deployments for one workload",
                    "set it in base; compare workloads with tidal sweep",
                )
            _check_names(key, values)
            for v in values:
                check_field_value(key, v, f"search.{key}")
            reg = _registry(key)
            if reg is None:
                continue
            for v in values:
                if v not in reg:
                    raise ConfigError(
                        f"search.{key}", f"unknown value {v!r}", f"valid: {', '.join(reg.names())}"
                    )
        return axes


def _check_names(key: str, values: list[Any]) -> None:
    """GPU and model axes name catalog entries: a typo is an error, not an empty option."""
    lookups: dict[str, Callable[[str], object]] = {
        "gpu": get_gpu,
        "model": get_model,
        "quantization": _quantization,
        "kv_cache_dtype": check_kv_cache_dtype,
    }
    lookup = lookups.get(key)
    if lookup is None:
        return
    for v in values:
        try:
            lookup(str(v))
        except ConfigError as err:
            raise ConfigError(f"search.{key}", str(err).removeprefix(f"{key}: ")) from None


def _quantization(value: str) -> object:
    """A ``quantization`` axis value: vLLM's method, or the planner's ``bf16`` / ``auto``
    (:mod:`tidal.experiments.plan_precision`)."""
    if str(value).lower() in (*UNQUANTIZED, CHECKPOINT):
        return value
    if value not in QUANTIZATION_METHODS:
        raise ConfigError(
            "quantization",
            f"unknown method {value!r}",
            f"vLLM's names: {', '.join(QUANTIZATION_METHODS)}; or {', '.join(UNQUANTIZED)} "
            f"(unquantized weights), {CHECKPOINT} (the checkpoint's)",
        )
    return value


REGISTRY_AXES = {
    "scheduler.batching": ("tidal.engine.scheduler", "BATCHING"),
    "scheduler.ordering": ("tidal.engine.ordering", "ORDERINGS"),
    "cluster.placement": ("tidal.cluster.policies", "PLACEMENTS"),
    "augment.serving_policy": ("tidal.augment.bundles", "SERVING_POLICIES"),
    "augment.ordering": ("tidal.augment.ordering", "AUGMENT_ORDERINGS"),
}
"""Axes whose values are policy names, checked against their registry up front (a registry
whose package is not installed yet is skipped)."""


def _registry(key: str) -> Any:
    if key not in REGISTRY_AXES:
        return None
    module, name = REGISTRY_AXES[key]
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def load_plan_spec(data: dict[str, Any], flag_names: dict[str, str] | None = None) -> PlanSpec:
    """``data`` validated; ``flag_names`` (config key → flag) names the flags in the errors."""
    try:
        return PlanSpec.model_validate(data)
    except ValidationError as err:
        text = format_validation_error(err, PlanSpec, flag_names)
        raise ConfigError("plan", "\n" + text) from None
