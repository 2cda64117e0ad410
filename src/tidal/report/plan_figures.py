"""Figures of a capacity plan: the planner's search (every simulated deployment) and the costs
of the feasible deployments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib.ticker import MaxNLocator

from tidal.report.collect import Results
from tidal.report.describe import describe
from tidal.report.figure_base import (
    FigureFile,
    _new,
    _save,
    legend_outside,
)


# ---------------------------------------------------------------------------- plans
def _best_config(plan: dict[str, Any]) -> dict[str, Any]:
    """The best deployment's config with its replica count and the plan's SLO targets (not
    the per-request thresholds derived from them) for its description."""
    best = plan.get("best") or {}
    cfg = dict(best.get("config", {}), replicas=best.get("replicas"))
    cfg.pop("slo", None)
    cfg["slo_targets"] = plan.get("slo") or {}
    return cfg


def plan_search(res: Results, out: Path) -> FigureFile | None:
    """Every simulation the planner ran: one row per configuration it simulated, a mark per
    GPU count tried — green when the deployment met the SLO, red when it missed (hollow: the
    run was stopped as soon as the miss was certain) — and a star on the best."""
    path = res.file("evaluations.parquet")
    if path is None or res.plan is None:
        return None
    ev = pl.read_parquet(path)
    if ev.height == 0:
        return None
    options = list(dict.fromkeys(ev["candidate"].to_list()))
    row = {o: i for i, o in enumerate(options)}
    fig, ax = _new(1, 1, w=9.0, h=1.4 + 0.24 * len(options))
    a = ax[0][0]
    y = np.array([row[c] for c in ev["candidate"].to_list()])
    x = ev["num_gpus"].to_numpy()
    ok = ev["passed"].to_numpy()
    early = ev["stopped_early"].to_numpy()
    a.scatter(x[ok], y[ok], marker="o", color="C2", s=22, label="meets the SLO")
    a.scatter(x[~ok & ~early], y[~ok & ~early], marker="x", color="C3", s=22, label="misses")
    a.scatter(
        x[early],
        y[early],
        marker="o",
        facecolors="none",
        edgecolors="C3",
        s=22,
        label="misses (stopped early)",
    )
    best = res.plan.get("best") or {}
    if best.get("option") in row:
        a.scatter(
            [best["num_gpus"]],
            [row[best["option"]]],
            marker="*",
            s=160,
            color="gold",
            edgecolors="k",
            zorder=3,
            label="best",
        )
    a.set_yticks(range(len(options)), options, fontsize=7, family="monospace")
    a.set_ylim(len(options) - 0.5, -0.5)  # first option on top, half a row of margin
    a.xaxis.set_major_locator(MaxNLocator(integer=True))
    a.set_xlabel("GPUs in the deployment (replicas × TP)")
    a.set_ylabel("configuration simulated")
    a.grid(alpha=0.3)
    legend_outside(a)
    cfg = _best_config(res.plan)
    title = "Planner search — best: " + (describe(cfg) if best else "no feasible deployment")
    caption = (
        f"The {res.plan.get('simulations_run')} simulations the planner ran, of "
        f"{res.plan.get('exhaustive_simulations')} for the exhaustive grid (every configuration "
        "at every replica count); configurations pruned without a simulation are not shown."
    )
    return _save(fig, out / "plan_search.png", title, caption, "The planner's search")


def plan_costs(res: Results, out: Path) -> FigureFile | None:
    """The cheapest feasible deployments found, by cost."""
    if res.plan is None or not res.plan.get("candidates"):
        return None
    cands = res.plan["candidates"][:12]
    objective = res.plan.get("objective", "gpu_hours")
    fig, ax = _new(1, 1, w=8.0, h=1.0 + 0.35 * len(cands))
    a = ax[0][0]
    y = np.arange(len(cands))
    a.barh(y, [c[objective] for c in cands], color=["C2"] + ["C0"] * (len(cands) - 1))
    a.set_yticks(y, [c["label"] for c in cands], fontsize=7, family="monospace")
    a.invert_yaxis()
    a.set_xlabel(OBJECTIVE_UNITS.get(objective, objective.replace("_", " ")))
    a.set_ylabel("deployment")
    a.grid(alpha=0.3, axis="x")
    cfg = _best_config(res.plan)
    title = "Cheapest deployments meeting the SLO — best: " + describe(cfg)
    caption = f"Feasible deployments by {objective} (green: the best)."
    return _save(fig, out / "plan_costs.png", title, caption, "Cheapest deployments")


OBJECTIVE_UNITS = {"gpu_hours": "cost (GPU-hours)", "dollars": "cost (US dollars)"}
