"""The planner's choice of unit shape for one model of a cluster (experiments/unit_shapes.py):
each shape (aggregated, 1p1d, 2p1d / 1p2d with per-pool TP, 2p2d) on the model's slice of the
cluster's workload, on the fewest GPUs meeting the SLO. Prints a Markdown table and the choice.

    nice python bench/cluster_unit_plan.py --model llama-2-13b --rate 4 --ttft 0.5 --tpot 0.015
"""

from __future__ import annotations

import argparse
import time

from tidal.experiments.unit_shapes import best_shape, compare_shapes
from tidal.sim.config import load_config

AZURE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="llama-2-13b,llama-2-7b,llama-2-7b",
                    help="the cluster's models")  # fmt: skip
    ap.add_argument("--model", default="llama-2-13b", help="the model to plan (name in results)")
    ap.add_argument("--cluster", default="2x8:h100")
    ap.add_argument("--rate", type=float, default=4.0, help="the cluster's request rate")
    ap.add_argument("--replay-s", type=float, default=300.0)
    ap.add_argument("--ttft", type=float, default=0.5, help="SLO: TTFT per request (s)")
    ap.add_argument("--tpot", type=float, default=0.015, help="SLO: TPOT per request (s)")
    ap.add_argument("--attainment", type=float, default=0.95)
    ap.add_argument("--max-gpus", type=int, default=8)
    ap.add_argument("--shapes", default=None, help="';'-separated shapes (default: the five)")
    ap.add_argument("--spec-alpha", type=float, default=None,
                    help="also search each shape with n-gram speculation, k = 3, this α "
                    "(and without)")  # fmt: skip
    args = ap.parse_args()
    cfg = load_config(
        {
            "workload": {"trace": AZURE},
            "slo": {"ttft_s": args.ttft, "tpot_s": args.tpot},
            "cluster": {
                "spec": args.cluster, "models": args.models, "placement": "warmserve",
                "warmup_s": 20, "mix": {"rate": args.rate, "alpha": 1.0, "replay_s": args.replay_s},
            },
        }
    )  # fmt: skip
    t0 = time.perf_counter()
    shapes = args.shapes.split(";") if args.shapes else None
    specs = None
    if args.spec_alpha is not None:
        specs = [None, {"method": "ngram", "num_speculative_tokens": 3,
                        "acceptance_rate": args.spec_alpha}]  # fmt: skip
    res = compare_shapes(cfg, args.model, args.max_gpus, shapes, args.attainment, specs)
    print("| shape | entry | spec | GPUs | meets | SLO att. | TTFT p50 | TTFT p99 | TPOT p50 | "
          "TPOT p99 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in res:
        m = r.metrics
        if r.skipped:
            print(f"| {r.shape} | {r.entry} | | skipped | | | | | | |")
            continue
        ok = "yes" if r.meets else "no"
        print(f"| {r.shape} | {r.entry} | {r.speculative} | {r.gpus} | {ok} | "
              f"{m['slo_attainment'] * 100:.1f} % | {m['ttft_p50_s'] * 1e3:.0f} ms | "
              f"{m['ttft_p99_s'] * 1e3:.0f} ms | {m['tpot_p50_s'] * 1e3:.1f} ms | "
              f"{m['tpot_p99_s'] * 1e3:.1f} ms |")  # fmt: skip
    best = best_shape(res)
    took = time.perf_counter() - t0
    if best is not None:
        print(f"\nchoice: {best.entry} ({best.speculative}) on {best.gpus} GPUs ({took:.0f} s)")


if __name__ == "__main__":
    main()
