"""Writing a plan: ``plan.json``, ``evaluations.parquet`` and one run directory per candidate."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from tidal.core.io import write_json, write_parquet
from tidal.experiments.plan_cache import copy_run
from tidal.experiments.plan_options import PlanOutcome
from tidal.experiments.results import _clean, write_run
from tidal.sim.run import SimResult


def write_plan(outcome: PlanOutcome, out_dir: str | Path) -> Path:
    """``DIR/plan.json``, ``DIR/evaluations.parquet`` and one run directory per returned
    candidate under ``DIR/runs/`` (``tidal report DIR`` draws them)."""
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
                "precision": o.option.precision,
                "weights_gib_per_gpu": o.option.weights_gib,
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
            "precision": ev.option.precision,
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
    names = []
    for rank, cand in enumerate(outcome.candidates):
        res = outcome.results[cand["label"]]
        slug = re.sub(r"[^A-Za-z0-9=.-]+", "-", cand["label"]).strip("-").lower()
        names.append(f"{rank + 1:02d}-{slug}")
        if isinstance(res, Path):
            copy_run(res, out / "runs" / names[-1])  # kept as the plan went
        else:
            write_candidate_run(out / "runs" / names[-1], cand["config"], res, cand["replicas"])
    _drop_stale_runs(out / "runs", names)
    write_json(
        out / "plan_run.json",
        {"wall_s": outcome.wall_s, "simulations_reused": outcome.simulations_reused},
    )
    write_json(out / "plan.json", _clean(doc))
    return out / "plan.json"


def write_candidate_run(
    run_dir: Path, config: dict[str, Any], res: SimResult, replicas: int
) -> None:
    """One deployment's run directory (``tidal report`` draws it): ``config`` is the option's
    (per-replica) config."""
    write_run(
        run_dir,
        config,
        res.config.seed,
        res.metrics,
        res.columns,
        res.run_info,
        extra_tables=res.extras.get("tables"),
        extra_json=res.extras.get("json") or {"deployment": {"replicas": replicas}},
    )


def _drop_stale_runs(runs: Path, keep: list[str]) -> None:
    """Run directories of an earlier plan into the same directory that this plan did not
    return (the plan directory is the plan's own)."""
    if runs.is_dir():
        for d in runs.iterdir():
            if d.is_dir() and d.name not in keep and (d / "summary.json").is_file():
                shutil.rmtree(d)
