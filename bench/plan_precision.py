"""Per (GPU, precision), the cheapest deployment of a ``tidal plan`` with a precision axis and
its tokens/s per GPU: the table of BENCHMARKS.md's precision-by-cost example.

    tidal plan --config bench/results/plan_precision/llama70b_h100_b200.yaml --out DIR
    python bench/plan_precision.py DIR [--csv OUT.csv]

Reads ``DIR/plan.json`` (run the plan with ``top`` ≥ the number of options so that every
option's cheapest count is exact, not pruned); prints a markdown table, cheapest first, and
lists the options refused for their precision (``no-tables``) or memory (``does-not-fit``).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path


def rows(plan: dict) -> list[dict]:
    """The cheapest candidate of each (GPU, precision), cheapest first."""
    best: dict[tuple[str, str], dict] = {}
    for c in plan["candidates"]:
        key = (c["gpu"], c["precision"])
        if key not in best or (c["dollars"], c["gpu_hours"]) < (
            best[key]["dollars"], best[key]["gpu_hours"]
        ):
            best[key] = c
    out = []
    for (gpu, precision), c in sorted(best.items(), key=lambda kv: kv[1]["dollars"]):
        m = c["metrics"]
        out.append({
            "gpu": gpu, "precision": precision, "deployment": c["label"],
            "gpus": c["num_gpus"], "dollars": round(c["dollars"], 4),
            "gpu_hours": round(c["gpu_hours"], 5),
            "weights_gib_per_gpu": round(c["weights_gib_per_gpu"], 1),
            "ttft_p99_s": round(m["ttft_p99_s"], 3), "tpot_p99_ms": round(1e3 * m["tpot_p99_s"], 1),
            "tokens_per_s_per_gpu": round(m["token_throughput"] / c["num_gpus"], 1),
            "output_tokens_per_s_per_gpu": round(m["output_token_throughput"] / c["num_gpus"], 1),
        })  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("plan_dir", type=Path)
    ap.add_argument("--csv", type=Path, default=None)
    args = ap.parse_args()
    plan = json.loads((args.plan_dir / "plan.json").read_text())
    table = rows(plan)
    cols = list(table[0]) if table else []
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in table:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    for o in plan["options"]:
        if o["status"] in ("no-tables", "does-not-fit"):
            print(f"{o['status']}: {o['label']}: {o['detail'][:160]}")
    if args.csv is not None:
        with args.csv.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows(table)


if __name__ == "__main__":
    main()
