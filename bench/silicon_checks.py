"""Consistency checks of NVIDIA's silicon rows against the GPU's own measured kernels (issue 28).

    python bench/silicon_checks.py [--filter REGEX] [--tag NAME]

A row of ``systems/silicon_sample.csv`` reports the mean TTFT and TPOT of a closed loop of C
clients. By Little's law such a loop completes X = C / (TTFT + (OSL − 1)·TPOT) requests a
second (lengths: the client's mean, 0.9 of the nominal ones for ``--random-range-ratio 0.8``;
the rows' nominal lengths give a smaller X, so the check is conservative), and so prefills
X·ISL tokens a second. Two numbers per row, neither of them fitted:

* ``gemm_load``: the fraction of each second the deployment's GPUs need for the GEMMs of those
  prefills alone, at the best per-token GEMM time its measured tables hold (the minimum of
  L·(QKV + O + MLP or MoE GEMMs)(t) / t over the tables' token grid up to 8,192: the largest
  chunk vLLM's default budget runs, read from ``EnginePerfModel``'s per-layer curves, no
  attention, all-reduce, elementwise, decode or host time). Above 1 no engine running those
  kernels can produce the row as a closed loop at C with the reported lengths; near 1 it would
  leave no time for decode;
* ``in_flight``: C·R / (TTFT + R), R = (OSL − 1)·TPOT: the requests the server ran at a time if
  the client kept C in flight and the server queued the rest (the TTFT then holds the wait);
  ≈ C for a loop without queueing.

Prints per (engine, version, model, GPU, precision) group the rows, the median and maximum
``gemm_load`` and the rows above 1, and writes ``bench/results/silicon/<tag>_checks.csv.gz``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import silicon
from _common import md_table
from silicon_rows import Plan, Row, config_fields, plan_row, read_rows, sample_path

RESULTS = silicon.RESULTS
MEAN_LENGTH = 0.9
"""The client's mean length over the nominal one (uniform on [0.8·L, L])."""
MAX_CHUNK = 8192
"""The largest prefill chunk the GEMM floor considers (vLLM's default token budget)."""
GEMM_PARTS = ("attention_proj", "mlp")


def throughput(row: Row, share: float = MEAN_LENGTH) -> float:
    """Requests a second of a closed loop of C clients with the row's TTFT and TPOT."""
    cycle_ms = row.ttft_ms + max(share * row.osl - 1.0, 0.0) * row.tpot_ms
    return row.concurrency / (cycle_ms * 1e-3)


def in_flight(row: Row) -> float:
    """Requests running at a time if the TTFT holds a queue's wait (nominal lengths)."""
    run = (row.osl - 1) * row.tpot_ms
    return row.concurrency * run / (run + row.ttft_ms)


def gemm_floor_s(perf: Any) -> float:
    """Seconds per prefill token of the step's GEMMs at their most efficient token count
    (``perf``: an ``EnginePerfModel``; its per-layer curves, all layers, one GPU)."""
    lin = perf.dep.linear
    L = perf.model.num_layers
    best = float("inf")
    for i, t in enumerate(lin.tokens):
        if 0 < t <= MAX_CHUNK:
            us = sum(lin.layer_us[k][i] for k in GEMM_PARTS if k in lin.layer_us)
            best = min(best, L * us * 1e-6 / t)
    return best


def check_plan(plan: Plan) -> dict[str, Any]:
    """``gemm_load`` and ``in_flight`` of one planned row (``gemm_load`` empty where the
    row's step model is not the engine tables)."""
    from tidal.hardware.engine_perf import EnginePerfModel
    from tidal.sim.config import load_config
    from tidal.sim.single import build_instance

    row = plan.row
    out: dict[str, Any] = {"in_flight": round(in_flight(row), 1)}
    cfg = load_config(plan.config)
    _, perf, _ = build_instance(cfg, row.isl + row.osl)
    base = getattr(perf, "base", perf)
    if isinstance(base, EnginePerfModel):
        gpus = row.tp * row.pp * max(row.attention_dp, 1)
        tokens = throughput(row) * MEAN_LENGTH * row.isl
        # a rank's GEMMs run its 1/dp of the tokens, PP stages run in turn
        load = tokens * gemm_floor_s(base) / max(row.attention_dp, 1) / row.pp
        out.update(gemm_load=round(load, 3), gpus=gpus)
    return out


def group_key(row: Row) -> tuple[str, ...]:
    return (row.engine, row.version or "-", row.model, row.system, row.precision)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--filter", default=None, help="regex on id/engine/version/model/gpu")
    p.add_argument("--tag", default="checks")
    a = p.parse_args(argv)
    rows = [r for r in read_rows(sample_path()) if not a.filter or re.search(a.filter, r.text)]
    fields = config_fields()
    recs: list[dict[str, Any]] = []
    for row in rows:
        plan = plan_row(row, fields)
        if not isinstance(plan, Plan):
            continue
        try:
            got = check_plan(plan)
        except Exception as err:  # a row the simulator refuses is left out, with the reason
            got = {"error": f"{type(err).__name__}: {err}"[:200]}
        recs.append({"id": row.id, "group": " ".join(group_key(row)), "isl": row.isl,
                     "osl": row.osl, "concurrency": row.concurrency, "tp": row.tp, **got})
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        if "gemm_load" in r:
            groups[r["group"]].append(r)
    table = []
    for g, rs in sorted(groups.items()):
        loads = [r["gemm_load"] for r in rs]
        table.append([g, len(rs), f"{statistics.median(loads):.2f}", f"{max(loads):.2f}",
                      sum(x > 1.0 for x in loads)])
    print(md_table(["group", "rows", "gemm_load median", "max", "> 1"], table))
    silicon.write_csv(RESULTS / f"{a.tag}_checks.csv.gz", recs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
