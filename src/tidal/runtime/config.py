"""``RuntimeConfig``: the real engine's settings (pydantic, YAML-loadable), and building an engine.

The scheduler fields mean what they mean in :class:`tidal.sim.config.SchedulerSettings`, so a
simulation and a real run can be configured alike (``tidal fidelity`` does so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

import tidal.cluster.registries  # noqa: F401  (every policy registered)
from tidal.batching.eb_options import EBOptions
from tidal.core.clock import WallClock
from tidal.core.errors import ConfigError
from tidal.core.kv import KVBlockManager
from tidal.core.plugins import load_policy_modules
from tidal.core.prefix_blocks import block_hash_kv
from tidal.engine.build import build_scheduler
from tidal.engine.engine import Engine
from tidal.engine.ordering import ORDERINGS
from tidal.engine.scheduler import BATCHING, Scheduler, SchedulerConfig
from tidal.engine.spec_config import SpeculativeConfig
from tidal.hardware.calibration import derive_linear
from tidal.hardware.interference import StepCosts
from tidal.hardware.models import get_model
from tidal.hardware.profiled import ProfiledPerfModel
from tidal.runtime.memcheck import check_engine_memory
from tidal.runtime.tokenizer import ByteTokenizer

if TYPE_CHECKING:  # torch stays lazy: importing this module must not need the engine extra
    from tidal.runtime.runner import ModelRunner


class RuntimeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = "tiny-llama"
    """A catalog model (``tidal.hardware.models``), whose shape builds the decoder, or a Hugging
    Face model directory (``config.json`` + safetensors, :mod:`tidal.runtime.hf`)."""
    weights: str | None = None
    """A safetensors file (or directory); when unset, a model directory's own weights, else
    dummy seeded weights."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "auto"
    """``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda``, ``cuda:1`` …"""
    num_threads: int | None = Field(default=None, ge=1)
    """CPU threads for torch (``torch.set_num_threads``); unset keeps torch's default."""
    num_kv_blocks: int | None = Field(default=None, ge=1)
    """KV blocks; when unset, as many as ``kv_cache_gb`` holds."""
    kv_cache_gb: float = Field(default=0.25, gt=0)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    """vLLM's: on CUDA, the KV cache takes what this share of the device's memory leaves after
    the weights and an activation reserve (instead of ``kv_cache_gb``); refused on a CPU."""
    max_model_len: int | None = Field(default=None, ge=2)
    """vLLM's: the longest prompt + output served (default: the model's positions or the KV
    cache, whichever is less); beyond either, refused."""
    block_size: int = Field(default=16, ge=1)
    watermark: float = Field(default=0.01, ge=0, lt=1)
    prefix_caching: bool = True
    """vLLM's automatic prefix caching (default on, as in vLLM): full blocks are shared by
    block tables across requests (:mod:`tidal.core.prefix_blocks`)."""
    batching: str = "mb"
    ordering: str = "fcfs"
    token_budget: int = Field(default=2048, ge=1)
    max_seqs: int = Field(default=256, ge=1)
    long_prefill_token_threshold: int = Field(default=0, ge=0)
    seed: int = Field(default=0, ge=0)
    profile: str | None = None
    """A step-time profile of this machine (``tidal calibrate``): EB and EB⁺ take their step
    costs α/β from it (required for them, unused by ``mb``)."""
    eb: EBOptions = EBOptions()
    """Options of ``eb`` and ``ebplus`` (as ``scheduler.eb`` of a simulation)."""
    speculative_config: SpeculativeConfig | None = None
    """vLLM's ``--speculative-config``: the real engine runs method ``ngram`` (prompt lookup,
    greedy requests; :mod:`tidal.runtime.spec_decode`) with batching ``mb``."""
    policy_modules: list[str] = Field(default_factory=list)
    """Python files or module names imported before the policies are looked up (``tidal serve
    --policy-module``), so that a batching or ordering policy they register is selected by its
    name, as in a simulation (:func:`tidal.core.plugins.load_policy_modules`)."""

    @model_validator(mode="before")
    @classmethod
    def _load_policy_modules(cls, data: Any) -> Any:
        """Import ``policy_modules`` before any name is looked up (a bad path raises naming the
        key and ``--policy-module``)."""
        mods = data.get("policy_modules") if isinstance(data, dict) else None
        mods = [mods] if isinstance(mods, str) else mods
        if isinstance(mods, list) and all(isinstance(m, str) for m in mods):
            load_policy_modules(mods)
        return data

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        from tidal.runtime.hf import is_hf_dir  # lazy: loads torch, the engine extra

        if not is_hf_dir(v):
            get_model(v)
        return v

    @model_validator(mode="after")
    def _check(self) -> RuntimeConfig:
        BATCHING.get(self.batching)
        ORDERINGS.get(self.ordering)
        if self.speculative_config is not None:
            from tidal.runtime.spec_decode import check_runtime_speculation

            check_runtime_speculation(self.speculative_config, self.batching)
        if self.token_budget < self.max_seqs:
            raise ValueError(
                f"token_budget ({self.token_budget}) must be >= max_seqs ({self.max_seqs})"
            )
        return self


@dataclass
class RuntimeEngine:
    """A built real engine: the shared ``Engine`` loop over a model runner."""

    config: RuntimeConfig
    engine: Engine
    runner: ModelRunner
    max_model_len: int

    @property
    def scheduler(self) -> Scheduler:
        return self.engine.scheduler

    @property
    def kv(self) -> KVBlockManager:
        return self.engine.scheduler.kv


def build_engine(cfg: RuntimeConfig) -> RuntimeEngine:
    import torch  # lazy: optional dependency (torch)

    # lazy: loads torch, the engine extra
    from tidal.runtime.executor import RuntimeExecutor
    from tidal.runtime.hf import hf_llama_config, is_hf_dir
    from tidal.runtime.kv_cache import PagedKVCache

    # lazy: loads torch, the engine extra
    from tidal.runtime.model import LlamaConfig, LlamaForCausalLM
    from tidal.runtime.runner import ModelRunner
    from tidal.runtime.weights import load_safetensors

    if cfg.num_threads is not None:
        torch.set_num_threads(cfg.num_threads)
    device = _device(cfg.device)
    dtype = getattr(torch, cfg.dtype)
    hf = is_hf_dir(cfg.model)
    lcfg = hf_llama_config(cfg.model) if hf else LlamaConfig.from_spec(get_model(cfg.model))
    per_block = PagedKVCache.bytes_per_block(lcfg, cfg.block_size, dtype)
    kv_bytes = (cfg.num_kv_blocks or cfg.kv_cache_gb * 1e9 // per_block) * per_block
    check_engine_memory(lcfg, torch.empty((), dtype=dtype).element_size(), kv_bytes, device)
    model = LlamaForCausalLM(lcfg).to(dtype)
    weights = cfg.weights or (cfg.model if hf else None)
    if weights:
        load_safetensors(model, weights)
    else:
        model.init_dummy(cfg.seed)
    if not hf:  # a catalog shape is served with the byte tokenizer: emit only its text ids

        model.restrict_outputs(ByteTokenizer(lcfg.vocab_size).text_ids())
    model = model.to(device).eval()
    per_block = PagedKVCache.bytes_per_block(lcfg, cfg.block_size, dtype)
    kv_bytes = cfg.kv_cache_gb * 1e9
    if cfg.gpu_memory_utilization is not None and cfg.num_kv_blocks is None:
        kv_bytes = _kv_bytes_by_utilization(cfg, device, lcfg)
    num_blocks = cfg.num_kv_blocks or int(kv_bytes // per_block)
    if num_blocks < 1:
        raise ConfigError(
            "kv_cache_gb", f"{kv_bytes / 1e9:.3g} GB holds no KV block of {per_block} bytes"
        )
    cache = PagedKVCache(lcfg, num_blocks, cfg.block_size, device, dtype)
    kv: KVBlockManager
    if cfg.prefix_caching:
        kv = block_hash_kv(num_blocks, cfg.block_size, cfg.watermark)
    else:
        kv = KVBlockManager(num_blocks, cfg.block_size, cfg.watermark, track_ids=True)
    sched_cfg = SchedulerConfig(
        cfg.token_budget,
        cfg.max_seqs,
        cfg.long_prefill_token_threshold,
        costs=profile_step_costs(cfg),
        eb=cfg.eb,
    )
    runner = ModelRunner(model, cache, kv, device, cfg.seed)
    max_len = _max_model_len(cfg, lcfg.max_position, num_blocks * cfg.block_size)
    waiting = ORDERINGS.get(cfg.ordering)()
    if cfg.speculative_config is None:
        scheduler = build_scheduler(sched_cfg, kv, cfg.batching, waiting)
    else:
        from tidal.runtime.spec_decode import build_speculative_scheduler

        spec = cfg.speculative_config
        scheduler = build_speculative_scheduler(
            sched_cfg, kv, cfg.batching, waiting, spec, runner, max_len
        )
    executor = RuntimeExecutor(runner, synchronize=device.type == "cuda")
    engine = Engine(scheduler, executor, WallClock())
    return RuntimeEngine(cfg, engine, runner, max_len)


def _max_model_len(cfg: RuntimeConfig, positions: int, kv_tokens: int) -> int:
    """The context served: ``max_model_len`` when set and possible, else what fits."""
    if cfg.max_model_len is None:
        return min(positions, kv_tokens)
    if cfg.max_model_len > positions:
        raise ConfigError(
            "max_model_len",
            f"{cfg.max_model_len} exceeds the model's {positions} positions",
            f"use at most {positions}",
        )
    if cfg.max_model_len > kv_tokens:
        raise ConfigError(
            "max_model_len",
            f"{cfg.max_model_len} tokens do not fit the KV cache ({kv_tokens} tokens)",
            "lower it, or give the KV cache more memory (--kv-cache-gb, --num-kv-blocks)",
        )
    return cfg.max_model_len


ACTIVATION_BYTES = 16
"""Bytes per (token in a step × widest layer) reserved for activations when the KV cache is
sized by ``gpu_memory_utilization`` (a conservative stand-in for vLLM's profiling run), plus
8 bytes per (running request × vocabulary entry) for the logits."""


def _kv_bytes_by_utilization(  # type: ignore[no-untyped-def]
    cfg: RuntimeConfig, device, lcfg
) -> float:
    """KV bytes = utilization × device memory − memory in use now (the weights included) −
    an activation reserve for a ``token_budget`` step."""
    import torch  # lazy: optional dependency (torch)

    if device.type != "cuda":
        raise ConfigError(
            "gpu_memory_utilization",
            f"sizes a CUDA device's KV cache; this engine runs on {device.type}",
            "size the KV cache with --kv-cache-gb or --num-kv-blocks",
        )
    free, total = torch.cuda.mem_get_info(device)
    util = cfg.gpu_memory_utilization or 0.0
    return kv_bytes_for(util, free, total, cfg.token_budget, cfg.max_seqs, lcfg)


def kv_bytes_for(  # type: ignore[no-untyped-def]
    util: float, free: int, total: int, token_budget: int, max_seqs: int, lcfg
) -> float:
    """The KV budget of :func:`_kv_bytes_by_utilization` from the device's free/total bytes."""
    width = max(lcfg.hidden_size, lcfg.intermediate_size)
    reserve = token_budget * width * ACTIVATION_BYTES + max_seqs * lcfg.vocab_size * 8
    kv = util * total - (total - free) - reserve
    if kv <= 0:
        raise ConfigError(
            "gpu_memory_utilization",
            f"{util} of {total / 2**30:.1f} GiB leaves no room for the KV cache "
            f"({(total - free) / 2**30:.1f} GiB in use, {reserve / 2**30:.2f} GiB reserved "
            "for activations)",
            "raise it, or lower --max-num-batched-tokens",
        )
    return kv


def profile_step_costs(cfg: RuntimeConfig) -> StepCosts | None:
    """EB's view of this machine for ``eb``/``ebplus``: α/β fitted to the calibrated profile by the
    EB paper's recipe (:func:`tidal.hardware.calibration.derive_linear`, docs/research/ebplus.md
    §1.1). No mixed-step interference term: the profile measures none (on a CPU runner a mixed step
    costs its prefill and decode work, EB paper §1.2's term is a GPU effect), so EB⁺'s crossover
    weighs the step overheads α and the per-token costs only."""
    if cfg.profile is None and not BATCHING.get(cfg.batching).needs_step_costs:
        return None  # mixed batching, or a policy of --policy-module that prices no step
    if cfg.batching == "mb":
        return None
    if cfg.profile is None:
        raise ConfigError(
            "profile",
            f"batching {cfg.batching!r} needs this machine's step costs",
            "measure them with `tidal calibrate --out PROFILE.json` and pass --profile "
            "PROFILE.json",
        )

    try:
        perf = ProfiledPerfModel.load(cfg.profile)
    except ConfigError as err:  # reported under this config's field name
        msg = str(err).removeprefix(f"{err.field}: ").removesuffix(f" ({err.fix})")
        raise ConfigError("profile", msg, err.fix) from None
    measured_for = perf.info.get("model")
    if measured_for not in (None, cfg.model):
        raise ConfigError(
            "profile", f"{cfg.profile} was measured for {measured_for}, not {cfg.model}"
        )
    cal = derive_linear(perf)
    return StepCosts(
        cal.alpha_p, cal.beta_p, cal.alpha_d, cal.beta_d, source=f"{cal.source} ({cfg.profile})"
    )


def device_type(name: str) -> str:
    """``cpu`` or ``cuda``: where a ``device`` setting (``auto`` included) puts the engine."""
    return str(_device(name).type)


def _device(name: str):  # -> torch.device
    import torch  # lazy: optional dependency (torch)

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ConfigError("device", f"unknown device {name!r}", "auto, cpu, cuda, cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", "CUDA is not available on this machine", "use cpu or auto")
    return dev
