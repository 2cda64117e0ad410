"""The ``deployment`` section: a disaggregated prefill/decode deployment of one model
(docs/design/disaggregation-speculation.md §1.2).

``SimulationConfig.deployment`` is None for today's single pool (agg). A section with a
``prefill`` or ``decode`` pool, or ``mode: disagg``, is a disaggregated run (``sim/disagg.py``)::

    deployment:
      prefill: {instances: 2, tp: 4, gpu: h200}
      decode:  {instances: 1, tp: 8, gpu: b200, scheduler: {max_seqs: 512}}
      router: least-loaded          # per pool (experiments/replicas.py's routers)
      kv_transfer: {link: auto, bandwidth_gbs: null, latency_us: null, efficiency: 0.8}
      request_overhead_ms: 0        # or auto: the serving path's per-request cost (below)

A pool's ``gpu``, ``tp``, ``data_parallel_size``, ``enable_expert_parallel``, ``moe_tp_size``,
``engine`` and ``engine_version`` replace the base config's; its ``scheduler`` and ``memory``
keys are merged over the base sections. ``speculative`` is the decode pool's only: the prefill
leg samples one token, so the prefill pool never speculates (a base ``speculative`` is the
decode pool's). The base config's validators of these keys run on each pool's effective
config; errors name the field (``deployment.decode.tp: …``).

``request_overhead_ms`` is a fixed per-request latency of the disaggregated serving path that
no GPU step, queue or link prices: the router's second hop, the PD handshake and the engines'
completion polling (``sim/disagg_overhead.py``; design §1.7). ``dynamo`` / ``vllm-proxy`` take
a measured serving path's value, ``auto`` the decode engine's
(:data:`tidal.sim.disagg_overhead.REQUEST_OVERHEAD_MS`); the default 0 is the path as the
pools, links and steps alone give it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator

from tidal.cluster.links import LINK_KINDS
from tidal.core.errors import ConfigError
from tidal.core.strict import StrictModel
from tidal.engine.spec_config import SpeculativeConfig, parse_speculative_config
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import check_tp
from tidal.sim.engine_defaults import apply_engine_defaults
from tidal.sim.engine_only import check_engine_only

if TYPE_CHECKING:
    from tidal.sim.config import SimulationConfig

ROLES = ("prefill", "decode")
POOL_ROUTERS = ("least-loaded", "round-robin", "prefix-aware")
"""The routers of ``experiments/replicas.py`` (``sim/routers.py``)."""
EXACT_DECODE_BATCHING = ("mb", "prefill-first")
"""Decode-pool batching policies whose fast-forward is exact under hand-offs (tested)."""


class PoolConfig(StrictModel):
    """One pool: identical instances of ``tp`` GPUs of type ``gpu``."""

    instances: int = Field(default=1, ge=1)
    tp: int | None = Field(default=None, ge=1)
    """Tensor-parallel degree (default: the base config's ``tp``)."""
    gpu: str | None = None
    """GPU type (default: the base config's ``gpu``)."""
    scheduler: dict[str, Any] = Field(default_factory=dict)
    """Keys of the ``scheduler`` section that differ in this pool."""
    memory: dict[str, Any] = Field(default_factory=dict)
    """Keys of the ``memory`` section that differ in this pool."""
    data_parallel_size: int | None = Field(default=None, ge=1)
    """Attention data parallelism of one instance (vLLM's ``--data-parallel-size``; default:
    the base config's)."""
    enable_expert_parallel: bool | None = None
    """MoE experts sharded over the instance's ranks (default: the base config's)."""
    moe_tp_size: int | None = Field(default=None, ge=1)
    """Hybrid MoE split, SGLang's ``--moe-tp-size`` (default: the base config's)."""
    engine: Literal["vllm", "sglang"] | None = None
    """The pool's serving engine (default: the base config's). An engine other than the
    base's brings its scheduler defaults (``sim/engine_defaults.py``) under the pool's own
    ``scheduler`` / ``memory`` keys (vLLM's are Tidal's own: a vLLM pool under an SGLang base
    keeps the base's SGLang-filled values unless its keys set them)."""
    engine_version: str | None = None
    """The pool's engine version (default: the base config's)."""
    speculative: SpeculativeConfig | None = Field(
        default=None, validation_alias=AliasChoices("speculative", "speculative_config")
    )
    """Decode pool only: speculative decoding of the decode instances (vLLM's
    ``--speculative-config``; default: the base config's ``speculative``)."""

    @field_validator("speculative", mode="before")
    @classmethod
    def _speculative(cls, v: Any) -> Any:
        if not isinstance(v, str):
            return v
        try:
            return parse_speculative_config(v, "speculative")
        except ConfigError as err:  # pydantic names the field (deployment.<pool>.speculative)
            raise ValueError(str(err).split(": ", 1)[-1]) from None


class KVTransferConfig(StrictModel):
    """How the prompt's KV blocks move from a prefill to a decode instance."""

    protocol: Literal["pull", "push"] = "pull"
    """``pull`` (vLLM's NixlConnector: the decode side reads after the prefill, into blocks it
    allocates then) or ``push`` (SGLang + Mooncake: decode blocks reserved first, the KV
    streams layer by layer while the prompt is computed; ``sim/disagg_push.py``)."""
    overlap: Literal["none", "layerwise"] | None = None
    """``layerwise`` (push's, its default) or ``none`` (pull's, its default)."""
    link: str = "auto"
    """``auto`` or a kind of :data:`tidal.cluster.links.LINK_KINDS`."""
    bandwidth_gbs: float | None = Field(default=None, gt=0)
    """Line rate per GPU in GB/s (default: the link kind's)."""
    latency_us: float | None = Field(default=None, ge=0)
    """One-way latency in µs (default: the link kind's)."""
    efficiency: float | None = Field(default=None, gt=0, le=1)
    """Achieved share of the line rate (default 0.8)."""

    @model_validator(mode="after")
    def _overlap(self) -> KVTransferConfig:
        want = "layerwise" if self.protocol == "push" else "none"
        if self.overlap not in (None, want):
            raise ValueError(
                f"deployment.kv_transfer.overlap: {self.overlap} is not modelled with protocol "
                f"{self.protocol} (pull reads the KV after the prefill; push streams it layer "
                f"by layer); use overlap: {want} or drop it"
            )
        return self

    @model_validator(mode="after")
    def _kind(self) -> KVTransferConfig:
        if self.link != "auto" and self.link not in LINK_KINDS:
            raise ValueError(
                f"deployment.kv_transfer.link: unknown link kind {self.link!r}; valid: auto, "
                + ", ".join(LINK_KINDS)
            )
        return self


class DeploymentConfig(StrictModel):
    mode: Literal["agg", "disagg"] | None = None
    """``disagg`` (the default when a pool is given) or ``agg`` (one pool: the base config)."""
    prefill: PoolConfig = PoolConfig()
    decode: PoolConfig = PoolConfig()
    router: str = "least-loaded"
    """Router over each pool's instances: least-loaded | round-robin | prefix-aware."""
    kv_transfer: KVTransferConfig = KVTransferConfig()
    request_overhead_ms: float | Literal["auto", "dynamo", "vllm-proxy"] = 0.0
    """Per-request latency of the disaggregated serving path in ms (≥ 0), a measured serving
    path (``dynamo`` 180, ``vllm-proxy`` 110) or ``auto`` (the decode engine's: SGLang 180,
    vLLM 110); ``sim/disagg_overhead.py``. Its own TTFT term, ``handoff``."""

    @field_validator("request_overhead_ms", mode="before")
    @classmethod
    def _overhead(cls, v: Any) -> Any:
        if isinstance(v, str) and v not in ("auto", "dynamo", "vllm-proxy"):
            try:
                v = float(v)
            except ValueError:
                raise ValueError(
                    f"{v!r} is neither a number of ms nor auto, dynamo or vllm-proxy; use e.g. "
                    "180 or auto"
                ) from None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not v >= 0:
            raise ValueError(f"{v} ms is negative (or NaN); use a value >= 0 or auto")
        return v

    @model_validator(mode="before")
    @classmethod
    def _implied_mode(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("mode") is None:
            return {**data, "mode": "disagg"}
        return data

    @model_validator(mode="after")
    def _router(self) -> DeploymentConfig:
        if self.router not in POOL_ROUTERS:
            raise ValueError(
                f"deployment.router: unknown router {self.router!r}; valid: "
                + ", ".join(POOL_ROUTERS)
            )
        given = {"prefill", "decode", "kv_transfer", "request_overhead_ms"}
        if self.mode == "agg" and self.model_fields_set & given:
            raise ValueError(
                "deployment.mode: agg runs one pool (the base config), so the prefill/decode "
                "pools given would be ignored; set mode: disagg or drop them"
            )
        return self

    @property
    def disaggregated(self) -> bool:
        return self.mode == "disagg"


OVERRIDES = (
    "gpu", "tp", "data_parallel_size", "enable_expert_parallel", "moe_tp_size", "engine",
    "engine_version",
)  # fmt: skip
"""Pool keys that replace the base config's where the pool sets them."""


def pool_config(cfg: SimulationConfig, role: str) -> SimulationConfig:
    """The base config with ``role``'s pool settings applied (no deployment): what one
    instance of that pool is built from. A host prefix-cache tier of the base config is the
    prefill pool's (the decode pool gets one only from its own ``memory`` keys); speculation
    is the decode pool's (the prefill leg samples one token)."""
    assert cfg.deployment is not None
    pool: PoolConfig = getattr(cfg.deployment, role)
    update: dict[str, Any] = {
        k: getattr(pool, k) for k in OVERRIDES if k in pool.model_fields_set
        and getattr(pool, k) is not None
    }  # fmt: skip
    sched_keys, mem_keys = dict(pool.scheduler), dict(pool.memory)
    engine = update.get("engine", cfg.engine)
    if engine != cfg.engine:  # the pool's engine brings its defaults, under the pool's keys

        eng = apply_engine_defaults(
            {"engine": engine, "gpu": update.get("gpu", cfg.gpu), "scheduler": sched_keys,
             "memory": mem_keys, "tp": update.get("tp", cfg.tp),
             "data_parallel_size": update.get("data_parallel_size", cfg.data_parallel_size)},
            disaggregated=True,
        )  # fmt: skip
        sched_keys, mem_keys = eng["scheduler"], eng["memory"]
    sched = type(cfg.scheduler).model_validate({**_dump(cfg.scheduler), **sched_keys})
    mem_data = {**_dump(cfg.memory), **mem_keys}
    if role == "decode" and "host_cache_gib" not in pool.memory:
        mem_data.update(host_cache_gib=0.0)  # the base's host tier is the prefill pool's
    mem = type(cfg.memory).model_validate(mem_data)
    spec = None if role == "prefill" else (pool.speculative or cfg.speculative)
    return cfg.model_copy(
        update={
            **update,
            "scheduler": sched,
            "memory": mem,
            "speculative": spec,
            "deployment": None,
        }
    )


def _dump(model: StrictModel) -> dict[str, Any]:
    return {k: getattr(model, k) for k in type(model).model_fields}


def check_deployment(cfg: SimulationConfig, flag_names: dict[str, str] | None = None) -> None:
    """Refuse a deployment the simulator cannot run as given; the message names the field
    (and the flag that set it). Raises ``ValueError`` (pydantic's model-level error)."""
    dep = cfg.deployment
    if dep is None or not dep.disaggregated:
        return
    for key, why in _unsupported(cfg):
        raise ValueError(f"deployment: {why} ({key}); drop the deployment section or {key}")
    for role in ROLES:
        _check_pool(cfg, role, flag_names or {})


def _unsupported(cfg: SimulationConfig) -> list[tuple[str, str]]:
    out = []
    if cfg.cluster is not None:
        out.append(("cluster", "a disaggregated deployment serves one model, not a cluster"))
    if cfg.workload.warmup_requests:
        out.append(("workload.warmup_requests", "warm-up phases are not disaggregated yet"))
    return out


def _check_pool(cfg: SimulationConfig, role: str, flags: dict[str, str]) -> None:
    def fail(field: str, msg: str) -> None:
        key = f"deployment.{role}.{field}"
        flag = flags.get(key)
        raise ValueError(f"{key}{f' ({flag})' if flag else ''}: {msg}")

    pool: PoolConfig = getattr(cfg.deployment, role)
    if pool.gpu is not None:
        try:
            get_gpu(pool.gpu)
        except (ConfigError, KeyError) as err:
            fail("gpu", str(err).split(": ", 1)[-1])
    try:
        pcfg = pool_config(cfg, role)
    except ValidationError as err:
        e = err.errors()[0]
        section = "scheduler" if err.title == "SchedulerSettings" else "memory"
        loc = ".".join(str(p) for p in e["loc"])
        fail(f"{section}.{loc}", e["msg"].removeprefix("Value error, "))
        return
    try:
        check_tp(pcfg.model_spec(), pcfg.tp)
    except ConfigError as err:
        fail("tp", str(err).split(": ", 1)[-1])
    if role == "prefill" and pool.speculative is not None:
        fail(
            "speculative",
            "the prefill leg samples one token, so the prefill pool does not speculate; set "
            "deployment.decode.speculative",
        )
    _check_parallel(pcfg, fail)
    if role == "decode" and pcfg.scheduler.batching not in EXACT_DECODE_BATCHING:
        fail(
            "scheduler.batching",
            f"{pcfg.scheduler.batching} is not supported in the decode pool yet (exact "
            f"hand-offs are tested for {', '.join(EXACT_DECODE_BATCHING)}); set "
            "deployment.decode.scheduler.batching: mb",
        )


def _check_parallel(pcfg: SimulationConfig, fail: Any) -> None:
    """The base config's checks of the engine-only keys (``SimulationConfig._engine_only``:
    they need the engine tables) and of the MoE split, run on the pool's effective config."""
    try:
        check_engine_only(pcfg)
    except ValueError as err:
        key, _, msg = str(err).partition(": ")
        fail(key, msg)
    moe_tp, group = pcfg.moe_tp_size, pcfg.tp * pcfg.data_parallel_size
    if moe_tp is not None and group % moe_tp:
        fail(
            "moe_tp_size",
            f"{moe_tp} does not divide the {group} GPUs of the pool's MoE group "
            "(tp × data_parallel_size); use a divisor of it",
        )
