"""The papers' policies beyond the papers' testbeds (issue 18): a robustness grid with pass/fail.

    nice python bench/robustness.py [--out bench/out/robustness] [--workers 2]
        [--families ebplus augserve warmserve] [--quick]

Every cell is one simulation written as a run directory under ``OUT/<family>/cells/<id>`` by
the sweep machinery (``tidal.experiments.sweep``: validated up front, run on a process pool,
written atomically, reused when re-run with the same config and seed — so a killed run
resumes). Cells and guarantees are defined in ``robustness_grid.py``. Writes
``OUT/robustness.md`` (the summary and every failing cell), ``OUT/robustness.json`` (every
group with its check) and one figure per family (``OUT/<family>.png``: the policy's ratio to
its best baseline in every cell, with the guarantee's line).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import robustness_grid as rg

from tidal.core.metrics import request_latencies
from tidal.experiments.executors import run_cells
from tidal.experiments.grid import apply_cell
from tidal.experiments.sweep import Cell, is_finished, simulate_cell, write_cell
from tidal.sim.config import load_config

OUT = Path(__file__).resolve().parent / "out" / "robustness"


def make_cell(cid: str, base: dict[str, Any], values: dict[str, Any]) -> Cell:
    data = apply_cell(base, values)
    data.setdefault("seed", 0)
    cfg = load_config(data)
    return Cell(cid, values, cfg.seed, cfg.model_dump(mode="json"))


EBPLUS_OPTS: dict[str, Any] = {}
"""``scheduler.eb`` of the EB⁺ cells only (``--ebplus-opts``; EB's cells keep the defaults)."""

WARMSERVE_OPTS: dict[str, Any] = {}
"""``cluster.warmserve`` keys of the WarmServe cells only (``--warmserve-opts``; the baselines'
cells keep the defaults, so a run can reuse them)."""


def group_cells(g: rg.Group) -> list[Cell]:
    def values(p: str) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if p == "ebplus" and EBPLUS_OPTS:
            extra = {"scheduler.eb": EBPLUS_OPTS}
        if p == "warmserve" and g.family == "warmserve":
            extra = {f"cluster.warmserve.{k}": v for k, v in WARMSERVE_OPTS.items()}
        return {g.policy_key: p, **extra}

    return [make_cell(f"{g.group_id}-{p}", g.base, values(p)) for p in g.policies]


def run_all(cells: list[Cell], out: Path, workers: int, what: str) -> dict[str, str]:
    """Run the unfinished cells (resumable); returns the failed ones' errors."""
    cells_dir = out / "cells"
    todo = [c for c in cells if not is_finished(cells_dir / c.cell_id, c)]
    print(f"{what}: {len(cells)} cells, {len(todo)} to run", file=sys.stderr, flush=True)
    failed: dict[str, str] = {}
    t0 = time.perf_counter()
    runs = run_cells(simulate_cell, [c.config for c in todo], "process", workers)
    for done, (i, res) in enumerate(runs, start=1):
        if res.error is not None:
            failed[todo[i].cell_id] = res.error
        else:
            write_cell(cells_dir, todo[i], res)
        if done % 20 == 0 or done == len(todo):
            el = time.perf_counter() - t0
            print(f"  {done}/{len(todo)} in {el:.0f} s", file=sys.stderr, flush=True)
    return failed


def summary(out: Path, cid: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "cells" / cid / "summary.json").read_text())
    return data


def per_model_p99(out: Path, cid: str, models: list[str]) -> dict[str, float]:
    import polars as pl

    df = pl.read_parquet(out / "cells" / cid / "requests.parquet")
    cols = {k: df[k].to_numpy() for k in df.columns}
    lat = request_latencies(cols)
    done = cols["finish_ns"] >= 0
    names = [
        f"{m}#{models[:i].count(m)}" if models.count(m) > 1 else m for i, m in enumerate(models)
    ]
    out_p99 = {}
    for i, name in enumerate(names):
        sel = done & (cols["model"] == i)
        out_p99[name] = float(np.percentile(lat["ttft_s"][sel], 99)) if sel.any() else 0.0
    return out_p99


def family_groups(fam: str, args: argparse.Namespace, root: Path) -> list[rg.Group]:
    gpus = tuple(args.gpus)
    if fam == "ebplus":
        return rg.ebplus_groups(args.eb_requests, gpus)
    if fam == "warmserve":
        return rg.warmserve_groups()
    probes = {
        f"{m}/{g}/tp{tp}": make_cell(f"cap-{m}-{g}-tp{tp}", rg.capacity_probe(m, g, tp), {})
        for m, g, tp in rg.augserve_deployments(gpus)
    }
    run_all(list(probes.values()), root / "capacity", args.workers, "capacity probes")
    cap = {
        k: summary(root / "capacity", c.cell_id)["metrics"]["request_throughput"]
        for k, c in probes.items()
    }
    return rg.augserve_groups(cap, args.window, gpus)


def evaluate(fam: str, g: rg.Group, out: Path) -> dict[str, Any]:
    ids = {p: f"{g.group_id}-{p}" for p in g.policies}
    m = {p: summary(out, cid)["metrics"] for p, cid in ids.items()}
    if fam == "ebplus":
        return rg.check_ebplus(m, m["ebplus"]["num_requests"])
    if fam == "augserve":
        return rg.check_augserve(m)
    models = g.base["cluster"]["models"]
    p99 = {p: per_model_p99(out, ids[p], models) for p in ("warmserve", "serverlessllm")}
    check = rg.check_warmserve_ttft(p99)
    check["attainment"] = {p: m[p]["slo_attainment"] for p in g.policies}
    check["past_capacity"] = m["warmserve"]["slo_attainment"] < rg.SLO_ATTAINMENT
    check["p99"] = p99
    return check


def ladders(
    rows: list[dict[str, Any]],
) -> dict[tuple[str, str, str], dict[str, dict[float, float]]]:
    """``{setting: {placement: {rate: SLO attainment}}}`` from the WarmServe family's rows."""
    out: dict[tuple[str, str, str], dict[str, dict[float, float]]] = {}
    for r in rows:
        lab = r["label"]
        key = (lab["spec"], lab["models"], lab["trace"])
        for p, att in r["check"]["attainment"].items():
            out.setdefault(key, {}).setdefault(p, {})[lab["rate"]] = att
    return out


def capacity_checks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """WarmServe's highest rate within the SLO against MuxServe's, per cluster setting.
    ``at_least[p]``: p met the SLO at every rung it ran (the ladder ended first), so its
    highest rate is a lower bound."""
    out = []
    for key, lad in ladders(rows).items():
        top = {p: rg.highest_rate(a) for p, a in lad.items()}
        at_least = {p: all(v >= rg.SLO_ATTAINMENT for v in a.values()) for p, a in lad.items()}
        ws, mx = top["warmserve"], top["muxserve"]
        out.append(
            {
                "label": dict(zip(("spec", "models", "trace"), key, strict=True)),
                "warmserve": ws,
                "muxserve": mx,
                "ok": ws >= mx,
                "highest": top,
                "at_least": at_least,
                "ladder": lad,
            }
        )
    return out


def run_warmserve(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    """The WarmServe family: the first rungs of every setting, then each setting's ladder one
    rung at a time while :func:`robustness_grid.ladder_policies` keeps it going."""
    out = root / "warmserve"
    settings = rg.warmserve_settings()[:: 3 if args.quick else 1]
    rows: list[dict[str, Any]] = []
    t0, n_cells = time.perf_counter(), 0
    rungs: list[tuple[float, ...]] = [rg.CLUSTER_RATES, *((r,) for r in rg.LADDER)]
    for k, rates in enumerate(rungs):
        lad = ladders(rows)
        groups = []
        for s in settings:
            pols = None if k == 0 else rg.ladder_policies(lad.get(s, {}))
            if k == 0 or pols is not None:
                groups += [rg.warmserve_group(s, r, pols) for r in rates]
        if not groups:
            break
        cells = [c for g in groups for c in group_cells(g)]
        n_cells += len(cells)
        failed = run_all(cells, out, args.workers, f"warmserve rung {rates}")
        for g in groups:
            if any(f"{g.group_id}-{p}" in failed for p in g.policies):
                errs = {p: failed.get(f"{g.group_id}-{p}") for p in g.policies}
                print(f"  skipped {g.group_id}: {errs}", file=sys.stderr)
                continue
            rows.append(
                {"label": g.label, "extra": g.extra, "check": evaluate("warmserve", g, out)}
            )
    wall = time.perf_counter() - t0
    print(f"warmserve: {n_cells} cells, {wall:.0f} s", file=sys.stderr, flush=True)
    WARM_RUN.update(cells=n_cells, wall_s=wall)
    return rows


WARM_RUN: dict[str, float] = {}
"""The WarmServe family's cell count and wall seconds of this invocation (for the JSON)."""


def capacity_table(cap: list[dict[str, Any]]) -> list[str]:
    """Highest rate within the SLO per setting and placement (≥: the ladder ended first)."""
    pls = rg.WARM_PLACEMENTS
    lines = [
        "",
        "WarmServe highest rate within the SLO (req/s; ≥: still met at its last rung):",
        "",
    ]
    lines += [
        "| setting | " + " | ".join(pls) + " | WarmServe ≥ MuxServe |",
        "|---" * (len(pls) + 2) + "|",
    ]
    for c in cap:
        cells = [f"{'≥ ' if c['at_least'][p] else ''}{c['highest'][p]:g}" for p in pls]
        lines.append(
            f"| {fmt_label(c['label'])} | "
            + " | ".join(cells)
            + f" | {'yes' if c['ok'] else 'NO'} |"
        )
    return lines


def fmt_label(lab: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in lab.items())


def report(results: dict[str, list[dict[str, Any]]], extra: dict[str, Any]) -> str:
    lines = ["| family | guarantee | cells met | worst |", "|---|---|---|---|"]
    for fam, rows in results.items():
        if not rows:
            continue
        n_ok = sum(r["check"]["ok"] for r in rows)
        worst = min(rows, key=lambda r: r["check"]["ratio"])
        lines.append(
            f"| {fam} | {GUARANTEE[fam]} | {n_ok} of {len(rows)} | "
            f"{worst['check']['ratio']:.3f} ({fmt_label(worst['label'])}) |"
        )
        if fam == "warmserve":  # cells WarmServe sustains (docs/design/warmserve-high-rate.md)
            within = [r for r in rows if not r["check"].get("past_capacity")]
            lines.append(
                f"| warmserve | same, cells within WarmServe's capacity (SLO ≥ 90 %) | "
                f"{sum(r['check']['ok'] for r in within)} of {len(within)} | — |"
            )
        if fam == "ebplus":  # the frontier reading (robustness_grid.check_ebplus)
            n_f = sum(r["check"]["ok_frontier"] for r in rows)
            n_t = sum(r["check"]["tradeoff"] for r in rows)
            wf = min(rows, key=lambda r: r["check"]["ratio_frontier"])
            lines.append(
                f"| ebplus | same, vs the baselines preempting ≤ EB⁺ + 0.2 % (frontier; "
                f"{n_t} trade-off cells) | {n_f} of {len(rows)} | "
                f"{wf['check']['ratio_frontier']:.3f} ({fmt_label(wf['label'])}) |"
            )
    if extra.get("capacity"):
        cap = extra["capacity"]
        worst = min(cap, key=lambda c: c["warmserve"] / c["muxserve"] if c["muxserve"] else 9e9)
        wr = worst["warmserve"] / worst["muxserve"] if worst["muxserve"] else float("inf")
        lines.append(
            f"| warmserve | highest rate within SLO ≥ MuxServe's | "
            f"{sum(c['ok'] for c in cap)} of {len(cap)} | {wr:.3f} ({fmt_label(worst['label'])}) |"
        )
        lines += capacity_table(cap)
    lines += ["", "Failing cells:", ""]
    for fam, rows in results.items():
        for r in rows:
            if not r["check"]["ok"]:
                c = {k: v for k, v in r["check"].items() if k not in ("p99", "attainment")}
                lines.append(f"- {fam} {fmt_label(r['label'])}: {json.dumps(c, default=float)}")
    for c in extra.get("capacity", []):
        if not c["ok"]:
            lines.append(
                f"- warmserve capacity {fmt_label(c['label'])}: WarmServe "
                f"{c['warmserve']:g} < MuxServe {c['muxserve']:g} req/s"
            )
    return "\n".join(lines) + "\n"


GUARANTEE = {
    "ebplus": "EB⁺ ≥ max(EB, MB) − 1 %, preempt. ≤ min(EB, MB) + 0.2 %",
    "augserve": "AugServe ≥ INFERCEPT − 1 % eff. tput, P99 TTFT ≤ 1.1×",
    "warmserve": "WarmServe P99 TTFT ≤ ServerlessLLM's, every model",
}
LINE = {"ebplus": 1 - rg.TOLERANCE, "augserve": 1 - rg.TOLERANCE, "warmserve": 1.0}


def figure(fam: str, rows: list[dict[str, Any]], path: Path) -> None:
    from matplotlib.figure import Figure

    key = "gpu" if fam != "warmserve" else "spec"
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.add_subplot()
    for i, val in enumerate(sorted({r["label"][key] for r in rows})):
        ratios = sorted(r["check"]["ratio"] for r in rows if r["label"][key] == val)
        ax.plot(np.linspace(0, 1, len(ratios)), ratios, "o-", ms=3, label=val, color=f"C{i}")
    ax.axhline(LINE[fam], color="k", ls="--", lw=1, label="guarantee")
    ax.set_xlabel("cells, sorted (fraction of the family's cells)")
    ax.set_ylabel(
        "policy / best baseline"
        if fam != "warmserve"
        else "ServerlessLLM P99 TTFT / WarmServe's (worst model)"
    )
    ax.set_yscale("log" if fam == "warmserve" else "linear")
    ax.set_title(f"{fam}: {GUARANTEE[fam]}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    fig.savefig(path, dpi=110)


def run_family(fam: str, args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    if fam == "warmserve":
        return run_warmserve(args, root)
    out = root / fam
    groups = family_groups(fam, args, root)
    if args.quick:
        groups = groups[:: max(1, len(groups) // 12)]
    cells = [c for g in groups for c in group_cells(g)]
    failed = run_all(cells, out, args.workers, fam)
    rows = []
    for g in groups:
        if any(f"{g.group_id}-{p}" in failed for p in g.policies):
            errs = {p: failed.get(f"{g.group_id}-{p}") for p in g.policies}
            print(f"  skipped {g.group_id}: {errs}", file=sys.stderr)
            continue
        rows.append({"label": g.label, "extra": g.extra, "check": evaluate(fam, g, out)})
    return rows


def main(argv: Iterable[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--families",
        nargs="+",
        default=["ebplus", "augserve", "warmserve"],
        choices=["ebplus", "augserve", "warmserve"],
    )
    ap.add_argument("--gpus", nargs="+", default=list(rg.GPUS))
    ap.add_argument("--eb-requests", type=int, default=1500)
    ap.add_argument(
        "--window",
        type=float,
        default=600.0,
        help="seconds of Poisson arrivals of the tool-calling mixture per cell",
    )
    ap.add_argument("--quick", action="store_true", help="about a dozen groups per family")
    ap.add_argument(
        "--ebplus-opts",
        type=json.loads,
        default={},
        help='scheduler.eb of the EB⁺ cells, JSON (e.g. \'{"prefer": "throughput"}\')',
    )
    ap.add_argument(
        "--warmserve-opts",
        type=json.loads,
        default={},
        help='cluster.warmserve of the WarmServe cells, JSON (e.g. \'{"triage_ratio": 0}\')',
    )
    args = ap.parse_args(list(argv) if argv is not None else None)
    EBPLUS_OPTS.update(args.ebplus_opts)
    WARMSERVE_OPTS.update(args.warmserve_opts)
    t0 = time.perf_counter()
    results = {fam: run_family(fam, args, args.out) for fam in args.families}
    extra: dict[str, Any] = {}
    if results.get("warmserve"):
        extra["capacity"] = capacity_checks(results["warmserve"])
    for fam, rows in results.items():
        if rows:
            figure(fam, rows, args.out / f"{fam}.png")
    text = report(results, extra)
    (args.out / "robustness.md").write_text(text)
    (args.out / "robustness.json").write_text(
        json.dumps(
            {
                "results": results,
                **extra,
                "warmserve_run": WARM_RUN,
                "wall_s": time.perf_counter() - t0,
            },
            indent=1,
            default=float,
        )
        + "\n"
    )
    print(text)
    print(f"wall {time.perf_counter() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
