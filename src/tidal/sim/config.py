"""The full, typed configuration of one simulation run (YAML-loadable, recorded with results)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from tidal.cluster.config import ClusterConfig
from tidal.core.errors import ConfigError
from tidal.core.strict import StrictModel
from tidal.engine.eb_options import EBOptions
from tidal.hardware.calibration import check_perf_model
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import check_tp, get_model
from tidal.sim.augment import AugmentConfig
from tidal.workload.config import WorkloadConfig

_Strict = StrictModel


class MemoryConfig(_Strict):
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    """vLLM ``gpu_memory_utilization``: share of the driver-reported memory the instance plans."""
    activation_reserve_gb: float | None = Field(default=None, ge=0)
    """None: vLLM's profiled plan (``hardware/memory.py``); a number: one flat reserve of that
    many GB for activations, non-torch memory and CUDA graphs (the pre-issue-13 method)."""
    non_torch_gib: float | None = Field(default=None, ge=0)
    """Non-torch memory per GPU, GiB (None: 0.35 + 0.25 per further TP rank)."""
    cuda_graph_gib: float | None = Field(default=None, ge=0)
    """CUDA-graph reserve per GPU, GiB (None: 0.40; 0 for ``enforce_eager``)."""
    block_size: int = Field(default=16, ge=1)
    watermark: float = Field(default=0.01, ge=0, lt=1)
    num_blocks: int | None = Field(default=None, ge=1)
    """KV blocks, overriding the memory plan (e.g. to match a real engine's cache)."""
    prefix_caching: bool = True
    """Automatic prefix caching, on by default as in vLLM (``--no-prefix-caching``): requests
    whose workload gives prompt content (Mooncake ``hash_ids``, shared prefixes) reuse cached
    full blocks (:mod:`tidal.core.prefix_cache`); workloads without content are unaffected."""
    host_cache_gib: float = Field(default=0.0, ge=0)
    """Second prefix-cache tier in host memory per GPU, GiB (vLLM's CPU KV offload; 0: off,
    ``--host-cache-gib``): blocks evicted from the GPU cache move there; a hit there is loaded
    over the host link (``augment.host_link_efficiency`` × PCIe) before it counts as computed
    (:mod:`tidal.core.host_cache`). Host memory of its own, beside the augmented runs' swap
    space ``augment.swap_space_gb``; in a cluster, per GPU of every engine."""


class SchedulerSettings(_Strict):
    batching: str = "mb"
    ordering: str = "fcfs"
    token_budget: int = Field(default=8192, ge=1)
    """Max tokens per step (vLLM ``max_num_batched_tokens``)."""
    max_seqs: int = Field(default=256, ge=1)
    """Max running requests (vLLM ``max_num_seqs``)."""
    long_prefill_token_threshold: int = Field(default=0, ge=0)
    eb: EBOptions = EBOptions()
    """Options of the exclusive-batching policies ``eb`` and ``ebplus``."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options of another registered batching policy that declares its own model (validated
    by it; ``tidal simulate --help`` lists which policies take options where)."""

    @model_validator(mode="after")
    def _budget(self) -> SchedulerSettings:
        if self.token_budget < self.max_seqs:
            raise ValueError(
                f"token_budget ({self.token_budget}) must be >= max_seqs ({self.max_seqs}) so that "
                "every running request can decode in each step"
            )
        return self


class SLOConfig(_Strict):
    ttft_s: float = Field(default=2.0, gt=0)
    """TTFT threshold in seconds (default 2 s, Vidur-Search's P90 SLO; docs/research/ebplus.md §7
    Q9)."""
    tpot_s: float = Field(default=0.2, gt=0)
    """TPOT threshold in seconds (default 200 ms)."""
    norm_latency_s: float | None = Field(default=None, gt=0)
    """Augmented workloads: normalized-latency threshold of effective throughput (off)."""


class SimulationConfig(_Strict):
    model: str = "llama-3.1-8b"
    gpu: str = "h100"
    tp: int = Field(default=1, ge=1)
    perf_model: str = "auto"
    """``auto``: a paper's calibration for (model, GPU, TP), else the bundled measured GPU
    profiles, else the corrected roofline (``summary.json``: ``perf_model_source``); or
    ``roofline``, ``corrected-roofline``, ``measured``, ``linear``, ``profile:PATH``,
    ``measured:PATH`` (:mod:`tidal.hardware.calibration`)."""
    perf_host: Literal["vllm-v1", "vidur"] = "vllm-v1"
    """Per-step host time the measured and corrected models add: vLLM v1's (fitted on the EB
    paper's vLLM-v1 step constants) or ``vidur`` (Vidur's host times of an older vLLM)."""
    interference: bool | Literal["auto"] = "auto"
    """Charge mixed prefill+decode steps the interference term of the EB paper (§1.2).
    ``auto``: where it was measured (Qwen3-8B on H200 and RTX PRO 6000); ``true``: everywhere,
    with the bandwidth-derived defaults elsewhere; ``false``: never."""
    memory: MemoryConfig = MemoryConfig()
    scheduler: SchedulerSettings = SchedulerSettings()
    workload: WorkloadConfig
    slo: SLOConfig = SLOConfig()
    augment: AugmentConfig = AugmentConfig()
    """Serving policy for augmented (tool-calling) workloads (``workload.augmented``)."""
    seed: int = Field(default=0, ge=0)
    fast_forward: bool = True
    cluster: ClusterConfig | None = None
    """A multi-model cluster (``tidal.cluster``); None = one instance of ``model`` on ``tp``
    GPUs. With a cluster, ``model``, ``gpu`` and ``tp`` are unused and the workload is the
    cluster's mix of ``workload.trace``."""

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        get_model(v)
        return v

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v: str) -> str:
        get_gpu(v)
        return v

    @field_validator("perf_model")
    @classmethod
    def _perf(cls, v: str) -> str:
        try:
            check_perf_model(v)
        except ConfigError as err:
            raise ValueError(str(err).removeprefix("perf_model: ")) from None
        return v

    @model_validator(mode="after")
    def _tp(self) -> SimulationConfig:
        try:
            check_tp(get_model(self.model), self.tp)
        except ConfigError as err:
            raise ValueError(str(err)) from None
        return self

    @model_validator(mode="after")
    def _policies(self) -> SimulationConfig:
        import tidal.engine.policies  # noqa: F401  (registers every policy)
        from tidal.engine.ordering import ORDERINGS
        from tidal.engine.policy import validate_options
        from tidal.engine.scheduler import BATCHING

        BATCHING.get(self.scheduler.batching)
        validate_options(self.scheduler.batching, self.scheduler.options)
        ORDERINGS.get(self.scheduler.ordering)
        return self

    @model_validator(mode="after")
    def _host_tier(self) -> SimulationConfig:
        """The host tier is the prefix cache's second tier: it needs the cache (and, for
        augmented requests, the caching of their contexts)."""
        if self.memory.host_cache_gib <= 0:
            return self
        if not self.memory.prefix_caching:
            raise ValueError(
                "memory.host_cache_gib: the host tier is the prefix cache's second tier, and "
                "memory.prefix_caching is off (--no-prefix-caching): turn it on, or set "
                "--host-cache-gib 0"
            )
        if self.workload.augmented is not None and not self.augment.prefix_caching:
            raise ValueError(
                "memory.host_cache_gib: augmented requests' contexts are cached only with "
                "augment.prefix_caching: true (off by default): set it, or --host-cache-gib 0"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _cluster_augmented(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("cluster") is not None:
            w = data.get("workload")
            aug = w.get("augmented") if isinstance(w, dict) else None
            if aug is not None:
                raise ValueError(
                    "workload.augmented applies to one instance; in a cluster set "
                    f"cluster.mix.augmented: {aug} (augmented requests on the mix's arrivals)"
                )
        return data


def format_validation_error(err: ValidationError) -> str:
    """One line per problem: ``dotted.field: message``."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        named = re.match(r"[\w.]+: ", msg) is not None  # a model-level check names its field
        lines.append(msg if not loc and named else f"{loc or 'config'}: {msg}")
    return "\n".join(lines)


def load_config(data: dict[str, Any]) -> SimulationConfig:
    try:
        return SimulationConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError("config", "\n" + format_validation_error(err)) from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.exists():
        raise ConfigError("config", f"file {p} does not exist", "give the path of a YAML file")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError("config", f"{p} is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError("config", f"{p} must hold a mapping of settings")
    return data
