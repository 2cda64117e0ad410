"""Rows of aiconfigurator-core's ``systems/silicon_sample.csv`` → Tidal simulation plans (issue 28).

Each vLLM or SGLang aggregated row becomes either a :class:`Plan` (a ``SimulationConfig`` dict
plus the client's workload) or a :class:`Skip` naming why Tidal cannot run it, grouped as
``gpu``, ``model``, ``arch``, ``precision``, ``parallelism`` or ``config``. Checks follow that
order, so a row is counted under its first obstacle.

What the sample does not record, and what is assumed (stated in ``bench/silicon.py``):

* the client: InferenceX's ``benchmark_serving.py`` (the rows with ``db-dump`` / InferenceX
  provenance; AIConfigurator's own replay of the sample uses the same workload): lengths
  uniform on ``[⌊r·L⌋, L]`` with ``--random-range-ratio r = 0.8``, ``10·C`` prompts,
  ``--max-concurrency C``, ``--request-rate inf``, ``--ignore-eos``, ``2·C`` warm-ups of the
  first prompt; mean TTFT and mean per-request TPOT = (E2E − TTFT) / (output − 1);
* the server: prefix caching off (both engines' InferenceX recipes); until the simulator has
  an ``engine`` setting, the engine's scheduler defaults (:func:`scheduler_defaults`); the KV
  cache dtype of the checkpoint served where the version applies it (:func:`kv_settings`);
* a source whose measurements show a fixed-length client replays with one
  (:data:`FIXED_LENGTH_SOURCES`).

Fields the simulator does not know yet (engine, version, quantization, PP, DP/EP) are looked
up in the config schema, so the plan uses them as soon as they exist and skips the row until
then.
"""

from __future__ import annotations

import csv
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from silicon_layout import served_layout, total_concurrency
from silicon_recipes import kv_cache_dtype, scheduler_recv_interval

ENGINES = ("vllm", "sglang")

GPU_IDS = {
    "h100_sxm": "h100",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200": "gb200",
    "gb300": "gb300",
    "a100_sxm": "a100-80gb",
    "l40s": "l40s",
    "rtx_pro_6000_server": "rtx-pro-6000",
}
"""The sample's ``system`` ids → Tidal GPU names (the GPU must also be in Tidal's catalog)."""

MODEL_ALIASES = {
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "nvidia/Llama-3.1-70B-Instruct-FP8": "llama-3.1-70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "Qwen/Qwen3-8B": "qwen3-8b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
}
"""Hugging Face ids → today's catalog ids, tried after the id itself (which ``--model`` takes
once Hugging Face configs are supported)."""

QUANT_VLLM = {"fp8": "fp8", "fp8_block": "fp8", "nvfp4": "modelopt_fp4", "int4_wo": "awq"}
"""The sample's ``gemm_quant_mode`` → vLLM ``--quantization`` names (``fp8_block``: vLLM
reads the block size from the checkpoint; ``int4_wo``: weight-only INT4, Kimi-K2.5's)."""

FIELD_CANDIDATES = {
    "engine": ("engine",),
    "engine_version": ("engine_version",),
    "quantization": ("quantization",),
    "pp": ("pipeline_parallel_size", "pp"),
    "dp": ("data_parallel_size", "dp"),
    "ep": ("enable_expert_parallel", "expert_parallel"),
    "moe_tp": ("moe_tp_size", "moe_tp"),
    "moe_ep": ("moe_ep_size", "moe_ep"),
}
"""Config keys that may carry each setting; the first that the schema has is used."""


@dataclass(frozen=True)
class Row:
    """One measurement: the columns a replay needs."""

    id: str
    source: str
    engine: str
    version: str
    model: str
    system: str
    precision: str
    gemm_quant: str
    moe_quant: str
    isl: int
    osl: int
    concurrency: int
    """The client's ``--max-concurrency``: ``batch_size × attention_dp_size``."""
    tp: int
    pp: int
    attention_dp: int
    moe_tp: int
    moe_ep: int
    ttft_ms: float
    tpot_ms: float

    @property
    def text(self) -> str:
        """What ``--filter`` matches against."""
        parts = (self.id, self.engine, self.version, self.model, self.system, self.precision)
        return " ".join(parts)


@dataclass
class Plan:
    row: Row
    config: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    client_ratio: float | None = None
    """The client's ``--random-range-ratio`` where the row's source fixes it
    (:func:`source_client_ratio`); None: the bench's ``--range-ratio``."""


@dataclass(frozen=True)
class Skip:
    row: Row
    group: str
    reason: str


FIXED_LENGTH_SOURCES = (
    "aic-auto-gap-analysis/data/h100_sxm/sglang/0.5.1.post1/",
    "aic-auto-gap-analysis/data/h200_sxm/sglang/0.5.6.post2/Qwen_Qwen3-235B-A22B-FP8.csv",
)
"""Sources whose client sent exactly the nominal lengths (a fixed-length closed loop, which
stays in lockstep: docs/design/closed_loop.md). The sample does not record the client; the
measurements say it (docs/design/sglang_rows.md). NVIDIA's gap-analysis benchmark template
(AIConfigurator's generator, ``bench_run.sh.j2``) runs ``aiperf --isl-stddev 0 --osl-stddev 0``
with ``2·C`` warm-ups: fixed lengths; a source is listed only where its rows show the cohorts.

SGLang 0.5.6.post2, Qwen3-235B-A22B-FP8 on H200: at TP 2, C = 2, ISL 4000 the TTFT (639–647
ms) and TPOT (16.5–17.2 ms) are the same at every OSL from 100 to 2000; spread re-sends would
add the other client's prefill to a 100-token request's decode (≥ +14 %, bound derived in
``tests/test_silicon_bench.py``): the two are prefilled together. Its Llama-3.1-8B rows keep
the bench's client: with fixed lengths the simulator's cohort is all C (20–512) clients and
their TTFT comes out 2–6× too long (docs/design/sglang_rows.md).

SGLang 0.5.1, Qwen3-32B on H100: NVIDIA's gap analysis measured it with SGLang 0.5.1 and
with vLLM 0.12 at the same 34 (TP, ISL, OSL, C) points: a request's lifetime TTFT + (OSL − 1)·
TPOT agrees within 5 % (median ratio 0.95, so the GPUs did the same work), but SGLang's TTFT
is 4.5× vLLM's and its TPOT 0.73× (medians), growing with C (2.1–6.6×): the split of a loop
whose clients re-send in cohorts (each TTFT holds a cohort's prefill, decode steps run
without prefills), not of one whose re-sends spread over the cycle. The vLLM rows of the
same analysis show no such split and keep the bench's client (``--range-ratio``)."""


def source_client_ratio(row: Row) -> float | None:
    """0.0 (exactly fixed lengths) for a row of :data:`FIXED_LENGTH_SOURCES`, else None."""
    return 0.0 if any(s in row.source for s in FIXED_LENGTH_SOURCES) else None


def sample_path() -> Path:
    """The installed package's ``silicon_sample.csv``."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("aiconfigurator-core is not installed (pip install aiconfigurator-core)")
    return Path(next(iter(spec.submodule_search_locations))) / "systems" / "silicon_sample.csv"


def _int(v: str, default: int = 1) -> int:
    return int(float(v)) if v.strip() else default


def read_rows(path: Path) -> list[Row]:
    """The vLLM and SGLang aggregated rows, in file order."""
    rows = []
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            if r["backend"] not in ENGINES or r["mode"] != "agg":
                continue
            tp = _int(r["tp_size"])
            rows.append(
                Row(
                    r["id"], r["silicon_data_source"], r["backend"], r["backend_version"],
                    r["model_path"], r["system"], r["precision"] or "bf16",
                    r["gemm_quant_mode"], r["moe_quant_mode"], _int(r["isl"]), _int(r["osl"]),
                    total_concurrency(_int(r["batch_size"]), _int(r["attention_dp_size"])),
                    tp, _int(r["pp_size"]), _int(r["attention_dp_size"]),
                    _int(r["moe_tp_size"], tp), _int(r["moe_ep_size"]),
                    float(r["silicon_ttft_ms"]), float(r["silicon_tpot_ms"]),
                )
            )  # fmt: skip
    return rows


def config_fields() -> set[str]:
    """Top-level keys of today's ``SimulationConfig``."""
    from tidal.sim.config import SimulationConfig

    return set(SimulationConfig.model_fields)


def _field(fields: set[str], what: str) -> str | None:
    return next((k for k in FIELD_CANDIDATES[what] if k in fields), None)


def resolve_gpu(row: Row) -> tuple[str | None, str]:
    from tidal.core.errors import ConfigError
    from tidal.hardware.gpus import get_gpu

    name = GPU_IDS.get(row.system)
    if name is None:
        return None, f"{row.system}: no Tidal name"
    try:
        get_gpu(name)
    except ConfigError:
        return None, f"{row.system} ({name}) not in Tidal's GPU catalog"
    return name, ""


def resolve_model(row: Row) -> tuple[str | None, str, str]:
    """(model name, skip group, reason): the id itself, else its catalog alias."""
    from tidal.core.errors import ConfigError
    from tidal.hardware.models import get_model

    first = ""
    for name in (row.model, MODEL_ALIASES.get(row.model)):
        if name is None:
            continue
        try:
            get_model(name)
            return name, "", ""
        except (ConfigError, OSError, ValueError) as err:
            msg = str(err)
            if "architecture" in msg.lower():
                return None, "arch", f"{row.model}: {msg.splitlines()[0]}"
            first = first or msg.splitlines()[0]
    return None, "model", f"{row.model} not in the catalog"


def _is_moe(name: str) -> bool:
    from tidal.hardware.models import get_model

    return bool(getattr(get_model(name), "is_moe", False))


def dtype_bits(dtype: str) -> int:
    """Weight bits of a dtype name (vLLM's or the tables'): 16, 8 or 4."""
    d = dtype.lower()
    if d in ("", "auto", "bf16", "bfloat16", "float16", "fp16"):
        return 16
    return 4 if any(t in d for t in ("fp4", "int4", "w4")) else 8


def checkpoint_dtypes(model: str) -> tuple[str, str]:
    """(GEMM dtype, expert dtype) of the resolved model's checkpoint ("" where the spec has
    no precision fields: bf16)."""
    from tidal.hardware.models import get_model

    spec = get_model(model)
    return str(getattr(spec, "gemm_quant", "") or ""), str(getattr(spec, "moe_quant", "") or "")


def precision_settings(
    row: Row, fields: set[str], bf16_fallback: bool, model: str, moe: bool = False
) -> tuple[dict, str]:
    """(config updates, skip reason or ""). bf16 rows need nothing. A quantized row whose
    checkpoint already has weights of the same width keeps the checkpoint's dtypes (the
    sample's labels are AIConfigurator's: ``nvfp4`` for gpt-oss's MXFP4 experts, ``fp8`` for
    MiniMax's block FP8); otherwise (a quantized variant of a bf16 checkpoint was served, or
    FP4 of an FP8 one) it sets the row's dtypes: ``gemm_quant`` (and ``moe_quant`` for a MoE
    model) where the config has them, else vLLM's ``quantization`` name. ``bf16_fallback``
    runs it as bf16 instead."""
    quant = row.gemm_quant or row.moe_quant
    if dtype_bits(quant) == 16 or bf16_fallback:
        return {}, ""
    gemm, experts = checkpoint_dtypes(model)
    served = (row.moe_quant or quant) if moe else quant
    if dtype_bits((experts if moe else gemm) or gemm) == dtype_bits(served):
        return {}, ""  # the checkpoint's own dtypes
    if "gemm_quant" in fields:
        out = {"gemm_quant": row.gemm_quant} if row.gemm_quant else {}
        if moe and row.moe_quant and "moe_quant" in fields:
            out["moe_quant"] = row.moe_quant
        return out, ""
    key = _field(fields, "quantization")
    if key is None:
        return {}, f"{quant} weights: the simulator has bf16 only (no quantization setting)"
    name = QUANT_VLLM.get(quant)
    if name is None:
        return {}, f"gemm_quant_mode {quant!r} has no vLLM quantization name here"
    return {key: name}, ""


SERVED_CHECKPOINTS = {("MiniMaxAI/MiniMax-M2.5", "nvfp4"): "nvidia/MiniMax-M2.5-NVFP4"}
"""(model, ``gemm_quant_mode``) of a row → the checkpoint it served where the sample names the
base model: NVIDIA's ModelOpt checkpoint of that quantization (what InferenceX's recipes
serve). Only checkpoints whose ``hf_quant_config.json`` the package ships are listed."""

CHECKPOINT_KV_SINCE = {"vllm": "0.13.0"}
"""The first engine version whose ``--kv-cache-dtype auto`` takes a ModelOpt checkpoint's
``kv_cache_quant_algo`` (vLLM pull request 29980, "Load kv-cache dtype from
hf_quant_config.json automatically", merged 2025-12 after 0.12.0; before it ``auto`` meant the
model dtype unless ``--kv-cache-dtype fp8`` was given)."""


def kv_settings(row: Row, fields: set[str]) -> dict[str, str]:
    """``kv_cache_dtype: fp8`` where the served checkpoint (:data:`SERVED_CHECKPOINTS`) asks
    for an FP8 KV cache and the row's engine version honours it under ``auto``
    (:data:`CHECKPOINT_KV_SINCE`; a nightly build does); else nothing (the model dtype)."""
    from tidal.hardware.engine_data import version_key
    from tidal.hardware.models import get_model

    served = SERVED_CHECKPOINTS.get((row.model, row.gemm_quant or row.moe_quant))
    since = CHECKPOINT_KV_SINCE.get(row.engine)
    if served is None or since is None or "kv_cache_dtype" not in fields or not row.version:
        return {}
    if not row.version.startswith("nightly") and version_key(row.version) < version_key(since):
        return {}
    kv = get_model(served).kv_cache_dtype
    return {"kv_cache_dtype": kv} if kv.startswith("fp8") else {}


def parallel_settings(row: Row, fields: set[str], moe: bool) -> tuple[dict, str]:
    """(config updates, skip reason or ""): TP always; PP, attention DP and expert parallelism
    where the schema has them. A dense model ignores the MoE columns. vLLM's MoE layout: with
    EP the experts span the TP × DP ranks (``moe_tp = 1``, ``moe_ep = tp·dp``), without it
    ``moe_tp = tp``; a hybrid (both > 1, SGLang's) needs ``moe_tp_size`` / ``moe_ep_size``."""
    out: dict[str, Any] = {"tp": row.tp}
    for what, n in (("pp", row.pp), ("dp", row.attention_dp)):
        if n > 1:
            key = _field(fields, what)
            if key is None:
                return {}, f"{FIELD_CANDIDATES[what][0]} {n}: not a simulator setting yet"
            out[key] = n
    if not moe or (row.moe_ep <= 1 and row.moe_tp in (row.tp, row.tp * row.attention_dp)):
        return out, ""
    if row.moe_tp * row.moe_ep != row.tp * row.attention_dp:
        ranks = f"tp {row.tp} × dp {row.attention_dp}"
        return {}, f"moe_tp {row.moe_tp} × moe_ep {row.moe_ep} ≠ {ranks}"
    tp_key, ep_key = _field(fields, "moe_tp"), _field(fields, "moe_ep")
    if tp_key is not None and ep_key is not None:
        return {**out, tp_key: row.moe_tp, ep_key: row.moe_ep}, ""
    if tp_key is not None and row.moe_tp > 1:  # EP is what the group leaves: tp·dp / moe_tp
        return {**out, tp_key: row.moe_tp}, ""
    key = _field(fields, "ep")
    if row.moe_tp == 1 and key is not None:
        return {**out, key: True}, ""
    what = "expert parallel" if row.moe_tp == 1 else "hybrid MoE TP × EP"
    return {}, f"{what} (moe_tp {row.moe_tp}, moe_ep {row.moe_ep}): not a simulator setting yet"


def engine_settings(
    row: Row, fields: set[str], engine: str, version: str, perf_model: str
) -> dict:
    """``engine`` / ``engine_version`` where the schema has them: ``row`` takes the row's,
    ``default`` leaves it out. The version selects measured tables, so it is passed with
    ``perf_model: engine`` or ``auto`` only (``auto`` reads the tables where the GPU has
    them, issue 28; an empty one is left to the simulator's newest)."""
    out: dict[str, Any] = {}
    key = _field(fields, "engine")
    if key is not None and engine != "default":
        out[key] = row.engine if engine == "row" else engine
    key = _field(fields, "engine_version")
    if key is not None and version != "default" and perf_model in ("engine", "auto"):
        v = row.version if version == "row" else version
        if v:
            out[key] = v
    return out


def scheduler_defaults(engine: str, gpu: str, concurrency: int) -> dict[str, int]:
    """Chunked-prefill budget and running-request cap (the budget is used only where the
    simulator has no engine setting of its own). vLLM: 8192 tokens (``vllm serve``'s default
    on GPUs of ≥ 70 GiB other than A100, else 2048; InferenceX's recipes set 8192), at most C
    running (their ``--max-num-seqs C``). SGLang: ``chunked_prefill_size`` by GPU memory
    (< 35 GB 2048, < 160 GB 8192, else 16384: ``server_args``), max(256, C) running."""
    from tidal.hardware.gpus import get_gpu

    gib = get_gpu(gpu).mem_bytes / 2**30
    if engine == "sglang":
        budget = 2048 if gib < 35 else 8192 if gib < 160 else 16384
        seqs = max(256, concurrency)
    else:
        budget = 8192 if gib >= 70 and not gpu.startswith("a100") else 2048
        seqs = concurrency
    return {"token_budget": max(budget, seqs), "max_seqs": seqs}


def resolve_row(
    row: Row, fields: set[str], bf16_fallback: bool = False
) -> tuple[str, str, bool, dict] | Skip:
    """The row's GPU, model, whether it is MoE and its precision settings, or the first of
    them that cannot be expressed (groups ``gpu``, the model's, ``precision``)."""
    gpu, why = resolve_gpu(row)
    if gpu is None:
        return Skip(row, "gpu", why)
    model, group, why = resolve_model(row)
    if model is None:
        return Skip(row, group, why)
    moe = _is_moe(model)
    quant, why = precision_settings(row, fields, bf16_fallback, model, moe)
    if why:
        return Skip(row, "precision", why)
    return gpu, model, moe, quant


def plan_row(
    row: Row,
    fields: set[str],
    perf_model: str = "auto",
    engine: str = "row",
    version: str = "row",
    bf16_fallback: bool = False,
    recorded_layout: bool = False,
) -> Plan | Skip:
    """The row's config, or why it is skipped (first obstacle in the order of the groups).
    The parallel layout is the one that ran (``silicon_layout.served_layout``), or the
    columns as written with ``recorded_layout``."""
    got = resolve_row(row, fields, bf16_fallback)
    if isinstance(got, Skip):
        return got
    gpu, model, moe, quant = got
    if not bf16_fallback:
        quant.update(kv_settings(row, fields))
    served, layout = (row, "") if recorded_layout else served_layout(row)
    par, why = parallel_settings(served, fields, moe)
    if why:
        return Skip(row, "parallelism", why)
    c = row.concurrency
    eng = engine_settings(row, fields, engine, version, perf_model)
    cfg: dict[str, Any] = {
        "model": model,
        "gpu": gpu,
        "perf_model": perf_model,
        **par,
        **quant,
        **eng,
        # the benchmark ran without prefix caching; synthetic lengths carry no prompt content,
        # so nothing is cached here either (and turning the cache off is refused as a no-op)
        "workload": {
            "num_requests": 10 * c,
            "concurrency": c,
            "prompt_len": row.isl,
            "output_len": row.osl,
        },
    }
    sched = scheduler_defaults(row.engine, gpu, c)
    # with an engine setting the simulator applies that engine's chunked-prefill size itself
    cfg["scheduler"] = {"max_seqs": sched["max_seqs"]} if eng else sched
    notes = ["bf16 stand-in for " + row.gemm_quant] if bf16_fallback and row.gemm_quant else []
    recv = scheduler_recv_interval(served) if eng.get("engine") == "sglang" else None
    if recv is not None:  # the InferenceX recipe's flag (silicon_recipes)
        cfg["scheduler"]["scheduler_recv_interval"] = recv
        notes.append(f"scheduler-recv-interval {recv} (InferenceX recipe)")
    kv = kv_cache_dtype(served) if eng.get("engine") == "sglang" else None
    if kv is not None and "kv_cache_dtype" in fields and "kv_cache_dtype" not in cfg:
        cfg["kv_cache_dtype"] = kv
        notes.append(f"kv-cache-dtype {kv} (InferenceX recipe)")
    notes += [layout] if layout else []
    return Plan(row, cfg, notes, source_client_ratio(row))
