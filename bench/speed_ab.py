"""A/B simulator speed of two source trees, measured in one run (issue 15).

Each case runs in fresh processes alternating between the trees (``--repeats`` times); each
process reports the minimum CPU time (``time.process_time``) of 3 ``run_simulation`` calls, so
other load on a shared machine matters less than for wall time. Prints the medians and the
speed ratio (old time / new time; > 1 = the new tree is faster).

    git worktree add --detach /tmp/old main
    python bench/speed_ab.py --old /tmp/old --new . [--repeats 5] [--rate 5.744] [--cluster]

The cases use each tree's ``auto`` step model. When the trees' step models differ (the old tree
predates a step-model change) the two simulate different step sequences and the ratio mixes the
engine's cost with the model's; ``--perf-model roofline`` (unchanged across such trees) compares
the engines alone: check that both trees give the same per-request columns.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
from tidal.sim.config import load_config
from tidal.sim.run import load_requests, run_simulation
cfg = load_config(json.loads(sys.argv[1]))
reqs = load_requests(cfg)
ts = []
for _ in range(3):
    t = time.process_time()
    run_simulation(cfg, reqs)
    ts.append(time.process_time() - t)
print(min(ts))
"""


def cases(rate: float, perf_model: str | None = None) -> dict[str, dict]:
    wl = {"num_requests": 10_000, "rate": rate, "length_dist": "empirical:sharegpt"}
    base = {"model": "llama-3.1-8b", "gpu": "h100", "workload": wl, "seed": 1}
    if perf_model is not None:
        base["perf_model"] = perf_model
    return {
        "MB, fast-forward on": {**base, "fast_forward": True},
        "MB, fast-forward off": {**base, "fast_forward": False},
        "EB+, fast-forward on": {**base, "scheduler": {"batching": "ebplus"}},
        "AugServe + EB+": {
            "model": "llama-2-7b",
            "gpu": "a100-80gb",
            "scheduler": {"batching": "ebplus"},
            "augment": {"serving_policy": "augserve"},
            "workload": {"augmented": "infercept-mix", "num_requests": 1500, "rate": 4},
            **({"perf_model": perf_model} if perf_model is not None else {}),
        },
    }


CLUSTER = {
    "workload": {"trace": "servegen/servegen_aggregate_rate_10min.csv.gz"},
    "cluster": {
        "spec": "2x8:h100",
        "models": ["llama-2-7b", "llama-2-7b", "llama-2-13b", "llama-2-70b"],
        "placement": "warmserve",
        "mix": {"kind": "servegen", "rate": 4.0, "alpha": 1.0, "days": 0.1},
    },
}
"""A WarmServe cluster on 2.4 h of ServeGen rates (``--cluster``; needs shared/traces)."""


def run(tree: Path, cfg: dict) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(cfg)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, required=True)
    ap.add_argument("--new", type=Path, default=Path("."))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rate", type=float, default=5.744)
    ap.add_argument(
        "--perf-model",
        default=None,
        help="step model of every case (default: each tree's auto; 'roofline' is the same in "
        "trees whose auto step model differs, so only the engine's own cost is compared)",
    )
    ap.add_argument("--only", default=None, help="run only the cases whose name contains this")
    ap.add_argument("--cluster", action="store_true", help="also a WarmServe cluster case")
    ap.add_argument("--only-cluster", action="store_true", help="only the cluster case")
    args = ap.parse_args()
    todo = {} if args.only_cluster else cases(args.rate, args.perf_model)
    if args.cluster or args.only_cluster:
        todo["WarmServe cluster, ServeGen 2.4 h"] = CLUSTER
    print("| case | old (s) | new (s) | speed ratio |\n|---|---|---|---|")
    for name, cfg in todo.items():
        if args.only is not None and args.only not in name:
            continue
        old, new = [], []
        for _ in range(args.repeats):
            old.append(run(args.old.resolve(), cfg))
            new.append(run(args.new.resolve(), cfg))
        o, n = statistics.median(old), statistics.median(new)
        print(f"| {name} | {o:.3f} | {n:.3f} | {o / n:.2f} |", flush=True)


if __name__ == "__main__":
    main()
