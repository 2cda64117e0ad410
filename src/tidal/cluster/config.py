"""Typed configuration of a multi-model cluster run (YAML section ``cluster:`` of
:class:`tidal.sim.config.SimulationConfig`). Every constant names its source: the WarmServe artifact
(docs/research/warmserve.md Appendix B), ServerlessLLM/MuxServe (§3.5) or an assumed default (§4.3).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from tidal.cluster.model_entries import entry_names, split_entries
from tidal.cluster.network import NetworkConfig
from tidal.cluster.topology import parse_cluster
from tidal.core.strict import StrictModel
from tidal.engine.spec_config import SpeculativeConfig, parse_speculative_config
from tidal.workload.multimodel import MixConfig

WARMSERVE_FEATURES = (
    "device-prewarm",
    "engine-prewarm",
    "unified-memory",
    "forecast",
    "placement",
    "kv-reservation",
    "memory-switching",
)
"""What ``--warmserve-disable`` can turn off (``all`` = every one). Dependencies: without
unified memory there are no prewarmed weights, hence no forecast-driven prewarming, no KV
reservation and no memory switching; without the forecast, KV reservation has nothing to serve."""

ABLATIONS: dict[str, tuple[str, ...]] = {
    "a": WARMSERVE_FEATURES,
    "b": ("unified-memory",),
    "c": ("forecast",),
    "d": ("kv-reservation",),
    "e": ("placement",),
    "f": (),
}
"""docs/research/warmserve.md §3.5: (a) vanilla vLLM autoscaling, (b) device+engine prewarm only,
(c) unified memory without forecast-driven prewarming, (d) no KV reservation, (e) round-robin
placement, (f) full WarmServe."""


_Strict = StrictModel


class StartupConfig(_Strict):
    """Cold-start stage durations and bandwidths [ASSUMED, docs/research/warmserve.md §4.3]."""

    worker_s: float = Field(default=4.0, ge=0)
    """Worker (Ray actor) and CUDA context creation; 0 when device-prewarmed."""
    engine_s: float = Field(default=8.0, ge=0)
    """Engine process start (imports, API server); replaced by ``handoff_s`` from the pool."""
    handoff_s: float = Field(default=0.5, ge=0)
    """Argument handoff and engine init of a prewarmed engine process."""
    nccl_s: float = Field(default=2.0, ge=0)
    """Communication-group creation for TP > 1 (0 when created during prewarm)."""
    kv_init_s: float = Field(default=2.0, ge=0)
    """vLLM memory profiling and KV allocation (vanilla engines)."""
    host_to_gpu_gbs: float = Field(default=20.0, gt=0)
    """Effective host-DRAM → GPU bandwidth per GPU (capped by the GPU's PCIe link)."""
    ssd_gbs: float = Field(default=3.0, gt=0)
    """SSD → host bandwidth per node (shared by the node's loads)."""
    map_gbs: float = Field(default=50.0, gt=0)
    """CUDA VMM page-mapping throughput (≈0.2 s per 10 GB, docs/research/warmserve.md §1.4)."""
    lazy_kv_tokens: int = Field(default=2048, ge=0)
    """With lazy KV mapping the first step waits for the blocks of this many tokens (one
    max-length request) to be mapped."""
    engine_pool: int = Field(default=32, ge=1)
    """Prewarmed engine processes (artifact: 32)."""
    engine_pool_refill_below: int = Field(default=10, ge=0)
    """Refill the pool (another ``engine_pool`` processes, ``engine_s`` later) below this."""


class WarmServeConfig(_Strict):
    disable: list[str] = Field(default_factory=list)
    """Features to turn off (see ``WARMSERVE_FEATURES``; ``all`` for every one)."""
    scale_down: float = 0.5
    scale_up: float = 0.8
    scale_window_s: float = 5.0
    protect_s: float = 5.0
    router_queue: bool = True
    """A request finding every serving instance of its model at B waits in the model's FIFO for
    the first slot that frees (or an instance that becomes ready), and one new instance is
    acquired if none is starting; off: the artifact's rule (bind to a new instance, else retry
    every ``retry_s``)."""
    peak_keep_s: float = Field(default=60.0, ge=0)
    """Scale-down keeps ⌈peak / B⌉ instances, where peak is the model's largest in-flight count
    at an arrival over the last ``peak_keep_s`` (0: the artifact's rule, average load only)."""
    peak_headroom: float = Field(default=0.6, gt=0, le=1)
    """The peak rule keeps ⌈peak / (peak_headroom · B)⌉ instances."""
    starve_wait_s: float = Field(default=2.0, ge=0)
    """Starvation guard (``policies/warmserve_starve.py``, issue 18): a model whose oldest
    waiting request (router FIFO head or retry path) has waited this long, with no instance
    starting, gets one group of GPUs from the instances other models hold above their need
    (most over-held first). 0: off; inactive with ``peak_keep_s: 0`` (nothing is held)."""
    starve_fill: float = Field(default=0.8, gt=0, le=1)
    """The guard's need of a model: ⌈max(5-s average, in flight now) / (starve_fill · B)⌉
    instances (0.8 = the scale-up threshold, so a model left at its need does not scale up
    again at once)."""
    starve_give_up_s: float = Field(default=30.0, ge=0)
    """Fallback: for a model whose oldest request has waited longer than this (past capacity
    for it) the guard hands nothing back, as without the guard (0: no limit)."""
    triage_ratio: float = Field(default=2.0, ge=0)
    """Past-capacity triage (``policies/warmserve_triage.py``): a starved model that finds no
    other model above its need takes one instance from the model completing the fewest
    requests per GPU-second, when its own rate is at least this many times that (0: off)."""
    triage_window_s: float = Field(default=60.0, gt=0)
    """Time constant of the triage's per-model requests-per-GPU-second average."""
    triage_wait_s: float = Field(default=10.0, ge=0)
    """… once its oldest waiting request has waited this long (10 s: a backlog the guard's
    hand-backs of over-held instances, which act from 2 s, have not mended; measured on the
    robustness grid, 2 and 5 s also fired within capacity, where the sparse model then took
    its GPUs back, and 12.5 s came too late for H200 Llama-3 conv 64)."""
    overload_fallback: bool = False
    """Overload fallback (``policies/warmserve_fallback.py``, issue 18 item 4): past the
    cluster's capacity, ServerlessLLM's autoscaler, holding and router replace WarmServe's until
    the backlog clears. Needs the starvation guard (it reads the guard's waiting requests).
    Opt-in: on the robustness grid it makes the one past-capacity cell that misses the
    per-model P99 guarantee with the defaults hold it (H100 Llama-2 conv 64) but costs SLO
    attainment where it engages (that cell: 74.0 → 37.2 %, H200 Llama-2 conv 64: 71.4 →
    48.7 %): the P99 of two unbounded queues is a worse target than the requests served
    within the SLO."""
    overload_enter_s: float = Field(default=20.0, gt=0)
    """The fallback engages when some model's oldest waiting request has waited longer (20 s:
    measured on the robustness grid; 10 and 15 s lost past-capacity cells, 30 s fixed none)."""
    overload_exit_s: float = Field(default=2.0, ge=0)
    """… and disengages when every model's oldest waiting request has waited less, ..."""
    overload_hold_s: float = Field(default=60.0, ge=0)
    """… once it has been engaged this long."""
    control_period_s: float = Field(default=0.5, gt=0)
    window_s: float = Field(default=300.0, gt=0)
    """Forecast window W."""
    history: int = Field(default=10, ge=1)
    """Windows of error correction, weights 2^-d."""
    score_gbs: float = 32.0
    """Bandwidth in the prewarm score (a relative weight only, artifact PCIE_BANDWIDTH)."""
    max_slots: int = Field(default=30, ge=1)
    """Prewarm slots per GPU."""
    kv_floor: Literal["batch", "request"] = "batch"
    """How far KV reservation may shrink an instance: ``batch`` keeps room for B requests of
    the maximum length (the router never sends more, so reservation never starves it);
    ``request`` is the artifact's rule (target ⌊total · in-flight / B⌋ free blocks) with only a
    one-request floor, which starves an instance whose load rises after it shrank."""
    checkpoints: Literal["dram", "ssd"] = "dram"
    """Where weight loads read from. The artifact reads each rank's safetensors file from the node's
    local disk (``utils.py`` ``get_weights``; ``--use-loaded-model`` switches to pinned host
    memory), and the OS page cache keeps a file once read. ``dram`` (default): the page cache (or
    the preload) already holds every checkpoint, the steady state of a testbed that has run before
    and the setting ServerlessLLM gets too (docs/research/warmserve.md §2.4, §5 Q10). ``ssd``: a
    cold page cache at t = 0 — the first read of a checkpoint on a node crosses the node's SSD link,
    later ones come from DRAM."""
    min_free_blocks: int = Field(default=-1)
    """Floor of the KV reservation target (−1: the blocks of one max-length request; the
    artifact has no floor, which can leave an idle instance with no KV at all)."""

    @field_validator("disable")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        out: list[str] = []
        for item in v:
            for name in item.split(","):
                name = name.strip()
                if not name:
                    continue
                if name == "all":
                    out.extend(WARMSERVE_FEATURES)
                elif name not in WARMSERVE_FEATURES:
                    raise ValueError(
                        f"unknown feature {name!r} (valid: all, {', '.join(WARMSERVE_FEATURES)})"
                    )
                else:
                    out.append(name)
        return sorted(set(out), key=WARMSERVE_FEATURES.index)

    def enabled(self, feature: str) -> bool:
        d = set(self.disable)
        if feature in d:
            return False
        needs_unified = ("forecast", "kv-reservation", "memory-switching", "placement")
        if feature in needs_unified and "unified-memory" in d:
            return False
        return not (feature == "kv-reservation" and "forecast" in d)


class ServerlessLLMConfig(_Strict):
    """ServerlessLLM's autoscaler and router (docs/research/warmserve.md §3.5 B-SL, Appendix A)."""

    target: int = Field(default=32, ge=1)
    """Target ongoing requests per instance (ServerlessLLM default 2; 32 matches WarmServe's B)."""
    keep_alive_s: float = Field(default=5.0, ge=0)
    min_instances: int = Field(default=0, ge=0)
    max_instances: int = Field(default=16, ge=1)
    loop_s: float = Field(default=1.0, gt=0)
    instance_cap: int = Field(default=32, ge=1)
    """Outstanding requests one instance accepts."""
    checkpoints: Literal["dram", "ssd"] = "dram"
    """Where checkpoints start: preloaded in every node's DRAM pool, or on SSD (first load per
    node goes SSD → DRAM → GPU and stays cached in DRAM)."""


class MuxServeConfig(_Strict):
    """MuxServe's static placement and SM sharing (docs/research/warmserve.md §3.5 B-MX, §4.1 item
    8; see :mod:`tidal.cluster.policies.muxserve`)."""

    slowdown: Literal["profile", "k"] = "profile"
    """How an MPS share slows an engine's steps: ``profile`` = MuxServe's measured latency
    ratios (:mod:`tidal.cluster.sharing`); ``k`` = ``1 / min(1, share · k)`` [ASSUMED]."""
    k_prefill: float = Field(default=1.0, gt=0)
    """With ``slowdown: k``: prefill runs ``1 / min(1, share · k_prefill)`` times slower."""
    k_decode: float = Field(default=2.0, gt=0)
    """With ``slowdown: k``: decode runs ``1 / min(1, share · k_decode)`` times slower."""
    cap: Literal["plan", "kv", "batch"] = "batch"
    """The router's per-engine cap (see :mod:`tidal.cluster.policies.muxserve`): ``batch`` = B
    (``cluster.batch``, the artifact's commented-in ``max_num_seqs = 32``); ``plan`` = the
    placement's ``max_num_seqs`` (the artifact's YAML value, literally); ``kv`` = the average
    requests the engine's KV cache holds (MuxServe's own runtime, ``init_max_num_seqs``)."""
    retry_s: float = Field(default=1.0, gt=0)


class ClusterConfig(_Strict):
    spec: str = "2x8:h100"
    """``NODESxGPUS:GPU``."""
    models: list[str] = Field(
        default_factory=lambda: ["llama-2-7b", "llama-2-7b", "llama-2-13b", "llama-2-70b"]
    )
    placement: str = "warmserve"
    """``dedicated``, ``serverlessllm``, ``muxserve`` or ``warmserve``."""
    placement_options: dict[str, Any] = Field(default_factory=dict)
    """Options of the placement policy, validated by its ``Options`` model (``tidal simulate
    --help`` lists which policies take options)."""
    page_mib: int = Field(default=2, ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    block_size: int = Field(default=256, ge=1)
    max_model_len: int = Field(default=2048, ge=1)
    batch: int = Field(default=32, ge=1)
    """B: the router's cap of concurrent requests per instance (artifact BATCH_SIZE)."""
    token_budget: int = Field(default=100_000, ge=1)
    """Engine ``max_num_batched_tokens`` (artifact engine args)."""
    retry_s: float = Field(default=1.0, gt=0)
    """A request that finds no instance retries this often (artifact: 1 s)."""
    warmup_s: float = Field(default=60.0, ge=0)
    """Control time before the first request (initial prewarming, static loads)."""
    perf_model: str = "auto"
    engine: Literal["vllm", "sglang"] = "vllm"
    engine_version: str | None = None
    enable_expert_parallel: bool = False
    moe_distribution: Literal["power_law_1.01", "balanced", "power_law_1.2"] = "power_law_1.01"
    """``perf_model: engine``'s tables, as in the single-instance config."""
    perf_host: Literal["vllm-v1", "vidur"] = "vllm-v1"
    """Per-step host time of the measured and corrected models (as ``SimulationConfig``)."""
    eager_overhead: bool = False
    """Add the eager-mode per-step overhead measured in MuxServe's profile, by model size and
    tensor-parallel degree (:mod:`tidal.cluster.eager`; a sensitivity setting)."""
    startup: StartupConfig = StartupConfig()
    warmserve: WarmServeConfig = WarmServeConfig()
    serverlessllm: ServerlessLLMConfig = ServerlessLLMConfig()
    muxserve: MuxServeConfig = MuxServeConfig()
    mix: MixConfig = MixConfig()
    unit_pools: Literal["auto", "together", "apart"] = "auto"
    """How a disaggregated unit's pools are placed (docs/design/disagg-cluster-nodes.md):
    ``auto`` — one group when P·tp_p + D·tp_d is a power of two ≤ a node, else two groups
    (prefill, decode), each a power of two inside one node, possibly on different nodes;
    ``together`` — always one group (such a unit is refused); ``apart`` — always two groups
    on different nodes (KV over ``network``)."""
    network: NetworkConfig = NetworkConfig()
    """The links between nodes that a unit's KV crosses when its pools sit on two nodes."""

    speculative: dict[str, SpeculativeConfig] = Field(default_factory=dict)
    """Per-model speculative decoding (vLLM's ``--speculative-config``) by model id (each of
    its entries) or name in results (``llama-2-7b#1``), or a mapping entry's
    ``speculative_config``; a model without one takes the run's ``speculative``
    (``--speculative-config``). Aggregated engines and a unit's decode engines speculate
    (docs/design/disagg-cluster-composition.md §C)."""

    @model_validator(mode="before")
    @classmethod
    def _entries(cls, data: Any) -> Any:
        """Mapping entries of ``models`` → strings, their speculative configs →
        ``speculative`` (:mod:`tidal.cluster.model_entries`)."""
        if isinstance(data, dict) and "models" in data:
            models, spec = split_entries(data["models"])
            data = {**data, "models": models}
            if spec:
                data["speculative"] = {**spec, **dict(data.get("speculative") or {})}
        return data

    @field_validator("speculative", mode="before")
    @classmethod
    def _spec_json(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {
                k: parse_speculative_config(x, f"cluster.speculative.{k}")
                if isinstance(x, str) else x
                for k, x in v.items()
            }  # fmt: skip
        return v

    @model_validator(mode="after")
    def _check(self) -> ClusterConfig:
        """The topology parses; the placement name is checked where the registries are complete
        (:class:`tidal.sim.config.SimulationConfig`, and the controller that builds it)."""
        topo = parse_cluster(self.spec)
        if self.unit_pools == "apart" and topo.num_nodes < 2:
            raise ValueError(
                f"cluster.unit_pools: apart puts a unit's pools on different nodes; "
                f"{self.spec!r} has one node (use auto, or NODESxGPUS with ≥ 2 nodes)"
            )
        names = entry_names(self.models)
        ids = {n.split("#")[0] for n in names}
        for k in self.speculative:
            if k not in ids and k not in names:
                raise ValueError(
                    f"cluster.speculative: {k!r} names no model of cluster.models "
                    f"({', '.join(names)}); key it by a model id or its name in results"
                )
        return self
