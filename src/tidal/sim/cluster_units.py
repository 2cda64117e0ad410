"""What a cluster run reports of its disaggregated units (docs/design/disagg-cluster-composition.md
§B, "Metrics"): the per-request transfer columns, and per model the KV moved, the time
transfers lost to busy links, the TTFT breakdown and each pool's busy share — the figures a
single disaggregated run reports (:mod:`tidal.sim.disagg_metrics`), over every unit of the model.

Only runs with units get any of them, so aggregated runs' columns and metrics (and the golden
cluster hashes) are unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np

from tidal.cluster.models import ServedModel
from tidal.sim.cluster_disagg import DisaggEngines, Unit
from tidal.sim.disagg_metrics import transfer_metrics

UNIT_COLUMNS = (
    "prefill_start_ns",
    "prefill_end_ns",
    "kv_transfer_start_ns",
    "kv_transfer_end_ns",
    "kv_transfer_bytes",
)
"""Per-request columns a run with units gains (−1 / 0 bytes for a request no unit served):
the prefill leg's first chunk and its token on a prefill engine, the decode engine's blocks
allocated (transfer started) and the last byte landed (+ the link's latency), the bytes."""


def add_unit_columns(cols: MutableMapping[str, Any], disagg: DisaggEngines) -> None:
    """Add :data:`UNIT_COLUMNS` (indexed by request id, as the cluster's rows are)."""
    for name in UNIT_COLUMNS:
        cols[name] = getattr(disagg.cols, name)


def pool_use(
    model: ServedModel, units: list[Unit], end_ns: int
) -> dict[str, dict[str, Any]]:
    """Per pool of ``model``'s units: the engines' shape (per unit, TP), how many engines ran,
    their engine-seconds (each from its unit's start, when the instance became READY, to its
    stop or ``end_ns``), busy seconds, and ``utilization`` = Σ busy / Σ engine-seconds (the
    busy share of the time the pool's engines existed; a single run's ``pools.*.utilization``
    with the run's span as every engine's life)."""
    out: dict[str, dict[str, Any]] = {}
    shape = {
        "prefill": (model.prefill_engines, model.prefill_engine_tp),
        "decode": (model.decode_engines, model.engine_tp),
    }
    for role, (per_unit, tp) in shape.items():
        life = busy = engines = 0
        for u in units:
            insts = u.prefill if role == "prefill" else u.decode
            span = (u.stop_ns if u.stop_ns >= 0 else end_ns) - u.start_ns
            life += span * len(insts)
            busy += sum(i.busy_ns for i in insts)
            engines += len(insts)
        out[role] = {
            "engines_per_unit": per_unit,
            "tp": tp,
            "engines": engines,
            "engine_seconds": life / 1e9,
            "busy_s": busy / 1e9,
            "utilization": busy / life if life > 0 else 0.0,
        }
    return out


def unit_model_metrics(
    model: ServedModel, units: list[Unit], cols: Mapping[str, np.ndarray], end_ns: int
) -> dict[str, Any]:
    """One unit model's figures over its rows ``cols``: ``kv_transfer_bytes``,
    ``kv_transfer_stall_s`` (Σ transfer − its idle-link time ⌈bytes/rate⌉ + latency),
    transfer-time and KV-wait percentiles, ``ttft_breakdown_mean_s``
    (:func:`~tidal.sim.disagg_metrics.transfer_metrics`) and ``pools`` (:func:`pool_use`).
    Every unit of a model has the same shape, so one idle-link rate serves them all."""
    if units:
        w = units[0].wiring
        rate, latency = w.ideal_rate, w.link.latency_ns
    else:  # no unit ever started: no request of the model got a token either
        rate, latency = 1.0, 0
    m = transfer_metrics(cols, rate, latency)
    m["pools"] = pool_use(model, units, end_ns)
    return m


def units_of(disagg: DisaggEngines, name: str) -> list[Unit]:
    """The units of the model ``name`` (live and stopped), in start order."""
    return [u for u in disagg.every if u.model == name]


UNIT_TABLE = (
    "unit", "model", "engine", "start_ns", "stop_ns", "prefill_engines", "decode_engines",
    "prefill_busy_ns", "decode_busy_ns", "requests", "kv_transfer_bytes",
    "kv_transfer_stall_ns",
)  # fmt: skip
"""``units.parquet``: one row per unit started, in start order (:func:`unit_table`)."""


def unit_table(
    disagg: DisaggEngines, model_index: Mapping[str, int], cols: Mapping[str, np.ndarray],
    end_ns: int,
) -> dict[str, np.ndarray]:
    """Per unit: its model (index), front engine, life (READY → stop; −1: live at the end,
    then ``end_ns`` for its busy shares), its engines and their busy ns per pool, and the
    requests its decode engines finished with their KV bytes and stall (transfer − its
    idle-link time, as :func:`unit_model_metrics`)."""
    rows: list[list[int]] = []
    of_engine: dict[int, int] = {}
    for k, u in enumerate(disagg.every):
        for inst in u.decode:
            of_engine[inst.index] = k
        rows.append([
            k, model_index[u.model], u.prefill[0].index, u.start_ns, u.stop_ns, len(u.prefill),
            len(u.decode), sum(i.busy_ns for i in u.prefill), sum(i.busy_ns for i in u.decode),
            0, 0, 0,
        ])  # fmt: skip
    engine = np.asarray(cols["instance"])
    nbytes = np.asarray(cols["kv_transfer_bytes"])
    took = np.asarray(cols["kv_transfer_end_ns"]) - np.asarray(cols["kv_transfer_start_ns"])
    for r in np.flatnonzero(np.asarray(cols["kv_transfer_end_ns"]) >= 0).tolist():
        j = of_engine.get(int(engine[r]))
        if j is None:  # (a request still in flight at the end has no finishing engine)
            continue
        w = disagg.every[j].wiring
        idle = math.ceil(int(nbytes[r]) / w.ideal_rate * 1e9) + w.link.latency_ns
        rows[j][9] += 1
        rows[j][10] += int(nbytes[r])
        rows[j][11] += max(int(took[r]) - idle, 0)
    table = np.array(rows, dtype=np.int64).reshape(len(rows), len(UNIT_TABLE))
    return {name: table[:, j].copy() for j, name in enumerate(UNIT_TABLE)}


def describe_units(per_model: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Terminal lines, one per unit model: each pool's busy share, the KV moved, the stall."""
    lines = []
    for name, pm in per_model.items():
        pools = pm.get("pools")
        if pools is None:
            continue
        busy = ", ".join(
            f"{role} {p['engines']} engine{'s' if p['engines'] != 1 else ''} "
            f"(TP{p['tp']}) busy {p['utilization']:.0%}"
            for role, p in pools.items()
        )
        lines.append(
            f"{name} ({pm.get('deployment', '')}): {busy}; KV moved "
            f"{pm['kv_transfer_bytes'] / 1e9:,.2f} GB, transfer stalls "
            f"{pm.get('kv_transfer_stall_s', 0.0):.3f} s"
        )
    return lines
