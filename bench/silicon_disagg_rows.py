"""Disaggregated rows of aiconfigurator-core's ``systems/silicon_sample.csv`` → Tidal plans with a
``deployment`` section (issue 29; docs/design/disaggregation-speculation.md §6).

Each vLLM or SGLang ``disagg`` row becomes a :class:`silicon_rows.Plan` (its config has a
prefill and a decode pool) or a :class:`silicon_rows.Skip`, grouped as ``pd-unknown`` (the
row records no P:D worker counts: 433 DeepSeek-R1 rows), ``gpu``, ``model``, ``arch``,
``precision``, ``parallelism`` (PP, TP above a node, an instance of more GPUs than one node
holds — cross-node attention DP / wide EP —, a per-pool DP/EP layout the deployment schema
cannot set) or ``config``; the first obstacle counts, in that order.

Per pool: ``instances`` = the row's ``*_num_workers``, ``tp``, and the attention-DP / expert
layout of :func:`silicon_rows.parallel_settings`: where both pools have the same layout it is
the base config's (``pool_config`` copies it to both pools), where they differ it is set per
pool if ``PoolConfig`` has the keys, else the row is skipped. The rows' ``*_batch_size`` is
per DP rank (``decode_batch_size × decode_num_workers × decode_attention_dp_size`` equals the
recorded concurrency on every row that records both) and is the pool's ``max_seqs``
(``--max-num-seqs`` / ``--max-running-requests``; the simulator multiplies it by DP). The
concurrency C is ``silicon_concurrency`` in ``silicon_data_source``; the 7 Qwen3 rows of
NVIDIA's gap analysis record none and use that product (noted). KV transfer: the engine's
connector — vLLM pull (NixlConnector), SGLang push (Mooncake, layer-wise) — over the link
``auto`` picks between the pools. Everything else as ``bench/silicon.py`` (client, prefix
caching off, quantization and KV dtype of the row, engine and version), but the SGLang
DeepSeek rows on Blackwell, whose recipes run an FP8 KV cache (:data:`RECIPE_KV_FP8`).
"""

from __future__ import annotations

import csv
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from silicon_rows import (
    ENGINES,
    Plan,
    Row,
    Skip,
    _int,
    engine_settings,
    kv_settings,
    parallel_settings,
    resolve_row,
    scheduler_defaults,
    source_client_ratio,
)

MAX_INSTANCE_GPUS = 8
"""GPUs of one instance (tp × attention DP) priced from single-node tables: an 8-GPU
NVLink node (the NCCL tables are measured within one; multi-node EP is untested)."""

PROTOCOL = {"vllm": "pull", "sglang": "push"}
"""The engines' KV connectors (design §1.1): vLLM's NixlConnector pulls after the prefill,
SGLang's Mooncake backend pushes layer by layer."""

ROW_DTYPES = frozenset({"moonshotai/Kimi-K2.5"})
"""Models whose rows are priced at the row's own GEMM/MoE dtypes even where the checkpoint has
weights of the same width (issue 28's rule keeps the checkpoint's): Kimi-K2.5's ``nvfp4``
rows (vLLM 0.18 on GB200) are taken at their word — an NVFP4 checkpoint served with NVFP4
kernels — not the base checkpoint's INT4 weight-only experts (W4A16 kernels)."""

RECIPE_KV_FP8 = frozenset(
    ("sglang", "deepseek-ai/DeepSeek-V3", gpu) for gpu in ("b200", "gb200", "gb300")
)
"""(engine, model, GPU) whose disaggregated rows ran an FP8 KV cache: the SGLang DeepSeek-R1
recipes the rows were measured with (NVIDIA's srt-slurm ``recipes/{b200,gb200,gb300}-{fp4,fp8}/
…``, named by InferenceX's ``nvidia-master.yaml`` for the ``dsr1-*-dynamo-sglang`` configs)
set ``kv-cache-dtype: fp8_e4m3`` on both pools; their H200 recipes leave it to the model dtype.
The sample does not record the KV dtype; AIConfigurator assumes FP8 for every FP8/NVFP4
checkpoint."""

POOL_KEYS = ("data_parallel_size", "enable_expert_parallel", "moe_tp_size")
"""Parallel settings that may differ between the pools."""


@dataclass(frozen=True)
class Pool:
    """One side of a disaggregated row (``None`` workers: not recorded)."""

    workers: int | None
    tp: int
    attention_dp: int
    moe_tp: int
    moe_ep: int
    batch: int | None


@dataclass(frozen=True)
class DisaggRow:
    """A disaggregated measurement: the shared columns (``row``, whose ``concurrency`` is C
    and whose parallel columns are the decode pool's) and the two pools."""

    row: Row
    prefill: Pool
    decode: Pool
    concurrency_recorded: bool

    @property
    def text(self) -> str:
        return self.row.text

    @property
    def split(self) -> str:
        """``P×tpA:D×tpB`` (``?`` where the workers are not recorded)."""
        p, d = self.prefill, self.decode
        return f"{p.workers or '?'}xTP{p.tp}:{d.workers or '?'}xTP{d.tp}"


def _pool(r: dict[str, str], side: str) -> Pool:
    tp = _int(r[f"{side}_tp_size"])
    workers = r[f"{side}_num_workers"].strip()
    batch = r[f"{side}_batch_size"].strip()
    moe_tp = _int(r[f"{side}_moe_tp_size"], tp) or tp  # vLLM rows record 0: not set
    return Pool(
        _int(workers) if workers else None, tp, _int(r[f"{side}_attention_dp_size"]),
        moe_tp, max(1, _int(r[f"{side}_moe_ep_size"])), _int(batch) if batch else None,
    )  # fmt: skip


def _concurrency(r: dict[str, str], decode: Pool) -> tuple[int, bool]:
    m = re.search(r"silicon_concurrency=(\d+)", r["silicon_data_source"])
    if m:
        return int(m.group(1)), True
    return (decode.batch or 1) * (decode.workers or 1) * decode.attention_dp, False


def read_disagg_rows(path: Path) -> list[DisaggRow]:
    """The vLLM and SGLang disaggregated rows, in file order."""
    rows = []
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            if r["backend"] not in ENGINES or r["mode"] != "disagg":
                continue
            pre, dec = _pool(r, "prefill"), _pool(r, "decode")
            c, recorded = _concurrency(r, dec)
            base = Row(
                r["id"], r["silicon_data_source"], r["backend"], r["backend_version"],
                r["model_path"], r["system"], r["precision"] or "bf16", r["gemm_quant_mode"],
                r["moe_quant_mode"], _int(r["isl"]), _int(r["osl"]), c, dec.tp,
                _int(r["prefill_pp_size"]) * _int(r["decode_pp_size"]), dec.attention_dp,
                dec.moe_tp, dec.moe_ep, float(r["silicon_ttft_ms"]), float(r["silicon_tpot_ms"]),
            )  # fmt: skip
            rows.append(DisaggRow(base, pre, dec, recorded))
    return rows


def pool_fields() -> set[str]:
    """Keys of today's deployment pool (``PoolConfig``)."""
    from tidal.sim.deployment import PoolConfig

    return set(PoolConfig.model_fields)


def _pool_parallel(
    d: DisaggRow, side: str, fields: set[str], moe: bool
) -> tuple[dict[str, Any], str]:
    pool: Pool = getattr(d, side)
    gpus = pool.tp * pool.attention_dp
    if pool.tp > MAX_INSTANCE_GPUS:
        return {}, f"{side} TP {pool.tp} > {MAX_INSTANCE_GPUS}: cross-node TP (no table)"
    if gpus > MAX_INSTANCE_GPUS:
        return {}, (
            f"{side} instance of {gpus} GPUs (TP {pool.tp} × attention DP {pool.attention_dp}): "
            f"cross-node attention DP / wide EP (> {MAX_INSTANCE_GPUS} GPUs, untested)"
        )
    row = dataclasses.replace(
        d.row, tp=pool.tp, attention_dp=pool.attention_dp, moe_tp=pool.moe_tp,
        moe_ep=pool.moe_ep,
    )  # fmt: skip
    par, why = parallel_settings(row, fields, moe)
    return par, (f"{side}: {why}" if why else "")


def deployment_settings(
    d: DisaggRow, fields: set[str], pfields: set[str], moe: bool, prefill_batch: bool = True
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(base config updates, ``deployment`` section, skip reason or ""). ``prefill_batch``
    False leaves the prefill pool's ``max_seqs`` to the engine's default (the row's prefill
    batch size, 1 on every row, is AIConfigurator's model of a prefill step)."""
    pre, why = _pool_parallel(d, "prefill", fields, moe)
    if why:
        return {}, {}, why
    dec, why = _pool_parallel(d, "decode", fields, moe)
    if why:
        return {}, {}, why
    rest = {k: v for k, v in dec.items() if k != "tp"}
    pools: dict[str, dict[str, Any]] = {"prefill": {}, "decode": {}}
    if {k: v for k, v in pre.items() if k != "tp"} != rest:
        missing = [k for k in POOL_KEYS if (k in pre or k in dec) and k not in pfields]
        if missing:
            return {}, {}, (
                f"per-pool attention DP / EP differ (prefill {_layout(d.prefill)}, decode "
                f"{_layout(d.decode)}): deployment pools have no {', '.join(missing)}"
            )
        for side, par in (("prefill", pre), ("decode", dec)):
            pools[side].update({k: v for k, v in par.items() if k != "tp"})
        rest = {}
    for side in ("prefill", "decode"):
        pool: Pool = getattr(d, side)
        pools[side].update(instances=pool.workers, tp=pool.tp)
        if pool.batch and (side == "decode" or prefill_batch):
            pools[side]["scheduler"] = {"max_seqs": pool.batch}
    dep = {**pools, "kv_transfer": {"protocol": PROTOCOL[d.row.engine]}}
    return rest, dep, ""


def _layout(p: Pool) -> str:
    return f"TP {p.tp} DP {p.attention_dp} moe_tp {p.moe_tp} EP {p.moe_ep}"


def plan_disagg_row(
    d: DisaggRow,
    fields: set[str],
    pfields: set[str],
    perf_model: str = "engine",
    engine: str = "row",
    version: str = "row",
    prefill_batch: bool = True,
    request_overhead: str = "dynamo",
) -> Plan | Skip:
    """The row's config with its deployment, or why it is skipped (module docstring).
    ``request_overhead`` is the deployment's ``request_overhead_ms`` (``dynamo``: the measured
    latency of the rows' serving path, ``sim/disagg_overhead.py``; ``0``: none)."""
    row = d.row
    if d.prefill.workers is None or d.decode.workers is None:
        return Skip(row, "pd-unknown", "P:D worker counts not recorded")
    got = resolve_row(row, fields)
    if isinstance(got, Skip):
        return got
    gpu, model, moe, quant = got
    if row.model in ROW_DTYPES and {"gemm_quant", "moe_quant"} <= fields:
        quant = {k: v for k, v in (("gemm_quant", row.gemm_quant), ("moe_quant", row.moe_quant))
                 if v}  # fmt: skip
    quant.update(kv_settings(row, fields))
    recipe = (row.engine, row.model, gpu.partition("@")[0])
    if recipe in RECIPE_KV_FP8 and "kv_cache_dtype" in fields:
        quant["kv_cache_dtype"] = "fp8"
    if row.pp > 1:
        return Skip(row, "parallelism", f"pp {row.pp}: not a simulator setting in a pool")
    base, dep, why = deployment_settings(d, fields, pfields, moe, prefill_batch)
    if why:
        return Skip(row, "parallelism", why)
    if request_overhead not in ("0", "0.0"):  # (0 leaves the key out: older code runs too)
        dep["request_overhead_ms"] = request_overhead
    c = row.concurrency
    eng = engine_settings(row, fields, engine, version, perf_model)
    sched = scheduler_defaults(row.engine, gpu, c)
    cfg: dict[str, Any] = {
        "model": model,
        "gpu": gpu,
        "perf_model": perf_model,
        "tp": d.decode.tp,
        **base,
        **quant,
        **eng,
        "workload": {
            "num_requests": 10 * c,
            "concurrency": c,
            "prompt_len": row.isl,
            "output_len": row.osl,
        },
        "scheduler": {"max_seqs": sched["max_seqs"]} if eng else sched,
        "deployment": dep,
    }
    notes = [] if d.concurrency_recorded else [f"C not recorded: decode batch × workers × DP = {c}"]
    return Plan(row, cfg, notes, source_client_ratio(row))
