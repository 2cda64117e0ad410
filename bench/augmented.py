"""Augmented serving benchmarks (issue 4): vLLM-style vs INFERCEPT vs AugServe on INFERCEPT's
six-type mixture, the per-mechanism ablation, the predictor-noise sweep and the
anti-starvation threshold sweep. Every number comes from ``tidal.sim`` runs; results are
printed as Markdown tables and appended as JSON lines to ``--out``.

    nice python bench/augmented.py sweep --model gpt-j-6b --tp 1 --swap-gb 128
    nice python bench/augmented.py sweep --model vicuna-13b --tp 2 --swap-gb 64
    nice python bench/augmented.py ablation --model gpt-j-6b --tp 1 --swap-gb 128 --rate 6
    nice python bench/augmented.py predictor --model gpt-j-6b --tp 1 --swap-gb 128 --rate 6
    nice python bench/augmented.py starvation --model gpt-j-6b --tp 1 --swap-gb 128 --rate 6
    nice python bench/augmented.py calibration --model gpt-j-6b --tp 1 --swap-gb 128 \
        --rates 2,3,4,5 --policies vllm,infercept,augserve
    nice python bench/augmented.py predictor --model gpt-j-6b --tp 1 --swap-gb 128 --rate 6 \
        --augment '{"starvation_factor": 0}'
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

KEYS = (
    "effective_throughput",
    "ttft_p50_s",
    "ttft_p99_s",
    "normalized_latency_p50_s",
    "normalized_latency_p99_s",
    "num_completed",
    "num_intercepts",
    "intercepts_preserved",
    "intercepts_discarded",
    "intercepts_swapped",
    "recompute_tokens",
    "recompute_time_share",
    "waste_preserve_gb_s",
    "waste_recompute_gb_s",
    "waste_swap_gb_s",
    "token_budget_mean",
    "duration_s",
    "swap_link_gbs",
    "busy_fraction",
)


def run_one(
    args: argparse.Namespace, rate: float, seed: int, augment: dict[str, Any]
) -> dict[str, Any]:
    cfg = load_config(
        {
            "model": args.model,
            "gpu": args.gpu,
            "tp": args.tp,
            "perf_model": args.perf_model,
            "seed": seed,
            "workload": {
                "augmented": args.workload,
                "num_requests": round(rate * args.window),
                "rate": rate,
            },
            "augment": {"swap_space_gb": args.swap_gb, **args.augment, **augment},
            "slo": {"ttft_s": args.slo_ttft},
        }
    )
    t0 = time.perf_counter()
    res = run_simulation(cfg)
    wall = time.perf_counter() - t0
    row = {k: res.metrics.get(k) for k in KEYS}
    row.update(
        model=args.model,
        tp=args.tp,
        perf_model=res.metrics.get("perf_model"),
        rate=rate,
        seed=seed,
        augment=augment,
        wall_s=wall,
        events=res.run_info["num_events"],
    )
    return row


def median_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(rows[0])
    for k in (*KEYS, "wall_s"):
        vals = [r[k] for r in rows if r[k] is not None]
        out[k] = statistics.median(vals) if vals else None
    return out


def cells(r: dict[str, Any]) -> str:
    def f(x: float | None, scale: float = 1.0, fmt: str = "{:.3f}") -> str:
        return "—" if x is None else fmt.format(x * scale)

    return " | ".join(
        [
            f(r["effective_throughput"]),
            f(r["ttft_p50_s"], fmt="{:.2f}"),
            f(r["ttft_p99_s"], fmt="{:.1f}"),
            f(r["normalized_latency_p50_s"], 1e3, "{:.1f}"),
            f(r["normalized_latency_p99_s"], 1e3, "{:.0f}"),
            f(r["recompute_tokens"], 1e-6, "{:.2f}"),
            f(r["recompute_time_share"], 100, "{:.0f}"),
            f(r["waste_preserve_gb_s"], fmt="{:,.0f}"),
            f(r["waste_recompute_gb_s"], fmt="{:,.0f}"),
            f(r["waste_swap_gb_s"], fmt="{:,.0f}"),
            f(r["wall_s"], fmt="{:.1f}"),
        ]
    )


HEADER = (
    "eff. req/s | TTFT p50 s | TTFT p99 s | norm. lat. p50 ms/tok | p99 | recompute Mtok | "
    "recompute % of fwd | waste preserve GB·s | recompute | swap | sim wall s"
)


def emit(args: argparse.Namespace, label: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    r = median_rows(rows)
    r["label"] = label
    if args.out:
        with Path(args.out).open("a") as fh:
            fh.write(json.dumps(r) + "\n")
    print(f"| {label} | {cells(r)} |", flush=True)
    return r


def cmd_sweep(args: argparse.Namespace) -> None:
    print(f"| rate · policy | {HEADER} |")
    print("|" + "---|" * 12)
    for rate in args.rates:
        for policy in args.policies:
            rows = [run_one(args, rate, s, {"serving_policy": policy}) for s in args.seeds]
            emit(args, f"{rate:g} · {policy}", rows)


ABLATION = [
    ("vllm", {"serving_policy": "vllm"}),
    ("infercept", {"serving_policy": "infercept"}),
    ("+ value order (Stage I only)", {"serving_policy": "augserve-ordering", "stage2": False}),
    ("+ value order (Stage I + II)", {"serving_policy": "augserve-ordering"}),
    (
        "+ value order, no anti-starvation",
        {"serving_policy": "augserve-ordering", "starvation_factor": 0},
    ),
    ("+ dynamic budget only", {"serving_policy": "augserve-budget"}),
    ("augserve (both)", {"serving_policy": "augserve"}),
    ("augserve, time-form value", {"serving_policy": "augserve", "value_form": "time"}),
    ("augserve, oracle predictor", {"serving_policy": "augserve", "predictor": "oracle"}),
]


def cmd_ablation(args: argparse.Namespace) -> None:
    print(f"| configuration | {HEADER} |")
    print("|" + "---|" * 12)
    for label, aug in ABLATION:
        emit(args, label, [run_one(args, args.rate, s, aug) for s in args.seeds])


def cmd_predictor(args: argparse.Namespace) -> None:
    print(f"| predictor | {HEADER} |")
    print("|" + "---|" * 12)
    grid: list[tuple[str, dict[str, Any]]] = [("oracle", {"predictor": "oracle"})]
    for p in (1.0, 0.8, 0.6):
        for sigma in (0.0, 0.3, 0.7):
            grid.append(
                (
                    f"noisy p={p:g} σ={sigma:g}",
                    {"predictor": "noisy", "predictor_p": p, "predictor_sigma": sigma},
                )
            )
    grid += [("per-tool mean", {"predictor": "mean"}), ("none", {"predictor": "none"})]
    for label, aug in grid:
        aug = {"serving_policy": args.policy, **aug}
        emit(args, label, [run_one(args, args.rate, s, aug) for s in args.seeds])


CALIBRATION = [
    ("roofline, 0.8 × PCIe", "roofline", {"host_link_efficiency": 0.8}),
    ("INFERCEPT profile, 0.8 × PCIe", "auto", {"host_link_efficiency": 0.8}),
    ("roofline, INFERCEPT swap budget", "roofline", {}),
    ("INFERCEPT profile + swap budget", "auto", {}),
]


def cmd_calibration(args: argparse.Namespace) -> None:
    """What each measured constant changes: step times (roofline vs INFERCEPT's profile) ×
    host link (0.8 × PCIe vs INFERCEPT's profiled swap budget)."""
    print(f"| step model, host link · rate · policy | {HEADER} |")
    print("|" + "---|" * 12)
    for label, perf, aug in CALIBRATION:
        args.perf_model = perf
        for rate in args.rates:
            for policy in args.policies:
                rows = [
                    run_one(args, rate, s, {"serving_policy": policy, **aug}) for s in args.seeds
                ]
                emit(args, f"{label} · {rate:g} · {policy}", rows)


def cmd_starvation(args: argparse.Namespace) -> None:
    print(f"| τ / TTFT SLO | {HEADER} |")
    print("|" + "---|" * 12)
    for factor in (2, 5, 20, 60, 180, 0):
        aug = {"serving_policy": "augserve", "starvation_factor": factor}
        label = "off" if factor == 0 else f"{factor}×"
        emit(args, label, [run_one(args, args.rate, s, aug) for s in args.seeds])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("what", choices=["sweep", "ablation", "predictor", "starvation", "calibration"])
    ap.add_argument("--model", default="gpt-j-6b")
    ap.add_argument("--gpu", default="a100-80gb")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument(
        "--perf-model",
        default="auto-vidur",
        help="auto-vidur (INFERCEPT's measured profile on its deployments, else the Vidur "
        "profiles: the recorded results; auto adds the engine tables) | roofline | linear",
    )
    ap.add_argument("--swap-gb", type=float, default=128.0)
    ap.add_argument("--workload", default="infercept-mix")
    ap.add_argument("--window", type=float, default=1800.0, help="seconds of arrivals")
    ap.add_argument("--rate", type=float, default=6.0)
    ap.add_argument(
        "--rates",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0],
    )
    ap.add_argument(
        "--policies", type=lambda s: s.split(","), default=["vllm", "infercept", "augserve"]
    )
    ap.add_argument(
        "--policy", default="augserve", help="predictor sweep: augserve | augserve-ordering"
    )
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0])
    ap.add_argument("--slo-ttft", type=float, default=1.0)
    ap.add_argument("--out", default=None, help="append JSON lines here")
    ap.add_argument(
        "--augment",
        type=json.loads,
        default={},
        help="extra augment settings, e.g. '{\"starvation_factor\": 0}'",
    )
    args = ap.parse_args()
    {
        "sweep": cmd_sweep,
        "ablation": cmd_ablation,
        "predictor": cmd_predictor,
        "starvation": cmd_starvation,
        "calibration": cmd_calibration,
    }[args.what](args)


if __name__ == "__main__":
    main()
