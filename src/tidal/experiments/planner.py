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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidal.core.errors import ConfigError
from tidal.experiments.plan_cache import PlanCache
from tidal.experiments.plan_io import write_candidate_run, write_plan
from tidal.experiments.plan_options import (
    Evaluation,
    Option,
    OptionOutcome,
    PlanOutcome,
    _with_slo,
    build_options,
    certain_failure_stop,
    meets_slo,
    prepare_spec,
)
from tidal.experiments.plan_pool import Prefetcher, simulate_at
from tidal.experiments.plan_precision import resolve_precision
from tidal.experiments.plan_ties import same_service, tie_fields
from tidal.experiments.replicas import SimulationStopped
from tidal.experiments.space import PlanSpec
from tidal.hardware.gpus import get_gpu
from tidal.hardware.roofline import roofline_token_throughput
from tidal.sim.config import load_config
from tidal.sim.run import SimResult, load_requests, memory_plan
from tidal.workload.base import RequestSet

__all__ = [
    "Evaluation",
    "Option",
    "OptionOutcome",
    "PlanOutcome",
    "Planner",
    "build_options",
    "certain_failure_stop",
    "meets_slo",
    "plan",
    "prepare_spec",
    "same_service",
    "write_plan",
]


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
        if (spec.base.get("workload") or {}).get("concurrency") is not None:
            raise ConfigError(
                "workload.concurrency",
                "the planner sizes a deployment for arrival times; closed-loop clients have none",
                "give a trace or a synthetic rate",
            )
        base = load_config(resolve_precision(_with_slo(spec.base, self.targets)))
        self.requests = requests if requests is not None else load_requests(base)
        arr = self.requests.arrival_ns
        self.span_s = max(int(arr.max()) - int(arr.min()), 1) / 1e9
        self.max_tokens = int((self.requests.prompt_len + self.requests.output_len).max())
        self.on_evaluation = on_evaluation
        self.evaluations: list[Evaluation] = []
        self._memo: dict[tuple[int, int], Evaluation] = {}
        self._guess: dict[tuple[str, int], int] = {}
        self._stop = certain_failure_stop(self.targets, self.requests)
        self.prefetch: Prefetcher | None = None
        self.cache: PlanCache | None = None
        self._ties: dict[tuple[int, int], list[Evaluation]] = {}
        """Set by :func:`plan` with an output directory: verdicts on disk as they come."""

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
        rec = self.cache.load(opt.config, capacity, early_stop) if self.cache else None
        if rec is not None:
            passed, stopped, metrics = rec["passed"], rec["stopped_early"], rec["metrics"]
        else:
            try:
                result = self._simulate(opt, capacity, early_stop)
                metrics = result.metrics
                passed = meets_slo(metrics, self.targets)
            except SimulationStopped:
                stopped, passed, metrics = True, False, {}
            except ConfigError as err:
                # this capacity cannot hold the deployment (e.g. a cluster with fewer GPUs
                # per node than a model's TP): a miss, and more capacity may fit
                passed, metrics = False, {"error": str(err)}
            if self.cache is not None:
                self.cache.store(opt.config, capacity, early_stop, passed, stopped, metrics)
        ev = Evaluation(opt, capacity, passed, stopped, metrics, result if passed else None)
        self._memo[(opt.index, capacity)] = ev
        self.evaluations.append(ev)
        if self.on_evaluation is not None:
            self.on_evaluation(ev)
        return ev

    def _simulate(self, opt: Option, capacity: int, early_stop: bool) -> SimResult:
        assert opt.config is not None
        if self.prefetch is not None:
            done = self.prefetch.take(opt.index, capacity, early_stop)
            if done is not None:
                return done
        stop = self._stop if early_stop else None
        return simulate_at(opt.config, capacity, self.spec, self.requests, stop)

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
            cfg.model_spec(),
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
                status = o.status or ("does-not-fit" if "does not fit" in o.error else "error")
                outcomes[o.index] = OptionOutcome(o, status, detail=o.error)
        if self.prefetch is not None:
            self.prefetch.speculate(self, order, exhaustive)
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
            self._add_found(found, ev)
            for _, dropped in found[spec.top :]:
                dropped.result = None
            del found[spec.top :]
            if any(e is ev for _, e in found):
                self._keep(ev)
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
            {
                c["label"]: res
                for c, ev in zip(candidates, kept, strict=True)
                if (res := self._result_of(ev)) is not None
            },
            time.perf_counter() - t0,
        )

    def _add_found(self, found: list[tuple[tuple[Any, ...], Evaluation]], ev: Evaluation) -> None:
        """``ev`` enters the top list (sorted), or — the same GPUs serving the traffic the same
        way, every metric equal, as a deployment already there (a knob that made no
        difference) — that entry's tie group, represented by its first member by sort key, so
        that the top list holds distinct deployments."""
        for i, (_, rep) in enumerate(found):
            if same_service(rep, ev):
                group = [*self._ties.pop((rep.option.index, rep.capacity), [rep]), ev]
                first = min(group, key=self._sort_key)
                for e in group:
                    if e is not first:
                        e.result = None
                self._ties[(first.option.index, first.capacity)] = group
                found[i] = (self._sort_key(first), first)
                break
        else:
            found.append((self._sort_key(ev), ev))
        found.sort(key=lambda x: x[0])

    def _keep(self, ev: Evaluation) -> None:
        """A deployment entering the top list: its run directory on disk (with a cache), from
        the simulation just run or — a verdict replayed from an interrupted plan — run again
        once, without an early stop (it passed: the same run)."""
        opt = ev.option
        assert opt.config is not None
        if self.cache is None or self.cache.has_run(opt.config, ev.capacity):
            return
        res = ev.result
        if res is None:
            res = self._simulate(opt, ev.capacity, early_stop=False)
        ev.result = None
        config = opt.config.model_dump(mode="json")
        write_candidate_run(self.cache.run_dir(opt.config, ev.capacity), config, res, ev.capacity)

    def _result_of(self, ev: Evaluation) -> SimResult | Path | None:
        opt = ev.option
        if self.cache is not None and opt.config is not None:
            return self.cache.run_dir(opt.config, ev.capacity)
        return ev.result

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
            "precision": opt.precision,
            "weights_gib_per_gpu": opt.weights_gib,
            "gpu_hours": gh,
            "dollars": usd,
            "metrics": scalar,
            **tie_fields(self._ties.get((ev.option.index, ev.capacity), [ev]), ev),
        }


def _gt(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """a > b lexicographically, with a relative tolerance for float costs."""
    for x, y in zip(a, b, strict=True):
        if not math.isclose(x, y, rel_tol=1e-12):
            return x > y
    return False


def plan(
    spec: PlanSpec,
    exhaustive: bool = False,
    on_evaluation: Callable[[Evaluation], None] | None = None,
    requests: RequestSet | None = None,
    workers: int = 1,
    out_dir: str | Path | None = None,
) -> PlanOutcome:
    """The plan; ``workers`` > 1 prefetches simulations on a process pool (same outcome).
    With ``out_dir`` every simulation's verdict is written under ``out_dir/simulations`` as it
    comes and those found there are reused (:mod:`tidal.experiments.plan_cache`): the same
    plan, resumed."""
    if workers < 1:
        raise ConfigError("workers", f"must be >= 1, got {workers}")
    planner = Planner(prepare_spec(spec), requests, on_evaluation)
    if out_dir is not None:
        planner.cache = PlanCache(out_dir, planner.spec, planner.targets, planner.requests)
    if workers > 1:
        planner.prefetch = Prefetcher(workers, planner.spec, planner.targets, planner.requests)
    try:
        outcome = planner.run(exhaustive)
    finally:
        if planner.prefetch is not None:
            planner.prefetch.close()
    outcome.simulations_reused = planner.cache.reused if planner.cache else 0
    return outcome
