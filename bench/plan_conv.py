"""The planner on the Azure 2023 conversation trace at 4× its rate (the README example), and
the planner against the exhaustive search on a window of it (issue 7).

    python bench/plan_conv.py [--verify-end-s 300] [--skip-verify] [--perf-models roofline,auto]

Part 1, the whole trace (19,366 requests): GPUs h100/h200/l40s, the default search space
(TP 1/2/4, token budget 512/2048/8192, max_seqs 128/256, every registered batching policy and
ordering), p99 TTFT ≤ 1 s, each objective; simulations run, wall time, best deployment.
Part 2, the first ``--verify-end-s`` seconds of the trace: the same search by the planner and
exhaustively (every option at every replica count up to 8); the top-3 must agree.
"""

from __future__ import annotations

import argparse
import time

from _common import md_table, save

from tidal.experiments.planner import plan
from tidal.experiments.space import load_plan_spec

TRACE = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz"


def spec(
    objective: str, end_s: float | None, max_replicas: int = 16, top: int = 5,
    perf_model: str = "auto",
) -> dict:  # fmt: skip
    workload = {"trace": TRACE, "rate_scale": 4}
    if end_s is not None:
        workload["end_s"] = end_s
    return {
        "base": {"model": "llama-3.1-8b", "workload": workload, "perf_model": perf_model},
        "search": {"gpu": ["h100", "h200", "l40s"]},
        "slo": {"ttft_p99_s": 1.0},
        "objective": objective,
        "max_replicas": max_replicas,
        "top": top,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--verify-end-s", type=float, default=300.0)
    ap.add_argument("--skip-verify", action="store_true")
    ap.add_argument("--perf-models", default="auto-vidur",
                    help="e.g. roofline,auto: before/after (auto-vidur: the recorded results)")
    args = ap.parse_args()
    rows, data = [], {}
    for pm, objective in [(p, o) for p in args.perf_models.split(",")
                          for o in ("gpu_hours", "dollars")]:  # fmt: skip
        t0 = time.perf_counter()
        out = plan(load_plan_spec(spec(objective, None, perf_model=pm)))
        wall = time.perf_counter() - t0
        best = out.best or {}
        rows.append(
            [
                pm,
                objective,
                out.simulations_run,
                out.exhaustive_simulations,
                f"{wall:.1f}",
                best.get("label"),
                best.get("num_gpus"),
                f"{best.get(objective, float('nan')):.2f}",
                f"{best.get('dollars', float('nan')):.2f}",
            ]
        )
        data[f"{pm}/{objective}"] = {"sims": out.simulations_run, "wall_s": wall,
                                     "best": best.get("label"), "num_gpus": best.get("num_gpus"),
                                     "cost": best.get(objective), "dollars": best.get("dollars"),
                                     "metrics": best.get("metrics")}  # fmt: skip
    print(md_table(["perf model", "objective", "simulations", "exhaustive grid", "wall s", "best",
                    "GPUs", "cost", "$"], rows))  # fmt: skip
    if not args.skip_verify:
        vrows = []
        tops = {}
        for mode in ("planner", "exhaustive"):
            t0 = time.perf_counter()
            s = load_plan_spec(spec("gpu_hours", args.verify_end_s, max_replicas=8, top=3))
            out = plan(s, exhaustive=mode == "exhaustive")
            wall = time.perf_counter() - t0
            tops[mode] = [c["label"] for c in out.candidates]
            vrows.append([mode, out.simulations_run, f"{wall:.1f}", "; ".join(tops[mode])])
        assert tops["planner"] == tops["exhaustive"], tops
        print(md_table(["search", "simulations", "wall s", "top 3"], vrows))
        data["verify"] = {"end_s": args.verify_end_s, "rows": vrows}
    save("plan_conv", data)


if __name__ == "__main__":
    main()
