"""The flag → config-key tables of ``tidal simulate`` and ``tidal plan`` (one row per flag; a
new flag is one :class:`~tidal.cli.flagspec.Flag` here). ``shows`` is the config's default,
checked against the config models by tests/cli/test_flags.py. vLLM's names (``vllm=``) are also
``sweep --grid`` keys (:data:`tidal.cli.vllm_names.GRID_KEYS`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

# The batching and augmentation policies registered, as the help lists them (not through
# tidal.cluster.registries: the placement policies would add 15 % to tidal --help).
from tidal.batching import eb, ebplus  # noqa: F401
from tidal.cli.app import _parse_rate
from tidal.cli.flags_cluster import CLUSTER, DISAGG
from tidal.cli.flags_cluster import PLACEMENT_NAMES as PLACEMENT_NAMES  # re-exported
from tidal.cli.flags_workload import AUGMENTED, PREFIXES
from tidal.cli.flagspec import Flag, FlagTable
from tidal.core.errors import TidalError
from tidal.engine.ordering import ORDERINGS
from tidal.engine.policy import describe_batching
from tidal.hardware.gpus import GPUS


def _modules(given: list[str]) -> list[str] | None:
    return list(given) or None


def _rate(text: str) -> float | None:
    return _parse_rate(text)

def cv_of_burstiness(burstiness: float) -> float:
    """Tidal's arrival CV of vLLM's ``--burstiness`` k (the Gamma shape): ``1/sqrt(k)``."""
    if not burstiness > 0 or math.isinf(burstiness):
        raise TidalError(f"burstiness: must be a finite number > 0, got {burstiness}")
    return 1.0 / math.sqrt(burstiness)


def _list(text: str) -> list[Any]:
    from tidal.experiments.grid import parse_value  # lazy: keeps tidal --help fast

    return [parse_value(v) for v in text.split(",") if v.strip()]


S, I, F = str | None, int | None, float | None

DEPLOYMENT = (
    Flag(
        "model", S,
        "Model: a catalog id (llama-3.1-8b, qwen3-8b …), a Hugging Face repo id whose config "
        "aiconfigurator-core ships (Qwen/Qwen3-235B-A22B-FP8 …), or a path to a config.json "
        "or model directory.",
        "model", shows="llama-3.1-8b",
    ),
    Flag(
        "gpu", S,
        f"GPU id: {' '.join(GPUS)} (tidal gpus; or the operator tables' ids: h100_sxm …).",
        "gpu", shows="h100",
    ),
    Flag(
        "tp", I, "Tensor-parallel degree.", "tp",
        decls=("--tp",), vllm=("--tensor-parallel-size", "-tp"), shows=1,
    ),
    Flag(
        "perf_model", S,
        "auto (the engine's measured operator tables where the GPU has them > a paper's "
        "calibration for the model, GPU and TP > Vidur's 2023 profiles > corrected roofline) | "
        "engine (the engine's tables) | auto-vidur (auto without the tables, before issue 28) "
        "| roofline | corrected-roofline | measured (vidur) | linear (a paper's calibration "
        "where one exists) | profile:PATH (tidal calibrate) | measured:PATH.",
        "perf_model", shows="auto",
    ),
    Flag(
        "perf_host", S, "Host time per step of the measured/corrected models: vllm-v1 | vidur.",
        "perf_host", shows="vllm-v1",
    ),
    Flag(
        "engine", S, "Serving engine whose measured operator tables --perf-model engine "
        "(and auto) reads: vllm | sglang.", "engine", shows="vllm",
    ),
    Flag(
        "engine_version", S, "Engine version of the tables (default: the newest for the GPU; "
        "tidal hardware show lists them).", "engine_version",
    ),
    Flag(
        "data_parallel_size", I, "Data-parallel engines of --tp GPUs each (--perf-model "
        "engine, or auto on tables; MoE layers span all of them).", "data_parallel_size",
        decls=("--data-parallel-size",), vllm=("-dp",), shows=1,
    ),
    Flag(
        "pipeline_parallel_size", I, "Pipeline stages of --tp GPUs each, up to that many "
        "micro-batches in flight (--perf-model engine, or auto on tables).",
        "pipeline_parallel_size", decls=("--pipeline-parallel-size",), vllm=("-pp",), shows=1,
    ),
    Flag(
        "moe_tp_size", I, "MoE: GPUs that split each expert in a hybrid TP × EP MoE (SGLang's "
        "--moe-tp-size; --perf-model engine, or auto on tables).", "moe_tp_size",
    ),
    Flag(
        "enable_expert_parallel", bool | None, "MoE: shard experts over the TP ranks (EP = TP).",
        "enable_expert_parallel", decls=("--enable-expert-parallel/--no-enable-expert-parallel",),
        shows=False,
    ),
    Flag(
        "async_scheduling", bool | None, "vLLM: overlap the engine core's scheduling with the "
        "GPU step (default: the version's; on from 0.14).", "async_scheduling",
        decls=("--async-scheduling/--no-async-scheduling",),
    ),
    Flag(
        "speculative_config", S,
        'Speculative decoding, vLLM\'s JSON: {"method": "eagle3|mtp|ngram|draft_model", '
        '"num_speculative_tokens": k, "model": draft id} plus Tidal\'s "acceptance_rate" '
        "(one α or k per-position rates; defaults for eagle3 and mtp k=1). Default: off.",
        "speculative", vllm=("--speculative-config",),
    ),
)  # fmt: skip

PRECISION = (
    Flag(
        "quantization", S,
        "vLLM --quantization: fp8 | modelopt | modelopt_fp4 | mxfp4 | awq | gptq | "
        "compressed-tensors (default: the checkpoint's, else bf16).",
        "quantization", vllm=("-q",),
    ),
    Flag(
        "kv_cache_dtype", S,
        "vLLM --kv-cache-dtype: auto (model dtype, or the checkpoint's FP8) | bfloat16 | fp8.",
        "kv_cache_dtype", shows="auto",
    ),
    Flag(
        "gemm_quant", S,
        "Non-expert weights in an operator-table dtype (bfloat16 fp8 fp8_block nvfp4 int4_wo), "
        "over --quantization.",
        "gemm_quant",
    ),
    Flag(
        "moe_quant", S,
        "Routed-expert weights in an operator-table dtype (… w4a16_mxfp4), over --quantization.",
        "moe_quant",
    ),
)  # fmt: skip

TRACE = (
    Flag("trace", S, "Trace to replay (Azure CSV, Mooncake JSONL, ServeGen).", "workload.trace"),
    Flag("max_requests", I, "Keep the first N requests of the trace.", "workload.max_requests"),
    Flag("rate_scale", F, "Multiply the trace's arrival rate.", "workload.rate_scale", shows=1.0),
    Flag("start_s", F, "Trace window start (s from first arrival).", "workload.start_s", shows=0.0),
    Flag("end_s", F, "Trace window end (s from first arrival).", "workload.end_s"),
)

SYNTHETIC = (
    Flag(
        "num_requests", I, "Synthetic: number of requests.", "workload.num_requests",
        vllm=("--num-prompts",),
    ),
    Flag(
        "rate", S, "Synthetic: arrival rate in req/s, or inf; cluster: the mix total.",
        "workload.rate", vllm=("--request-rate",), convert=_rate,
    ),
    Flag(
        "arrival_cv", F, "Synthetic: inter-arrival CV (1 = Poisson).", "workload.arrival_cv",
        shows=1.0,
    ),
    Flag(
        "burstiness", F,
        "Synthetic: Gamma shape of the gaps (vLLM), i.e. --arrival-cv 1/sqrt(B).",
        "workload.arrival_cv", vllm=("--burstiness",), convert=cv_of_burstiness,
    ),
    Flag(
        "prompt_len", I, "Synthetic: prompt length (location).", "workload.prompt_len",
        vllm=("--random-input-len",), shows=512,
    ),
    Flag(
        "output_len", I, "Synthetic: output length (location).", "workload.output_len",
        vllm=("--random-output-len",), shows=256,
    ),
)  # fmt: skip

LENGTHS = (
    Flag(
        "length_dist", S,
        "fixed|uniform|uniform-below|geometric|lognormal|empirical:NAME|empirical:PATH. "
        "Names: sharegpt (the 8k-filtered ShareGPT table of Vidur/Sarathi-Serve: whole "
        "conversations, mean 2,340 prompt / 439 output tokens — not vLLM's first-turn "
        "ShareGPT, ~200/200), arxiv, bwb.",
        "workload.length_dist", shows="fixed",
    ),
    Flag("max_prompt_len", I, "Cap prompt lengths.", "workload.max_prompt_len"),
    Flag("max_output_len", I, "Cap output lengths.", "workload.max_output_len"),
)  # fmt: skip

CONCURRENCY = (
    Flag(
        "concurrency", I, "Closed loop: requests kept in flight.", "workload.concurrency",
        vllm=("--max-concurrency",),
    ),
)  # fmt: skip

SCHEDULER = (
    Flag(
        "batching", S, f"Batching policy: {describe_batching()}.", "scheduler.batching",
        shows="mb",
    ),
    Flag(
        "ordering", S, f"Waiting-queue ordering: {ORDERINGS.describe(summaries=False)}.",
        "scheduler.ordering", shows="fcfs",
    ),
    Flag(
        "token_budget", I,
        "Max tokens per step (B; vLLM max_num_batched_tokens, SGLang chunked_prefill_size; also "
        "sizes the KV plan).",
        "scheduler.token_budget", decls=("--token-budget", "--chunked-prefill-size"),
        vllm=("--max-num-batched-tokens",), shows=8192,
    ),
    Flag(
        "max_seqs", I, "Max running requests (N; vLLM max_num_seqs, SGLang max_running_requests).",
        "scheduler.max_seqs", decls=("--max-seqs", "--max-running-requests"),
        vllm=("--max-num-seqs",), shows=256,
    ),
    Flag(
        "enable_mixed_chunk", bool,
        "SGLang --enable-mixed-chunk (--engine sglang only): decodes share the steps of "
        "prefill chunks (batching sglang).",
        "scheduler.enable_mixed_chunk", default=False, switch=True,
    ),
    Flag(
        "max_prefill_tokens", I,
        "SGLang --max-prefill-tokens (--engine sglang only; default 16384): a step's first "
        "prompt whole, further ones only within this cap (batching sglang).",
        "scheduler.max_prefill_tokens",
    ),
    Flag(
        "schedule_conservativeness", F,
        "SGLang --schedule-conservativeness (--engine sglang only; default 1.0): scales the "
        "KV its admission reserves for the running requests' output (new_token_ratio).",
        "scheduler.schedule_conservativeness",
    ),
    Flag(
        "scheduler_recv_interval", I,
        "SGLang --scheduler-recv-interval (--engine sglang only; default 1): new requests are "
        "received only every N decode steps, and right after a prefill step.",
        "scheduler.scheduler_recv_interval",
    ),
    Flag(
        "policy_module", list[str] | None,
        "Python file (or module name) imported before the policies are looked up, so that a "
        "policy it registers is selected by its name (repeatable).",
        "policy_modules", convert=_modules,
    ),
)  # fmt: skip

MEMORY = (
    Flag(
        "gpu_memory_utilization", F,
        "vLLM gpu_memory_utilization: share of the driver-reported memory planned.",
        "memory.gpu_memory_utilization", vllm=("--gpu-memory-utilization",), shows=0.9,
    ),
    Flag(
        "mem_fraction_static", F,
        "SGLang mem_fraction_static: (weights + KV pool) / GPU memory; the KV pool is that share "
        "less the weights (--engine sglang sets SGLang's default).",
        "memory.mem_fraction_static",
    ),
)  # fmt: skip

RUN = (
    Flag("slo_ttft", F, "TTFT SLO in seconds.", "slo.ttft_s", shows=2.0),
    Flag("slo_tpot", F, "TPOT SLO in seconds.", "slo.tpot_s", shows=0.2),
    Flag("seed", I, "Run seed.", "seed", shows=0),
    Flag(
        "no_fast_forward", bool, "Simulate every step.", "fast_forward",
        default=False, switch=False,
    ),
    Flag(
        "no_prefix_caching", bool, "Turn vLLM's prefix caching off.", "memory.prefix_caching",
        default=False, switch=False,
    ),
    Flag(
        "host_cache_gib", F, "Prefix cache: second tier in host memory per GPU, GiB (0: off).",
        "memory.host_cache_gib", shows=0.0,
    ),
)  # fmt: skip

INTERFERENCE = (
    Flag(
        "interference", bool | None,
        "Charge mixed steps the EB paper's prefill/decode interference (auto: only where "
        "measured, Qwen3-8B on H200 and RTX PRO 6000; on: bandwidth-derived elsewhere).",
        "interference", decls=("--interference/--no-interference",), shows="auto",
    ),
)  # fmt: skip

SIMULATE = FlagTable(
    DEPLOYMENT, PRECISION, TRACE, SYNTHETIC, LENGTHS, CONCURRENCY, AUGMENTED, SCHEDULER, MEMORY,
    RUN,
    PREFIXES, CLUSTER, INTERFERENCE, DISAGG,
)  # fmt: skip
"""``tidal simulate``: every flag but --out, --config and --plot."""


def axis(flag: Flag, help: str, key: str | None = None, name: str | None = None) -> Flag:
    """``flag`` as a ``tidal plan`` search axis: a comma list of values to try."""
    return dataclasses.replace(
        flag,
        name=name or flag.name,
        decls=flag.decls or (("--" + name.replace("_", "-"),) if name else ()),
        type=S,
        help=help,
        key=key or flag.key,
        shows=None,
        convert=_list,
        axis=True,
    )


_PLAN_BASE = FlagTable(
    TRACE, DEPLOYMENT[:1], DEPLOYMENT[3:4], DEPLOYMENT[5:7], PRECISION, MEMORY, SYNTHETIC,
    LENGTHS, CONCURRENCY
).flags  # fmt: skip
PLAN = FlagTable(
    (f.prefixed("base.") for f in _PLAN_BASE),
    (
        axis(DEPLOYMENT[1], "GPU types to consider, e.g. h100,h200,l40s.", name="gpus"),
        axis(DEPLOYMENT[2], "Tensor-parallel degrees, e.g. 1,2,4."),
        axis(SCHEDULER[0], "Batching policies (default: all)."),
        axis(SCHEDULER[1], "Request orderings (default: all)."),
        axis(SCHEDULER[2], "Token budgets, e.g. 512,8192."),
        axis(SCHEDULER[3], "Max running requests, e.g. 128,256."),
    ),
    (
        Flag("max_replicas", I, "Most replicas per option.", "max_replicas", shows=16),
        Flag(
            "router", S, "round-robin | least-loaded | prefix-aware.", "router",
            shows="round-robin",
        ),
        Flag("objective", S, "gpu_hours | dollars.", "objective", shows="gpu_hours"),
        Flag("top", I, "How many cheapest deployments to return.", "top", shows=5),
    ),
)  # fmt: skip
"""``tidal plan``: the workload flags of ``simulate`` under ``base.``, the deployment and
scheduler flags as search axes, and the planner's own keys."""


def vllm_grid_keys() -> dict[str, str]:
    """vLLM's names as ``sweep --grid`` keys → config keys (``burstiness``: see grid_key)."""
    out: dict[str, str] = {}
    keys: set[str | None] = set()
    for flag in SIMULATE:
        alternative = flag.key in keys  # --burstiness: another form of --arrival-cv
        keys.add(flag.key)
        for name in flag.vllm:
            grid = name.lstrip("-").replace("-", "_")
            if flag.key is not None and grid != flag.key and not alternative:
                out[grid] = flag.key
    return out
