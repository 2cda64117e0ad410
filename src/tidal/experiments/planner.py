"""The capacity planner: the cheapest deployment whose simulation meets the SLO.

Search space: the cartesian product of the plan's axes (:mod:`tidal.experiments.space`) gives
*options* (a per-replica config: GPU, TP, batching, ordering, budgets, ...); for each option the
planner finds the smallest capacity (replica count) that meets the SLO. Cost = GPUs × the
workload's arrival span in hours (``gpu_hours``), or the same weighted by each GPU's price
(``dollars``).

Why fewer simulations than the exhaustive grid (options × 1..max_replicas) yet the same answer:

1. **Monotone capacity.** Meeting the SLO is taken to be monotone in the replica count (more
   replicas, each with less traffic, never hurt — true of round-robin splitting in every case
   we have simulated; the planner test checks it on its grid). The smallest passing count is
   found by galloping up from a guess (doubling) and bisecting, ~log2(max_replicas) runs
   instead of max_replicas.
2. **Branch and bound.** Options are visited in order of cost per replica. Once ``top``
   deployments are known, an option can only enter the result with at most
   ⌊bound / cost per replica⌋ replicas; the search for it is capped there, and an option whose
   cap is 0 — e.g. a larger TP, or a pricier GPU, when a cheaper one already met the SLO — is
   pruned without a simulation.
3. **Exact early stop.** A run is stopped as soon as its failure is certain: with n requests,
   ``numpy.percentile`` (linear) of the p-th percentile is at least the sorted value at index
   ⌊p/100·(n−1)⌋, so once n − ⌊p/100·(n−1)⌋ finished requests exceed the threshold the p-th
   percentile must exceed it too.
4. **Guesses.** The first count tried is the smallest one found so far for the same GPU and TP,
   else ⌈offered token rate / one replica's roofline bound⌉.

A deployment meets the SLO when every request completes and every target (``ttft_p99_s`` ≤ S,
…) holds. Ties in cost are broken by the other cost, then by the first SLO metric (more
headroom first), then by the label, so the answer is deterministic.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tidal.core.errors import ConfigError
from tidal.core.metrics import request_latencies
from tidal.experiments.grid import apply_cell, cells, set_dotted
from tidal.experiments.replicas import SimulationStopped, run_replicated
from tidal.experiments.space import PlanSpec
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.hardware.roofline import roofline_token_throughput
from tidal.sim.config import SimulationConfig, load_config
from tidal.sim.recorder import RequestRecorder
from tidal.sim.run import SimResult, load_requests, memory_plan, run_simulation
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
    results: dict[str, SimResult] = field(default_factory=dict)
    """SimResult of each returned candidate, by its label."""
    wall_s: float = 0.0

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
    extra = [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in values.items() if k not in known]
    return text + (" · " + " ".join(extra) if extra else "")


def build_options(spec: PlanSpec, max_tokens: int) -> list[Option]:
    """Every option of the search space, validated; options that cannot run (the model does not
    fit, token_budget < max_seqs) are kept with their reason and never simulated."""
    out = []
    for i, values in enumerate(cells(spec.axes())):
        data = apply_cell(spec.base, values)
        gpus_per_unit = spec.gpus_per_unit
        try:
            cfg = load_config(data)
        except ConfigError as err:
            label = _label(values, None)
            out.append(Option(i, label, values, None, 1, 0.0, str(err).removeprefix("config: ")))
            continue
        unit = gpus_per_unit or (cfg.tp if spec.capacity_key == "replicas" else 1)
        base_gpu = cfg.gpu.partition("@")[0]
        price = spec.prices.get(base_gpu, get_gpu(cfg.gpu).price_per_hour)
        opt = Option(i, _label(values, cfg), values, cfg, unit, unit * price)
        try:
            memory_plan(cfg, max_tokens)
        except ConfigError as err:
            opt.error = str(err)
        out.append(opt)
    if out and all(o.config is None for o in out):
        raise ConfigError(
            "search", f"no option of the search space is valid; the first: {out[0].error}"
        )
    return out


# ---------------------------------------------------------------------------- the search
class Planner:
    def __init__(
        self,
        spec: PlanSpec,
        requests: RequestSet | None = None,
        on_evaluation: Callable[[Evaluation], None] | None = None,
    ) -> None:
        self.spec = spec
        self.targets = spec.targets()
        base = load_config(_with_slo(spec.base, self.targets))
        if base.workload.concurrency is not None:
            raise ConfigError(
                "workload.concurrency",
                "the planner sizes a deployment for arrival times; closed-loop clients have none",
                "give a trace or a synthetic rate",
            )
        self.requests = requests if requests is not None else load_requests(base)
        arr = self.requests.arrival_ns
        self.span_s = max(int(arr.max()) - int(arr.min()), 1) / 1e9
        self.max_tokens = int((self.requests.prompt_len + self.requests.output_len).max())
        self.on_evaluation = on_evaluation
        self.evaluations: list[Evaluation] = []
        self._memo: dict[tuple[int, int], Evaluation] = {}
        self._guess: dict[tuple[str, int], int] = {}
        self._stop = certain_failure_stop(self.targets, self.requests)

    # costs ------------------------------------------------------------------
    def costs(self, opt: Option, capacity: int) -> tuple[float, float]:
        hours = self.span_s / 3600.0
        return capacity * opt.unit_gpus * hours, capacity * opt.unit_price * hours

    def _key(self, opt: Option, capacity: int) -> tuple[float, float]:
        gh, usd = self.costs(opt, capacity)
        return (gh, usd) if self.spec.objective == "gpu_hours" else (usd, gh)

    def unit_cost(self, opt: Option) -> float:
        return self._key(opt, 1)[0]

    def capacity_cap(self, opt: Option, bound: tuple[Any, ...]) -> int:
        """The largest capacity whose (objective, other cost) is lexicographically ≤ the
        bound's: more could not enter the result."""
        c = math.floor(bound[0] / self.unit_cost(opt) * (1 + 1e-12))
        while c >= 1 and _gt(self._key(opt, c), bound[:2]):
            c -= 1
        return c

    # one simulation ---------------------------------------------------------
    def evaluate(self, opt: Option, capacity: int, early_stop: bool = True) -> Evaluation:
        memo = self._memo.get((opt.index, capacity))
        if memo is not None:
            return memo
        assert opt.config is not None
        stopped = False
        result: SimResult | None = None
        try:
            result = self._simulate(opt.config, capacity, early_stop)
            metrics = result.metrics
            passed = meets_slo(metrics, self.targets)
        except SimulationStopped:
            stopped, passed, metrics = True, False, {}
        except ConfigError as err:
            # this capacity cannot hold the deployment (e.g. a cluster with fewer GPUs per
            # node than a model's TP): a miss, and more capacity may fit
            passed, metrics = False, {"error": str(err)}
        ev = Evaluation(opt, capacity, passed, stopped, metrics, result if passed else None)
        self._memo[(opt.index, capacity)] = ev
        self.evaluations.append(ev)
        if self.on_evaluation is not None:
            self.on_evaluation(ev)
        return ev

    def _simulate(self, cfg: SimulationConfig, capacity: int, early_stop: bool) -> SimResult:
        stop = self._stop if early_stop else None
        if self.spec.capacity_key == "replicas":
            return run_replicated(cfg, capacity, self.spec.router, self.requests, stop)
        data = cfg.model_dump(mode="json")
        tmpl = self.spec.capacity_template
        value = tmpl.format(n=capacity, gpu=cfg.gpu, tp=cfg.tp) if tmpl else capacity
        set_dotted(data, self.spec.capacity_key, value)
        return run_simulation(load_config(data), self.requests)

    # capacity search --------------------------------------------------------
    def first_guess(self, opt: Option) -> int:
        cfg = opt.config
        assert cfg is not None
        known = self._guess.get((cfg.gpu, cfg.tp))
        if known is not None:
            return known
        if self.spec.capacity_key != "replicas":
            return 1
        mem = memory_plan(cfg)
        bound = roofline_token_throughput(
            get_model(cfg.model),
            get_gpu(cfg.gpu),
            cfg.tp,
            self.requests.prompt_len,
            self.requests.output_len,
            mem.kv_capacity_tokens,
            cfg.scheduler.max_seqs,
        )
        tokens = float((self.requests.prompt_len + self.requests.output_len).sum())
        return max(1, math.ceil(tokens / self.span_s / max(bound, 1e-9)))

    def min_capacity(self, opt: Option, cap: int) -> int | None:
        """Smallest capacity in [1, cap] meeting the SLO (monotone), or None."""
        g = min(max(self.first_guess(opt), 1), cap)
        if self.evaluate(opt, g).passed:
            lo, hi = 0, g
        else:
            lo = g
            while True:
                if lo >= cap:
                    return None
                nxt = min(cap, 2 * lo)
                if self.evaluate(opt, nxt).passed:
                    hi = nxt
                    break
                lo = nxt
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.evaluate(opt, mid).passed:
                hi = mid
            else:
                lo = mid
        return hi

    # the plan ---------------------------------------------------------------
    def run(self, exhaustive: bool = False) -> PlanOutcome:
        t0 = time.perf_counter()
        spec = self.spec
        options = build_options(spec, self.max_tokens)
        runnable = [o for o in options if o.error is None]
        order = sorted(runnable, key=lambda o: (self.unit_cost(o), o.index))
        found: list[tuple[tuple[float, ...], Evaluation]] = []
        outcomes: dict[int, OptionOutcome] = {}
        for o in options:
            if o.error is not None:
                status = "does-not-fit" if "does not fit" in o.error else "error"
                outcomes[o.index] = OptionOutcome(o, status, detail=o.error)
        for opt in order:
            before = len(self.evaluations)
            if exhaustive:
                passing = [
                    c
                    for c in range(1, spec.max_replicas + 1)
                    if self.evaluate(opt, c, early_stop=False).passed
                ]
                best_c = passing[0] if passing else None
                status = "feasible" if passing else "infeasible"
                detail = ""
            else:
                cap = spec.max_replicas
                if len(found) >= spec.top:
                    cap = min(cap, self.capacity_cap(opt, found[spec.top - 1][0]))
                if cap < 1:
                    outcomes[opt.index] = OptionOutcome(
                        opt, "pruned", detail="one replica already costs more than the bound"
                    )
                    continue
                best_c = self.min_capacity(opt, cap)
                if best_c is None:
                    status = "pruned" if cap < spec.max_replicas else "infeasible"
                    detail = f"fails the SLO with {cap} replicas"
                else:
                    status, detail = "feasible", ""
            n_sims = len(self.evaluations) - before
            outcomes[opt.index] = OptionOutcome(opt, status, best_c, n_sims, detail)
            for ev in self.evaluations[before:]:
                if ev.capacity != best_c:
                    ev.result = None  # keep one simulation's columns per option at most
            if best_c is None:
                continue
            assert opt.config is not None
            self._guess[(opt.config.gpu, opt.config.tp)] = best_c
            ev = self._memo[(opt.index, best_c)]
            found.append((self._sort_key(ev), ev))
            found.sort(key=lambda x: x[0])
            for _, dropped in found[spec.top :]:
                dropped.result = None
            del found[spec.top :]
        kept = [ev for _, ev in found]
        candidates = [self.candidate(ev) for ev in kept]
        exhaustive_n = spec.max_replicas * len(runnable)
        return PlanOutcome(
            spec,
            candidates,
            [outcomes[o.index] for o in options],
            self.evaluations,
            len(self.evaluations),
            exhaustive_n,
            self.span_s,
            len(self.requests),
            {c["label"]: ev.result for c, ev in zip(candidates, kept, strict=True) if ev.result},
            time.perf_counter() - t0,
        )

    def _sort_key(self, ev: Evaluation) -> tuple[Any, ...]:
        first = next(iter(self.targets))
        return (*self._key(ev.option, ev.capacity), ev.metrics.get(first), ev.option.label)

    def candidate(self, ev: Evaluation) -> dict[str, Any]:
        opt = ev.option
        assert opt.config is not None
        gh, usd = self.costs(opt, ev.capacity)
        scalar = {
            k: v
            for k, v in ev.metrics.items()
            if v is None or isinstance(v, bool | int | float | str)
        }
        return {
            "label": f"{ev.capacity}× {opt.label}",
            "option": opt.label,
            "values": opt.values,
            "config": opt.config.model_dump(mode="json"),
            "capacity_key": self.spec.capacity_key,
            "replicas": ev.capacity,
            "num_gpus": ev.capacity * opt.unit_gpus,
            "gpu": opt.config.gpu,
            "tp": opt.config.tp,
            "gpu_hours": gh,
            "dollars": usd,
            "metrics": scalar,
        }


def _gt(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """a > b lexicographically, with a relative tolerance for float costs."""
    for x, y in zip(a, b, strict=True):
        if not math.isclose(x, y, rel_tol=1e-12):
            return x > y
    return False


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


def plan(
    spec: PlanSpec,
    exhaustive: bool = False,
    on_evaluation: Callable[[Evaluation], None] | None = None,
    requests: RequestSet | None = None,
) -> PlanOutcome:
    return Planner(prepare_spec(spec), requests, on_evaluation).run(exhaustive)


def write_plan(outcome: PlanOutcome, out_dir: str | Path) -> Path:
    """``DIR/plan.json``, ``DIR/evaluations.parquet`` and one run directory per returned
    candidate under ``DIR/runs/`` (``tidal report DIR`` draws them)."""
    from tidal.report.io import write_json, write_parquet
    from tidal.report.results import _clean, write_run

    out = Path(out_dir)
    spec = outcome.spec
    wl = spec.base.get("workload", {})
    doc = {
        "best": outcome.best,
        "candidates": outcome.candidates,
        "simulations_run": outcome.simulations_run,
        "exhaustive_simulations": outcome.exhaustive_simulations,
        "objective": spec.objective,
        "slo": spec.targets(),
        "workload": {
            **wl,
            "num_requests": outcome.num_requests,
            "span_s": outcome.span_s,
            "offered_rate": outcome.num_requests / outcome.span_s,
        },
        "search": {
            "axes": spec.axes(),
            "max_replicas": spec.max_replicas,
            "router": spec.router,
            "capacity_key": spec.capacity_key,
            "top": spec.top,
            "prices": spec.prices,
        },
        "options": [
            {
                "label": o.option.label,
                "values": o.option.values,
                "status": o.status,
                "replicas": o.capacity,
                "simulations": o.simulations,
                "detail": o.detail,
            }
            for o in outcome.outcomes
        ],
    }
    rows = [
        {
            "candidate": ev.option.label,
            "replicas": ev.capacity,
            "num_gpus": ev.capacity * ev.option.unit_gpus,
            "passed": ev.passed,
            "stopped_early": ev.stopped_early,
            **{
                k: ev.metrics.get(k)
                for k in ("ttft_p99_s", "tpot_p99_s", "slo_attainment", "goodput")
            },
        }
        for ev in outcome.evaluations
    ]
    cols = {k: [r[k] for r in rows] for k in (rows[0] if rows else {"candidate": None})}
    write_parquet(out / "evaluations.parquet", cols)
    for rank, cand in enumerate(outcome.candidates):
        res = outcome.results[cand["label"]]
        slug = re.sub(r"[^A-Za-z0-9=.-]+", "-", cand["label"]).strip("-").lower()
        write_run(
            out / "runs" / f"{rank + 1:02d}-{slug}",
            cand["config"],
            res.config.seed,
            res.metrics,
            res.columns,
            res.run_info,
            extra_tables=res.extras.get("tables"),
            extra_json=res.extras.get("json") or {"deployment": {"replicas": cand["replicas"]}},
        )
    write_json(out / "plan_run.json", {"wall_s": outcome.wall_s})
    write_json(out / "plan.json", _clean(doc))
    return out / "plan.json"
