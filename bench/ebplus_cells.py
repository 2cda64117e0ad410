"""A subset of the EB⁺ robustness family (issue 18): iterate on chosen cells before the grid.

    nice python bench/ebplus_cells.py [--out bench/out/ebplus-cells] [--open FALLBACK.md]
        [--cell GPU/MODEL/MIX/C ...] [--strict-sample K] [--ebplus-opts JSON]

Runs the groups of :func:`robustness_grid.ebplus_groups` whose labels match (the ``open``
cells listed at the end of ``bench/results/robustness/ebplus_fallback.md``, ``--cell``
labels, and every K-th other group) with :func:`robustness.run_all` (resumable: the EB and MB
cells are reused across EB⁺ variants), and prints per group EB⁺'s ratio to the faster
baseline, vs EB / MB, its final mode and switches, and the selector's last signal.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

import robustness as rb
import robustness_grid as rg

RESULTS = Path(__file__).resolve().parent / "results" / "robustness"


def open_labels(path: Path) -> list[tuple[Any, ...]]:
    """The labels of the ``- open: {...}`` lines of an ``ebplus_fallback.md``."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("- open: "):
            out.append(tuple(ast.literal_eval(line[len("- open: ") :]).values()))
    return out


def key(lab: dict[str, Any]) -> str:
    return f"{lab['gpu']}/{lab['model']}/{lab['mix']}/{lab['c']}"


def last_signal(out: Path, cid: str) -> dict[str, float]:
    import polars as pl

    p = out / "cells" / cid / "ebplus.parquet"
    if not p.exists():
        return {}
    df = pl.read_parquet(p).filter(pl.col("event").is_in(["evaluate", "surge"]))
    top = df["demand"].max() if df.height else 0
    df = df.filter(pl.col("demand") >= 0.9 * top)  # steady state, not the drain
    if df.height == 0:
        return {}
    c_mb, c_eb = df["lhs"].median(), df["rhs"].median()
    return {"n_obs": df["n_obs"].median(), "c_mb": c_mb, "c_eb": c_eb, "pred": c_mb / c_eb - 1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=rb.OUT.parent / "ebplus-cells")
    ap.add_argument("--open", type=Path, default=RESULTS / "ebplus_fallback.md")
    ap.add_argument("--cell", nargs="*", default=[], help="GPU/MODEL/MIX/C")
    ap.add_argument("--strict-sample", type=int, default=0, help="also every K-th group")
    ap.add_argument("--only-cells", action="store_true", help="only the --cell labels")
    ap.add_argument("--conc", type=int, nargs="*", default=[], help="also every group at these c")
    ap.add_argument("--ebplus-opts", type=json.loads, default={})
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="write the checks here")
    args = ap.parse_args()
    rb.EBPLUS_OPTS.update(args.ebplus_opts)
    groups = rg.ebplus_groups(1500)
    want = set(args.cell)
    if not args.only_cells:
        want |= {f"{g}/{m}/{mix}/{c}" for g, m, _tp, mix, c in open_labels(args.open)}
    chosen = [
        g
        for i, g in enumerate(groups)
        if key(g.label) in want
        or g.label["c"] in args.conc
        or (args.strict_sample and i % args.strict_sample == 0)
    ]
    cells = [c for g in chosen for c in rb.group_cells(g)]
    out = args.out / "ebplus"
    failed = rb.run_all(cells, out, args.workers, "ebplus subset")
    rows = []
    for g in chosen:
        if any(f"{g.group_id}-{p}" in failed for p in g.policies):
            print(f"  failed {g.group_id}", file=sys.stderr)
            continue
        check = rb.evaluate("ebplus", g, out)
        s = rb.summary(out, f"{g.group_id}-ebplus")["metrics"]
        sig = last_signal(out, f"{g.group_id}-ebplus")
        rows.append({"label": g.label, "check": check})
        v = rg.ebplus_verdict(check, None)
        print(
            f"{key(g.label):42s} {v:8s} r={check['ratio']:.4f} eb={check['vs_eb']:+.4f} "
            f"mb={check['vs_mb']:+.4f} mode={s.get('ebplus_final_mode')} "
            f"sw={s.get('mode_switches')} " + " ".join(f"{k}={v:.3g}" for k, v in sig.items())
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"results": {"ebplus": rows}}, default=float) + "\n")


if __name__ == "__main__":
    main()
