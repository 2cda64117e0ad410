"""Per-request columns, the TTFT breakdown and the per-pool summary of a disaggregated run
(docs/design/disaggregation-speculation.md §1.5).

``requests.parquet`` gains, in disaggregated runs only (so single-pool digests are unchanged):
``prefill_instance``, ``decode_instance`` (pool-local indices), ``prefill_start_ns`` (first
prefill chunk scheduled), ``prefill_end_ns`` (the prefill leg's token), ``kv_transfer_start_ns``
(decode blocks allocated, transfer started), ``kv_transfer_end_ns`` (last byte + latency) and
``kv_transfer_bytes``; ``first_token_ns`` is the decode instance's first token. The breakdown
telescopes to TTFT exactly, each term ≥ 0::

    queue        = prefill_start − arrival
    prefill      = prefill_end − prefill_start
    kv_wait      = kv_transfer_start − prefill_end     (decode admission: KV space, max_seqs)
    transfer     = kv_transfer_end − kv_transfer_start
    first_decode = first_token − kv_transfer_end       (the 1-token recompute step and its wait)

With ``deployment.request_overhead_ms`` > 0 a ``handoff_ns`` column (the latency, per request
that reached it) is added and ``handoff`` is its own term, taken out of the one it sits in:
``kv_wait`` (pull: prefill end → decode leg delivered) or ``queue`` (push: decode blocks →
prefill leg delivered). Without it the columns and terms are as above.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tidal.core.histogram import LogHistogram
from tidal.core.metrics import summarize
from tidal.core.request import Request
from tidal.engine.spec_pool import spec_metrics
from tidal.engine.stats import PolicyStats
from tidal.hardware.calibration import client_side_metrics, perf_model_source
from tidal.sim.config import SimulationConfig
from tidal.sim.disagg_augment import augmented_disagg_metrics
from tidal.sim.recorder import RequestRecorder
from tidal.sim.single import SimResult

if TYPE_CHECKING:
    from tidal.hardware.memory import MemoryPlan
    from tidal.hardware.perf import PerfModel
    from tidal.sim.disagg_wiring import DisaggWiring
    from tidal.sim.instance import SimInstance

    Pool = tuple[SimulationConfig, list[SimInstance], list[tuple[Any, PerfModel, MemoryPlan]]]

COLUMNS = (
    "prefill_instance",
    "decode_instance",
    "prefill_start_ns",
    "prefill_end_ns",
    "kv_transfer_start_ns",
    "kv_transfer_end_ns",
    "kv_transfer_bytes",
)
PARTS = ("queue", "prefill", "kv_wait", "transfer", "first_decode")
"""The TTFT breakdown, in order (module docstring)."""


class DisaggColumns:
    """The disaggregation columns, indexed by request id (−1: not reached; bytes: 0)."""

    def __init__(self, n: int, push: bool = False, handoff: bool = False) -> None:
        self.names = (*COLUMNS, "decode_alloc_ns") if push else COLUMNS
        """``decode_alloc_ns`` (push only): the decode blocks reserved, before the prefill."""
        if handoff:
            self.names = (*self.names, "handoff_ns")
        for name in self.names:
            fill = 0 if name == "kv_transfer_bytes" else -1
            setattr(self, name, np.full(n, fill, dtype=np.int64))
        self.prefill_instance: np.ndarray
        self.decode_instance: np.ndarray
        self.prefill_start_ns: np.ndarray
        self.prefill_end_ns: np.ndarray
        self.kv_transfer_start_ns: np.ndarray
        self.kv_transfer_end_ns: np.ndarray
        self.kv_transfer_bytes: np.ndarray
        self.decode_alloc_ns: np.ndarray
        self.handoff_ns: np.ndarray

    def prefill_done(self, leg: Request, instance: int) -> None:
        rid = leg.request_id
        self.prefill_instance[rid] = instance
        self.prefill_start_ns[rid] = leg.first_scheduled_ns
        self.prefill_end_ns[rid] = leg.finish_ns

    def transfer_started(self, rid: int, now_ns: int, nbytes: float) -> None:
        self.kv_transfer_start_ns[rid] = now_ns
        self.kv_transfer_bytes[rid] = round(nbytes)

    def columns(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self.names}


def ttft_breakdown(cols: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The TTFT terms (ns) of every request that got its first token, in row order: the five
    of :data:`PARTS`, and ``handoff`` where the run has a request overhead (module docstring)."""
    parts = _breakdown(cols)
    if "handoff_ns" not in cols:
        return parts
    done = np.asarray(cols["first_token_ns"]) >= 0
    h = np.asarray(cols["handoff_ns"])[done]
    host = "queue" if "decode_alloc_ns" in cols else "kv_wait"  # the term it sits in
    parts[host] = parts[host] - h
    order = [*(("kv_wait", "handoff") if host == "queue" else ("queue", "prefill", "handoff"))]
    return {k: h if k == "handoff" else parts[k] for k in dict.fromkeys([*order, *parts])}


def _breakdown(cols: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The five terms of :data:`PARTS` (a request overhead inside its host term)."""
    done = np.asarray(cols["first_token_ns"]) >= 0
    t = {k: np.asarray(cols[k])[done] for k in (
        "arrival_ns", "prefill_start_ns", "prefill_end_ns", "kv_transfer_start_ns",
        "kv_transfer_end_ns", "first_token_ns")}  # fmt: skip
    if "decode_alloc_ns" in cols:  # push: decode blocks first, the KV streams with the prefill
        alloc = np.asarray(cols["decode_alloc_ns"])[done]
        return {
            "queue": t["prefill_start_ns"] - alloc,
            "prefill": t["prefill_end_ns"] - t["prefill_start_ns"],
            "kv_wait": alloc - t["arrival_ns"],
            "transfer": t["kv_transfer_end_ns"] - t["prefill_end_ns"],
            "first_decode": t["first_token_ns"] - t["kv_transfer_end_ns"],
        }
    return {
        "queue": t["prefill_start_ns"] - t["arrival_ns"],
        "prefill": t["prefill_end_ns"] - t["prefill_start_ns"],
        "kv_wait": t["kv_transfer_start_ns"] - t["prefill_end_ns"],
        "transfer": t["kv_transfer_end_ns"] - t["kv_transfer_start_ns"],
        "first_decode": t["first_token_ns"] - t["kv_transfer_end_ns"],
    }


def _pct(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) / 1e9 if len(x) else None


def transfer_metrics(
    cols: Mapping[str, np.ndarray], rate: float, latency_ns: int
) -> dict[str, Any]:
    """``kv_transfer_bytes`` (total), transfer-time and KV-wait percentiles, the mean
    breakdown, and ``kv_transfer_stall_s``: the time transfers lost to sharing busy links,
    Σ (transfer − its idle-link time ⌈bytes/rate⌉ + latency), ``rate`` the bytes/s of one
    transfer alone on its path."""
    parts = ttft_breakdown(cols)
    nbytes = np.asarray(cols["kv_transfer_bytes"])
    m: dict[str, Any] = {"kv_transfer_bytes": int(nbytes.sum())}
    done = np.asarray(cols["first_token_ns"]) >= 0
    idle = np.ceil(nbytes[done] / rate * 1e9).astype(np.int64) + latency_ns
    if "decode_alloc_ns" not in cols:  # (push: the transfer term is only the exposed tail)
        stall = np.maximum(parts["transfer"] - idle, 0)
        m["kv_transfer_stall_s"] = float(stall.sum()) / 1e9
    m["kv_transfer_time_p50_s"] = _pct(parts["transfer"], 50)
    m["kv_transfer_time_p99_s"] = _pct(parts["transfer"], 99)
    m["kv_wait_p50_s"] = _pct(parts["kv_wait"], 50)
    m["kv_wait_p99_s"] = _pct(parts["kv_wait"], 99)
    m["ttft_breakdown_mean_s"] = {
        k: float(v.mean()) / 1e9 if len(v) else None for k, v in parts.items()
    }
    return m


def pool_summary(pool: Pool, span_ns: int) -> dict[str, Any]:
    """One pool's shape, busy share and KV plan."""
    cfg, insts, built = pool
    mem = built[0][2]
    out: dict[str, Any] = {
        "instances": len(insts),
        "tp": cfg.tp,
        "gpu": cfg.gpu,
        "gpus": len(insts) * cfg.tp * cfg.data_parallel_size,
        "data_parallel_size": cfg.data_parallel_size,
        "enable_expert_parallel": cfg.enable_expert_parallel,
        "moe_tp_size": cfg.moe_tp_size,
        "engine": cfg.engine,
        "engine_version": cfg.engine_version,
        "speculative": cfg.speculative.model_dump() if cfg.speculative is not None else None,
        "utilization": float(np.mean([i.busy_ns / max(span_ns, 1) for i in insts])),
        "num_steps": sum(s.num_steps for s, _, _ in built),
        "num_preemptions": sum(s.num_preemptions for s, _, _ in built),
        "perf_model": built[0][1].name,
        "kv_capacity_tokens": mem.kv_capacity_tokens,
        "num_blocks": mem.num_blocks,
        "num_free_blocks_end": sum(s.kv.num_free_blocks for s, _, _ in built),
    }
    kvs = [s.kv for s, _, _ in built]
    queries = sum(kv.cache_queries for kv in kvs)
    if any(kv.prefix_caching for kv in kvs):
        out["prefix_cache_hit_rate"] = sum(kv.cache_hits for kv in kvs) / max(queries, 1)
    out.update(spec_summary(cfg, [s for s, _, _ in built]))
    return out


def spec_summary(cfg: SimulationConfig, scheds: list[Any]) -> dict[str, Any]:
    """vLLM's speculation counters summed over a pool's instances (none without
    speculation): ``spec_decode_num_drafts`` … and the mean acceptance length."""
    if cfg.speculative is None:
        return {}
    total = PolicyStats.total(s.stats() for s in scheds)
    return spec_metrics(total.counters, cfg.speculative.num_speculative_tokens)


def disagg_result(
    cfg: SimulationConfig,
    recorder: RequestRecorder,
    cols: DisaggColumns,
    pools: dict[str, Pool],
    wiring: DisaggWiring,
    span_ns: int,
    timing: dict[str, Any],
) -> SimResult:
    """The run's :class:`~tidal.sim.single.SimResult`: columns, ``summary.json`` metrics, the
    instances' timelines (``instance``: global index, prefill pool first)."""
    c = recorder.columns()
    c.update(cols.columns())
    _, d_insts, d_built = pools["decode"]
    itl = LogHistogram()
    for inst in d_insts:
        itl.merge(inst.itl)
    metrics = summarize(c, cfg.slo.ttft_s, cfg.slo.tpot_s, itl)
    metrics.update(transfer_metrics(c, wiring.ideal_rate, wiring.link.latency_ns))
    if wiring.handoff_ns:  # (absent at 0: runs without it keep their summary)
        metrics["request_overhead_ms"] = wiring.handoff_ns / 1e6
    metrics.update(client_side_metrics(d_built[0][1], c))
    metrics.update(d_built[0][2].summary())  # the decode pool's KV plan (where tokens live)
    summaries = {role: pool_summary(pool, span_ns) for role, pool in pools.items()}
    metrics["pools"] = summaries
    metrics.update(  # the decode pool's speculation, at the top level as a single run's
        {k: v for k, v in summaries["decode"].items() if k.startswith("spec_decode_")}
    )
    if "call_ns" in c:  # augmented: calls pause on the decode pool (sim/disagg_augment.py)
        aug, per_pool = augmented_disagg_metrics(cfg, c, {r: p[1] for r, p in pools.items()})
        metrics.update(aug)
        for role, extra in per_pool.items():
            summaries[role]["augment"] = extra
    metrics["num_gpus"] = sum(p["gpus"] for p in summaries.values())
    metrics["num_steps"] = sum(p["num_steps"] for p in summaries.values())
    every = [i for _, insts, _ in pools.values() for i in insts]
    metrics["busy_fraction"] = float(np.mean([i.busy_ns / max(span_ns, 1) for i in every]))
    metrics["perf_model"] = d_built[0][1].name
    metrics["perf_model_source"] = perf_model_source(d_built[0][1])
    metrics.update(wiring.link.summary())
    timeline: dict[str, Any] = {}
    parts = [i.timeline_columns() for i in every]
    for key in dict.fromkeys(k for p in parts for k in p):  # −1: a column the pool lacks
        timeline[key] = np.concatenate(
            [p.get(key, np.full(len(p["time_ns"]), -1, dtype=np.int64)) for p in parts]
        )
    deployment = {
        "mode": "disagg",
        "router": cfg.deployment.router if cfg.deployment else None,
        **{f"{r}_{k}": summaries[r][k] for r in summaries for k in ("instances", "tp", "gpu")},
        "num_gpus": metrics["num_gpus"],
    }
    extras = {"tables": {"timeline": timeline}, "json": {"deployment": deployment}}
    return SimResult(cfg, metrics, c, timing, extras)


def describe(metrics: Mapping[str, Any]) -> list[str]:
    """Lines for the terminal: the pools, the mean TTFT breakdown and the KV moved."""
    pools = metrics["pools"]
    shape = ", ".join(
        f"{role} {p['instances']}× (TP{p['tp']} {p['gpu']}, busy {p['utilization']:.0%})"
        for role, p in pools.items()
    )
    parts = metrics["ttft_breakdown_mean_s"]
    mean = ", ".join(
        f"{k.replace('_', ' ')} {v * 1e3:.2f}" for k, v in parts.items() if v is not None
    )
    gb = metrics["kv_transfer_bytes"] / 1e9
    aug = [] if "augment" not in pools["decode"] else [
        "tool calls on the decode pool: {intercepts_preserved} preserved, {intercepts_discarded} "
        "discarded, {intercepts_swapped} swapped; {:.1f} s paused".format(
            metrics["paused_time_s"], **pools["decode"]["augment"])
    ]  # fmt: skip
    return [
        f"disaggregated: {shape}; {metrics['num_gpus']} GPUs",
        f"TTFT breakdown, mean ms: {mean}",
        f"KV transferred: {gb:,.2f} GB over {metrics['kv_link']} "
        f"({metrics['kv_link_gbs_per_gpu']:g} GB/s per GPU × {metrics['kv_link_efficiency']:g}, "
        f"{metrics['kv_link_latency_us']:g} µs)",
        *aug,
    ]
