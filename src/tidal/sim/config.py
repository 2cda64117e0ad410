"""The full, typed configuration of one simulation run (YAML-loadable, recorded with results)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

import tidal.cluster.registries  # noqa: F401  (every policy registered)
from tidal.batching.eb_options import EBOptions
from tidal.cluster.config import ClusterConfig
from tidal.cluster.policies import PLACEMENTS
from tidal.core.errors import ConfigError
from tidal.core.plugins import load_policy_modules
from tidal.core.strict import StrictModel
from tidal.core.validation import format_validation_error as format_validation_error
from tidal.engine.ordering import ORDERINGS
from tidal.engine.policy import BATCHING
from tidal.engine.spec_config import SpeculativeConfig, parse_speculative_config
from tidal.hardware.calibration import check_perf_model
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import ModelSpec, check_tp, get_model
from tidal.hardware.precision import check_kv_cache_dtype, check_weight_dtype, method_dtypes
from tidal.sim.applicability import describe, ignored
from tidal.sim.augment import AugmentConfig
from tidal.sim.config_file import MAX_CONFIG_BYTES as MAX_CONFIG_BYTES  # re-exported
from tidal.sim.config_file import load_yaml as load_yaml  # re-exported
from tidal.sim.deployment import DeploymentConfig, check_deployment
from tidal.sim.engine_defaults import VLLM_UTILIZATION, apply_engine_defaults, check_memory_plan
from tidal.sim.engine_only import check_engine_only
from tidal.workload.config import WorkloadConfig

_Strict = StrictModel


class MemoryConfig(_Strict):
    gpu_memory_utilization: float = Field(default=VLLM_UTILIZATION, gt=0, le=1)
    """vLLM ``gpu_memory_utilization``: share of the driver-reported memory the instance plans."""
    activation_reserve_gb: float | None = Field(default=None, ge=0)
    """None: vLLM's profiled plan (``hardware/memory.py``); a number: one flat reserve of that
    many GB for activations, non-torch memory and CUDA graphs (the pre-issue-13 method)."""
    non_torch_gib: float | None = Field(default=None, ge=0)
    """Non-torch memory per GPU, GiB (None: 0.35 + 0.25 per further TP rank)."""
    cuda_graph_gib: float | None = Field(default=None, ge=0)
    """CUDA-graph reserve per GPU, GiB (None: 0.40; 0 for ``enforce_eager``)."""
    mem_fraction_static: float | None = Field(default=None, gt=0, le=1)
    """SGLang ``--mem-fraction-static``: (weights + KV pool) / GPU memory. Set, the KV pool is
    that share of the memory less the weights (SGLang's static plan; activations and CUDA
    graphs live in the rest); ``engine: sglang`` sets SGLang's own default
    (:func:`tidal.sim.engine_defaults.sglang_mem_fraction_static`)."""
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
    enable_mixed_chunk: bool | None = None
    """SGLang ``--enable-mixed-chunk`` (``engine: sglang`` only): decodes share the steps of
    prefill chunks (batching ``sglang``, :mod:`tidal.engine.sglang_batching`). None: off."""
    max_prefill_tokens: int | None = Field(default=None, ge=1)
    """SGLang ``--max-prefill-tokens`` (``engine: sglang`` only): a step's first prompt is
    admitted whole, further ones while their tokens stay below this cap less the step's
    prefill so far. None: SGLang's 16,384 where either SGLang flag selects batching ``sglang``."""
    schedule_conservativeness: float | None = Field(default=None, ge=0.0)
    """SGLang ``--schedule-conservativeness`` (``engine: sglang`` only): scales the share of
    the running requests' remaining output the admission reserves (``new_token_ratio``,
    :mod:`tidal.engine.sglang_batching`). None: SGLang's 1.0."""
    scheduler_recv_interval: int | None = Field(default=None, ge=1)
    """SGLang ``--scheduler-recv-interval`` (``engine: sglang`` only): the scheduler receives
    new requests only every N decode steps (and right after a prefill step;
    :mod:`tidal.engine.sglang_recv`). None: SGLang's 1 (every step)."""
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
    """A catalog id, a Hugging Face repo id whose config ``aiconfigurator-core`` ships (e.g.
    ``Qwen/Qwen3-235B-A22B-FP8``), or a path to a ``config.json`` / model directory
    (:func:`tidal.hardware.models.get_model`)."""
    gpu: str = "h100"
    tp: int = Field(default=1, ge=1)
    quantization: str | None = None
    """vLLM ``--quantization``: fp8 | modelopt | modelopt_fp4 | mxfp4 | awq | gptq | … (None:
    the checkpoint's ``quantization_config`` / ``hf_quant_config.json``, else bf16)."""
    kv_cache_dtype: str = "auto"
    """vLLM ``--kv-cache-dtype``: auto (the model dtype, or FP8 where the checkpoint quantizes
    its KV) | bfloat16 | fp8 | fp8_e4m3 | fp8_e5m2."""
    gemm_quant: str | None = None
    """Tidal: the operator tables' dtype of the non-expert linear layers (bfloat16, fp8,
    fp8_block, nvfp4, int4_wo, …), over ``quantization`` (None: from it)."""
    moe_quant: str | None = None
    """Tidal: the tables' dtype of the routed experts (… w4a16_mxfp4), over ``quantization``."""
    perf_model: str = "auto"
    """``auto``: the engine's measured operator tables where the GPU has them, else a paper's
    calibration for (model, GPU, TP), else the bundled Vidur profiles, else the
    corrected roofline (:mod:`tidal.hardware.auto_perf`; ``summary.json``:
    ``perf_model_source``); or ``engine`` (the tables of ``engine`` at ``engine_version``),
    ``auto-vidur`` (``auto`` before issue 28: without the tables), ``roofline``,
    ``corrected-roofline``, ``measured`` (alias ``vidur``), ``linear``, ``profile:PATH``,
    ``measured:PATH`` (:mod:`tidal.hardware.calibration`)."""
    policy_modules: list[str] = Field(default_factory=list)
    """Python files (or module names) imported before any policy is looked up, so that a policy
    written outside the package registers itself by name (``--policy-module``;
    :func:`tidal.core.plugins.load_policy_modules`)."""
    engine: Literal["vllm", "sglang"] = "vllm"
    """The serving engine simulated: its measured operator tables (``perf_model: engine``)
    and its scheduler defaults where the config leaves them unset (SGLang: prefill-first
    batches, its chunked-prefill size, its static memory fraction;
    :mod:`tidal.sim.engine_defaults`)."""
    engine_version: str | None = None
    """Its version (``tidal hardware show`` lists those with data); None: the newest the
    tables hold for the GPU."""
    data_parallel_size: int = Field(default=1, ge=1)
    """vLLM's ``--data-parallel-size`` (``perf_model: engine``): dp engines of ``tp`` GPUs
    each, simulated as one scheduler over dp times the KV cache, ``max_seqs`` and token
    budget, whose steps the ranks share evenly; MoE layers span the dp·tp GPUs. With
    ``engine: sglang`` (attention DP) the token budget is the instance's: SGLang divides
    ``--chunked-prefill-size`` among the ranks (:func:`tidal.sim.single.instance_token_budget`)."""
    pipeline_parallel_size: int = Field(default=1, ge=1)
    """vLLM's ``--pipeline-parallel-size`` (``perf_model: engine``): the layers split over this
    many stages of ``tp`` GPUs, up to that many micro-batches in flight; one step is one
    pipeline round (:mod:`tidal.hardware.pipeline`). An instance holds tp × pp × dp GPUs."""
    moe_tp_size: int | None = Field(default=None, ge=1)
    """A hybrid MoE split (SGLang's ``--moe-tp-size`` beside ``--ep-size``): experts sharded
    over tp·dp / moe_tp_size groups of ``moe_tp_size`` GPUs each, which split every expert
    (``perf_model: engine``); None: all TP, or all EP with ``enable_expert_parallel``."""
    enable_expert_parallel: bool = False
    """vLLM's ``--enable-expert-parallel``: MoE experts sharded over the TP ranks (EP = TP)
    instead of each expert split over them."""
    async_scheduling: bool | None = None
    """vLLM's ``--async-scheduling`` / ``--no-async-scheduling`` (``perf_model: engine``, or
    ``auto`` on tables): whether the engine core's CPU time of a step overlaps the GPU step
    (``max(gpu, cpu)``) or is added to it; None: the version's default, async from vLLM 0.14
    (:mod:`tidal.hardware.engine_host`)."""
    moe_distribution: Literal["power_law_1.01", "balanced", "power_law_1.2"] = "power_law_1.01"
    """Routing distribution of the fused-MoE rows read (the tables' token-to-expert loads:
    balanced, or power-law skewed)."""
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
    speculative: SpeculativeConfig | None = Field(
        default=None, validation_alias=AliasChoices("speculative", "speculative_config")
    )
    """Speculative decoding (vLLM's ``--speculative-config`` JSON, also accepted as a string
    here; alias ``speculative_config``): method, k and the acceptance model
    (:mod:`tidal.engine.spec_config`). None: off."""
    cluster: ClusterConfig | None = None
    """A multi-model cluster (``tidal.cluster``); None = one instance of ``model`` on ``tp``
    GPUs. With a cluster, ``model``, ``gpu`` and ``tp`` are unused and the workload is the
    cluster's mix of ``workload.trace``."""
    deployment: DeploymentConfig | None = None
    """A disaggregated prefill/decode deployment (``sim/deployment.py``); None = one pool."""

    @field_validator("speculative", mode="before")
    @classmethod
    def _speculative(cls, v: Any) -> Any:
        return parse_speculative_config(v, "speculative") if isinstance(v, str) else v

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        get_model(v)
        return v

    @field_validator("quantization")
    @classmethod
    def _quantization(cls, v: str | None) -> str | None:
        if v is not None:
            _plain(method_dtypes, v)
        return v

    @field_validator("kv_cache_dtype")
    @classmethod
    def _kv_cache_dtype(cls, v: str) -> str:
        return _plain(check_kv_cache_dtype, v)

    @field_validator("gemm_quant", "moe_quant")
    @classmethod
    def _weight_dtype(cls, v: str | None) -> str | None:
        return v if v is None else _plain(lambda d: check_weight_dtype("dtype", d), v)

    def model_spec(self) -> ModelSpec:
        """The deployed model: ``model`` under the precision keys (vLLM's ``quantization`` and
        ``kv_cache_dtype``, Tidal's ``gemm_quant`` / ``moe_quant``)."""
        return get_model(
            self.model,
            quantization=self.quantization,
            kv_cache_dtype=self.kv_cache_dtype,
            gemm_quant=self.gemm_quant,
            moe_quant=self.moe_quant,
        )

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

    @model_validator(mode="before")
    @classmethod
    def _engine_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return apply_engine_defaults(data)
        return data

    @model_validator(mode="after")
    def _engine_only(self) -> SimulationConfig:
        return check_engine_only(self)

    @model_validator(mode="after")
    def _tp(self) -> SimulationConfig:
        try:
            check_tp(self.model_spec(), self.tp)
        except ConfigError as err:
            raise ValueError(str(err)) from None
        return self

    @model_validator(mode="before")
    @classmethod
    def _load_policy_modules(cls, data: Any) -> Any:
        """Import ``policy_modules`` first: the policies they register are then looked up like
        the package's own (a bad path raises naming the key and ``--policy-module``)."""
        mods = data.get("policy_modules") if isinstance(data, dict) else None
        mods = [mods] if isinstance(mods, str) else mods
        if isinstance(mods, list) and all(isinstance(m, str) for m in mods):
            load_policy_modules(mods)  # anything else: the field's type error says what to give
        return data

    @model_validator(mode="after")
    def _policies(self) -> SimulationConfig:
        """Every policy name is registered and its options valid (the registries are complete:
        :mod:`tidal.cluster.registries`)."""
        BATCHING.get(self.scheduler.batching)
        BATCHING.validate_options(self.scheduler.batching, self.scheduler.options)
        ORDERINGS.get(self.scheduler.ordering)
        if self.cluster is not None:
            PLACEMENTS.validate_options(
                self.cluster.placement, self.cluster.placement_options, "cluster.placement_options"
            )
        return self

    @model_validator(mode="after")
    def _memory_plan(self) -> SimulationConfig:
        check_memory_plan(self.engine, self.memory.mem_fraction_static,
                          self.memory.gpu_memory_utilization)  # fmt: skip
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

    @model_validator(mode="after")
    def _applied(self, info: ValidationInfo) -> SimulationConfig:
        """Refuse a value the run's mode ignores (:mod:`tidal.sim.applicability`); the
        validation context's ``flag_names`` (config key → flag) names the flags."""
        found = ignored(self)
        if found:
            names = (info.context or {}).get("flag_names")
            raise ValueError(describe(found, names))
        return self

    @model_validator(mode="after")
    def _deployment(self, info: ValidationInfo) -> SimulationConfig:
        """After :meth:`_applied`: a pool flag in a mode that ignores it is named there."""
        check_deployment(self, (info.context or {}).get("flag_names"))
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


def _plain(check: Any, value: Any) -> Any:
    """``check(value)``, its ConfigError re-raised as pydantic's ValueError (field named by
    pydantic's location)."""
    try:
        return check(value)
    except ConfigError as err:
        raise ValueError(str(err).split(": ", 1)[-1]) from None


def load_config(
    data: dict[str, Any], flag_names: dict[str, str] | None = None
) -> SimulationConfig:
    """``data`` validated; ``flag_names`` (config key → flag) names flags in the errors, and a
    number out of range its accepted range (:mod:`tidal.core.validation`)."""
    try:
        return SimulationConfig.model_validate(data, context={"flag_names": flag_names or {}})
    except ValidationError as err:
        text = format_validation_error(err, SimulationConfig, flag_names)
        raise ConfigError("config", "\n" + text) from None
