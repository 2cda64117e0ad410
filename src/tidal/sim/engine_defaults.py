"""The serving engine's own scheduler defaults, applied where a config leaves them unset.

``engine: sglang`` (SGLang 0.5's ``ServerArgs._handle_gpu_memory_settings``, Apache-2.0; the
same in 0.5.6 and 0.5.8; docs/research/engine-data.md, docs/design/sglang_rows.md):

* batching ``sglang`` (:mod:`tidal.engine.sglang_batching`; ``prefill-first`` in the pools of
  a disaggregated deployment unless an SGLang step flag is given): SGLang runs prefill batches and
  decode batches apart unless ``--enable-mixed-chunk`` is given, caps a step's further prompts
  at ``--max-prefill-tokens`` and admits by KV reservation (``new_token_ratio``, scaled by
  ``--schedule-conservativeness``; × 0.3 with data-parallel attention); those SGLang flags
  (``scheduler.enable_mixed_chunk``, ``scheduler.max_prefill_tokens``,
  ``scheduler.schedule_conservativeness``, refused for vLLM) are its options;
* token budget = ``chunked_prefill_size`` by GPU memory: 2,048 below 35 GiB, 4,096 below
  60 GiB (A100-40GB, L40S), 8,192 below 160 GiB (A100-80GB, H100, H200), 16,384 above (B200,
  B300); the instance's, which attention DP divides among its ranks
  (:func:`tidal.sim.single.instance_token_budget`);
* ``memory.mem_fraction_static`` = SGLang's default (:func:`sglang_mem_fraction_static`): the
  KV pool is that share of the GPU less the weights (``hardware/memory.py``). A config that
  sets ``gpu_memory_utilization``, ``activation_reserve_gb`` or ``num_blocks`` keeps its own
  plan.

``engine: vllm`` keeps Tidal's defaults, which are vLLM V1's (mixed chunked prefill, 8,192
batched tokens, 256 sequences, 0.9 of the GPU memory). A key the config sets is never changed.
vLLM's ``async_scheduling`` default depends on the version (on from 0.14): the step model
resolves it (:mod:`tidal.hardware.engine_host`, which the step model's layer can import).
"""

from __future__ import annotations

from typing import Any

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import get_gpu

GIB = 1024**3
MIB = 1024**2


def _tier(mem_bytes: float) -> int:
    """SGLang's GPU-memory tier: 0 (< 20 GiB), 1 (< 35), 2 (< 60), 3 (< 160), 4 (≥ 160)."""
    return sum(mem_bytes >= g * GIB for g in (20, 35, 60, 160))


def sglang_chunked_prefill_size(mem_bytes: float) -> int:
    """SGLang's default ``chunked_prefill_size`` for a GPU of ``mem_bytes``."""
    return (2048, 2048, 4096, 8192, 16384)[_tier(mem_bytes)]


def sglang_cuda_graph_max_bs(mem_bytes: float, tp: int) -> int:
    """SGLang's default ``cuda_graph_max_bs`` (its CUDA-graph reserve scales with it)."""
    small, large = ((8, 8), (24, 80), (32, 160), (256, 512), (512, 512))[_tier(mem_bytes)]
    return small if tp < 4 else large


def sglang_mem_fraction_static(mem_bytes: float, tp: int, chunk: int, dp: int = 1) -> float:
    """SGLang's default ``mem_fraction_static`` = (memory − reserve) / memory, rounded to
    3 places, the reserve in MiB being 512 + 1.5 · max(chunk, 2048) + 2 · cuda_graph_max_bs
    + 1024 · tp / 8, plus with data-parallel attention 3 · bs · dp (and 1.5 · bs · dp more when
    bs > 300), at least 10 GiB on GPUs above 60 GiB. ``tp`` is SGLang's (all GPUs of the
    instance: Tidal's tp · dp)."""
    mib = mem_bytes / MIB
    bs = sglang_cuda_graph_max_bs(mem_bytes, tp)
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * bs + tp / 8 * 1024
    if dp > 1:
        reserved += 3 * bs * dp + (1.5 * bs * dp if bs > 300 else 0.0)
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mib - reserved) / mib, 3)


SGLANG_FLAGS = {
    "enable_mixed_chunk": "--enable-mixed-chunk",
    "max_prefill_tokens": "--max-prefill-tokens",
    "schedule_conservativeness": "--schedule-conservativeness",
    "scheduler_recv_interval": "--scheduler-recv-interval",
}
"""SGLang's launch flags of a step, by ``scheduler`` key (:mod:`tidal.engine.sglang_batching`)."""


def _sglang_flags(data: dict[str, Any]) -> dict[str, Any]:
    """The SGLang step flags ``data``'s scheduler sets (None values left out). Refused, naming
    the flag, for any engine but SGLang: vLLM always mixes prefills into decode steps and caps
    a step's tokens with its token budget alone."""
    sched = data.get("scheduler")
    given = {k: v for k, v in (sched or {}).items() if k in SGLANG_FLAGS and v is not None}
    if given and data.get("engine", "vllm") != "sglang":
        key = next(iter(given))
        raise ConfigError(
            f"scheduler.{key}",
            f"SGLang's {SGLANG_FLAGS[key]} applies to engine: sglang only (vLLM always mixes "
            "prefill chunks into decode steps, within --max-num-batched-tokens)",
            f"drop {SGLANG_FLAGS[key]}, or set --engine sglang",
        )
    return given


def _sglang_batching(
    sched: dict[str, Any], flags: dict[str, Any], dp: int = 1, disaggregated: bool = False
) -> None:
    """Selects batching ``sglang`` (SGLang's step and admission) with the flags as its
    options; a flag given with another batching policy is refused. With data-parallel
    attention SGLang scales ``--schedule-conservativeness`` by 0.3
    (``ServerArgs._handle_data_parallelism``). A disaggregated deployment's pools keep
    ``prefill-first`` unless a flag is given (SGLang's decode side admits through its own
    pre-allocation queue, which is not modelled)."""
    if disaggregated and not flags:
        sched.setdefault("batching", "prefill-first")
        return
    batching = sched.setdefault("batching", "sglang")
    if dp > 1 and flags.get("scheduler_recv_interval", 1) > 1:
        raise ConfigError(
            "scheduler.scheduler_recv_interval",
            "SGLang's --scheduler-recv-interval does not run with data-parallel attention "
            "(SchedulerRecvSkipper asserts not enable_dp_attention)",
            "drop --scheduler-recv-interval, or set data_parallel_size 1",
        )
    if dp > 1 and batching == "sglang":
        given = flags.get("schedule_conservativeness", 1.0)
        flags = {**flags, "schedule_conservativeness": 0.3 * given}
    if not flags:
        return
    if batching != "sglang":
        key = next(iter(flags))
        raise ConfigError(
            f"scheduler.{key}",
            f"SGLang's {SGLANG_FLAGS[key]} shapes SGLang's step (batching sglang), not "
            f"batching {batching!r}",
            "drop --batching (or set it to sglang)",
        )
    options = dict(sched.get("options") or {})
    for key, value in flags.items():
        options.setdefault(key, value)
    sched["options"] = options


def apply_engine_defaults(data: dict[str, Any], disaggregated: bool = False) -> dict[str, Any]:
    """``data`` (a raw simulation config, or a pool's of a ``disaggregated`` deployment) with
    the chosen engine's defaults filled in."""
    flags = _sglang_flags(data) if isinstance(data.get("scheduler"), dict) else {}
    if data.get("engine") != "sglang" or data.get("cluster") is not None:
        return data
    try:
        mem = get_gpu(str(data.get("gpu", "h100"))).mem_bytes
    except ConfigError:  # an unknown GPU: the config's own validation names it
        return data
    out = dict(data)
    sched = dict(out.get("scheduler") or {})
    dp_size = _int(out.get("data_parallel_size"), 1)
    disagg = disaggregated or out.get("deployment") is not None
    _sglang_batching(sched, flags, dp_size, disagg)
    sched.setdefault("token_budget", sglang_chunked_prefill_size(mem))
    out["scheduler"] = sched
    memory = dict(out.get("memory") or {})
    own = ("num_blocks", "gpu_memory_utilization", "activation_reserve_gb", "mem_fraction_static")
    if not any(k in memory for k in own):
        dp = _int(out.get("data_parallel_size"), 1)
        tp = _int(out.get("tp"), 1) * dp
        chunk = _int(sched["token_budget"], 8192)
        frac = sglang_mem_fraction_static(mem, tp, chunk, dp)
        if frac <= 0:  # SGLang's reserve alone exceeds the GPU: it would not start either
            raise ConfigError(
                "scheduler.token_budget",
                f"SGLang's default memory reserve for a {chunk}-token chunked prefill on "
                f"{tp} GPU{'s' if tp > 1 else ''} leaves no memory for the model "
                f"(mem_fraction_static {frac:g})",
                "lower --chunked-prefill-size (--token-budget), or set --mem-fraction-static",
            )
        memory["mem_fraction_static"] = frac
    out["memory"] = memory
    return out


def _int(value: Any, default: int) -> int:
    """An integer setting of the raw config, or ``default`` where it is missing or malformed
    (the config's own validation then names it)."""
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


VLLM_UTILIZATION = 0.9
"""``memory.gpu_memory_utilization``'s default (vLLM's), which a recorded config dumps."""


def check_memory_plan(engine: str, fraction: float | None, utilization: float) -> None:
    """SGLang's static fraction and vLLM's utilization are two plans, each named by its own
    flag: the fraction needs ``engine: sglang`` and a utilization left at vLLM's default."""
    if fraction is None:
        return
    if engine != "sglang":
        raise ValueError(
            "memory.mem_fraction_static (--mem-fraction-static) is SGLang's memory plan, "
            f"but the engine is {engine}: add --engine sglang, or size vLLM's plan with "
            "--gpu-memory-utilization"
        )
    if utilization != VLLM_UTILIZATION:
        raise ValueError(
            "memory.gpu_memory_utilization and memory.mem_fraction_static both size the KV "
            "cache (vLLM's plan and SGLang's): give one of --gpu-memory-utilization, "
            "--mem-fraction-static"
        )

