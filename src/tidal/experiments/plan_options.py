"""The planner's search space and verdicts: options, evaluations, outcomes and SLO checks.

An *option* is one per-replica configuration of the plan's axes (:mod:`tidal.experiments.space`);
an *evaluation* is one simulation of an option at a capacity. A deployment meets the SLO when
every request completes and every target (``ttft_p99_s`` ≤ S, …) holds
(:func:`meets_slo`); :func:`certain_failure_stop` ends a run once a miss is certain
(:mod:`tidal.experiments.planner`, point 3).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tidal.core.errors import ConfigError
from tidal.core.metrics import request_latencies
from tidal.experiments.grid import apply_cell, cells
from tidal.experiments.plan_precision import (
    NO_TABLES,
    PRECISION_KEYS,
    missing_tables,
    precision_label,
    resolve_precision,
)
from tidal.experiments.replicas import SimulationStopped
from tidal.experiments.space import PlanSpec
from tidal.hardware.gpus import get_gpu
from tidal.sim.config import SimulationConfig, load_config
from tidal.sim.recorder import RequestRecorder
from tidal.sim.run import SimResult, memory_plan
from tidal.workload.base import RequestSet

_LAT = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}


@dataclass
class Option:
    """One per-replica configuration of the search space."""

    index: int
    label: str
    values: dict[str, Any]
    config: SimulationConfig | None
    unit_gpus: int
    unit_price: float
    """USD per hour of one capacity unit."""
    error: str | None = None
    status: str | None = None
    """The outcome status of an option that is never simulated (``error`` says why):
    ``does-not-fit``, ``no-tables`` or ``error``; None: runnable."""
    precision: str = ""
    """The deployed weight (and quantized KV) dtype, e.g. ``fp8``, ``nvfp4 · KV fp8``
    (:func:`tidal.experiments.plan_precision.precision_label`)."""
    weights_gib: float | None = None
    """Weight GiB per GPU of the memory check (None: the check did not run)."""


@dataclass
class Evaluation:
    option: Option
    capacity: int
    passed: bool
    stopped_early: bool
    metrics: dict[str, Any]
    result: SimResult | None = None


@dataclass
class OptionOutcome:
    option: Option
    status: str
    """``feasible``, ``pruned`` (cannot beat the bound within its cap), ``infeasible`` (fails
    at max_replicas), ``does-not-fit`` or ``error``."""
    capacity: int | None = None
    simulations: int = 0
    detail: str = ""


@dataclass
class PlanOutcome:
    spec: PlanSpec
    candidates: list[dict[str, Any]]
    outcomes: list[OptionOutcome]
    evaluations: list[Evaluation]
    simulations_run: int
    exhaustive_simulations: int
    span_s: float
    num_requests: int
    results: dict[str, SimResult | Path] = field(default_factory=dict)
    """SimResult of each returned candidate, by its label (or, for a plan written as it went,
    its run directory under ``simulations/``)."""
    wall_s: float = 0.0
    simulations_reused: int = 0
    """Evaluations replayed from an earlier, interrupted run into the same directory."""

    @property
    def best(self) -> dict[str, Any] | None:
        return self.candidates[0] if self.candidates else None


# ---------------------------------------------------------------------------- SLO checks
def meets_slo(metrics: dict[str, Any], targets: dict[str, float]) -> bool:
    if metrics.get("num_completed") != metrics.get("num_requests"):
        return False
    for key, limit in targets.items():
        v = metrics.get(key)
        if v is None or v > limit:
            return False
    return True


def certain_failure_stop(
    targets: dict[str, float], requests: RequestSet
) -> Callable[[RequestRecorder, int], None]:
    """A ``stop`` hook raising :class:`SimulationStopped` once some target must be missed
    (module docstring, point 3)."""
    checks = []
    for key, limit in targets.items():
        m = re.fullmatch(r"(ttft|tpot|e2e)_p(\d+)_s", key)
        if m is None:  # pragma: no cover - PlanSpec validates the keys
            continue
        name, p = m.group(1), int(m.group(2))
        n = int((requests.output_len > 1).sum()) if name == "tpot" else len(requests)
        if n == 0:
            continue
        allowed = n - math.floor(p / 100.0 * (n - 1))
        checks.append((_LAT[name], limit, allowed))

    def stop(recorder: RequestRecorder, now_ns: int) -> None:
        lat = request_latencies(recorder.columns())
        for col, limit, allowed in checks:
            if int(np.count_nonzero(lat[col] > limit)) >= allowed:
                raise SimulationStopped(col)

    return stop


# ---------------------------------------------------------------------------- options
def _label(values: dict[str, Any], cfg: SimulationConfig | None) -> str:
    if cfg is None:
        return ", ".join(f"{k}={v}" for k, v in values.items())
    s = cfg.scheduler
    if cfg.cluster is not None:
        gpu = values.get("gpu", cfg.gpu)
        text = f"{gpu} · {cfg.cluster.placement} · {s.batching}"
        known = {"gpu", "cluster.placement", "scheduler.batching"}
        augmented = cfg.cluster.mix.augmented is not None
    else:
        text = f"{cfg.gpu} TP{cfg.tp} · {s.batching}/{s.ordering} B={s.token_budget} "
        text += f"N={s.max_seqs}"
        known = {"gpu", "tp", "scheduler.batching", "scheduler.ordering"}
        known |= {"scheduler.token_budget", "scheduler.max_seqs"}
        augmented = cfg.workload.augmented is not None
    if augmented:
        text += f" · {cfg.augment.serving_policy}"
        known.add("augment.serving_policy")
    if any(k in values for k in PRECISION_KEYS):  # a precision axis: its dtype, by name
        text += f" · {precision_label(cfg.model_spec())}"
        known |= set(PRECISION_KEYS)
    extra = [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in values.items() if k not in known]
    return text + (" · " + " ".join(extra) if extra else "")


def build_options(spec: PlanSpec, max_tokens: int) -> list[Option]:
    """Every option of the search space, validated; options that cannot run (the model does not
    fit, token_budget < max_seqs, a precision the GPU's tables lack) are kept with their
    reason and never simulated."""
    out = []
    for i, values in enumerate(cells(spec.axes())):
        data = resolve_precision(apply_cell(spec.base, values))
        gpus_per_unit = spec.gpus_per_unit
        try:
            cfg = load_config(data)
        except ConfigError as err:
            label = _label(values, None)
            msg = str(err).removeprefix("config: ")
            out.append(Option(i, label, values, None, 1, 0.0, msg, "error"))
            continue
        inst = cfg.tp * cfg.pipeline_parallel_size  # the GPUs of one replica
        unit = gpus_per_unit or (inst if spec.capacity_key == "replicas" else 1)
        base_gpu = cfg.gpu.partition("@")[0]
        price = spec.prices.get(base_gpu, get_gpu(cfg.gpu).price_per_hour)
        opt = Option(i, _label(values, cfg), values, cfg, unit, unit * price)
        _check(opt, cfg, max_tokens)
        out.append(opt)
    if out and all(o.config is None for o in out):
        raise ConfigError(
            "search", f"no option of the search space is valid; the first: {out[0].error}"
        )
    return out


def _check(opt: Option, cfg: SimulationConfig, max_tokens: int) -> None:
    """The option's precision, its memory check and its tables: sets ``opt.error`` and
    ``opt.status`` where it cannot run."""
    try:
        opt.precision = precision_label(cfg.model_spec())
        opt.weights_gib = memory_plan(cfg, max_tokens).weight_bytes_per_gpu / 2**30
    except ConfigError as err:
        opt.error = str(err)
        opt.status = "does-not-fit" if "does not fit" in opt.error else "error"
        return
    gap = missing_tables(cfg)
    if gap is not None:
        opt.error = f"{opt.precision} on {cfg.gpu}: {gap}; choose another precision or GPU"
        opt.status = NO_TABLES


def _with_slo(base: dict[str, Any], targets: dict[str, float]) -> dict[str, Any]:
    """The base config with its SLO thresholds set from the p-targets, so goodput and SLO
    attainment in the metrics use the same thresholds the plan does."""
    data = apply_cell(base, {})
    slo = data.setdefault("slo", {})
    for key, limit in targets.items():
        name = key.split("_", 1)[0]
        if name in ("ttft", "tpot"):
            slo[f"{name}_s"] = limit
    return data


def prepare_spec(spec: PlanSpec) -> PlanSpec:
    """Copy the SLO targets into the base config (see :func:`_with_slo`)."""
    return spec.model_copy(update={"base": _with_slo(spec.base, spec.targets())})
