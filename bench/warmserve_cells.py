"""Selected cells of the robustness grid's WarmServe family (issue 18), for iterating on a fix.

    nice python bench/warmserve_cells.py --out bench/out/ws-cells \
        --cells 2x8:h100/llama3/conv/22.63 ... [--set warmserve.scale_up=0.5 ...]
        [--ws-set warmserve.overload_fallback=true ...] [--placements warmserve serverlessllm]

Each ``--cells`` item is ``spec/models/trace/rate`` (one group of
:func:`robustness_grid.warmserve_group`); ``--set key=value`` overrides ``cluster.<key>`` (a
dotted path, JSON value) in every cell, ``--ws-set`` in the WarmServe cells only (the
other placements' cells, and so their results in ``--out``, stay those of the defaults).
Prints per-model P99 TTFT, SLO attainment and the guarantee check per group; cells run
through the sweep machinery (resumable).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import robustness as rb
import robustness_grid as rg

from tidal.experiments.sweep import Cell


def _override(base: dict[str, Any], sets: list[str]) -> dict[str, Any]:
    for item in sets:
        key, _, raw = item.partition("=")
        node = base["cluster"]
        *path, last = key.split(".")
        for p in path:
            node = node.setdefault(p, {})
        node[last] = json.loads(raw) if raw[:1] in '[{"0123456789-tf' else raw
    return base


def _ws_cell(g: rg.Group, c: Cell, sets: list[str]) -> Cell:
    """``c`` with ``sets`` applied when it is the group's WarmServe cell."""
    if c.values.get(g.policy_key) != "warmserve":
        return c
    return rb.make_cell(c.cell_id, _override(json.loads(json.dumps(g.base)), sets), c.values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=rb.OUT.parent / "ws-cells")
    ap.add_argument("--cells", nargs="+", required=True)
    ap.add_argument("--set", nargs="*", default=[])
    ap.add_argument("--ws-set", nargs="*", default=[])
    ap.add_argument("--placements", nargs="+", default=["warmserve", "serverlessllm"])
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    groups = []
    for item in args.cells:
        spec, models, trace, rate = item.split("/")
        g = rg.warmserve_group((spec, models, trace), float(rate), args.placements)
        g.base = _override(g.base, args.set)
        groups.append(g)
    cells = [c for g in groups for c in rb.group_cells(g)]
    if args.ws_set:
        cells = [_ws_cell(g, c, args.ws_set) for g in groups for c in rb.group_cells(g)]
    failed = rb.run_all(cells, args.out, args.workers, "cells")
    for g in groups:
        if any(f"{g.group_id}-{p}" in failed for p in g.policies):
            print(g.label, "failed", failed)
            continue
        if "serverlessllm" not in g.policies:
            att = {p: rb.summary(args.out, f"{g.group_id}-{p}")["metrics"]["slo_attainment"]
                   for p in g.policies}  # fmt: skip
            print(f"att  {rb.fmt_label(g.label)} {att}")
            continue
        c = rb.evaluate("warmserve", g, args.out)
        p99 = c["p99"]
        row = {k: f"{v:.3f}/{p99['serverlessllm'][k]:.3f}" for k, v in p99["warmserve"].items()}
        att = {p: round(a, 3) for p, a in c["attainment"].items()}
        print(f"{'ok ' if c['ok'] else 'MISS'} {rb.fmt_label(g.label)} {row} {att}")


if __name__ == "__main__":
    main()
