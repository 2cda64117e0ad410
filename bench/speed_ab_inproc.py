"""A/B simulator speed of two source trees in ONE process (issue 30): the trees' imports
alternate (``tidal`` is purged from ``sys.modules`` between them), so both see the same machine
state, which matters on a loaded shared machine where :mod:`speed_ab`'s separate processes
differ by more than the effect. Each turn runs the case once to warm up, then twice, and keeps
the minimum process CPU time; the order alternates (old, new), (new, old), … Prints the medians
and old/new (> 1: the new tree is faster), and the per-turn times.

    python bench/speed_ab_inproc.py --old /tmp/old --new . [--repeats 6] [--only "MB"]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed_ab import cases


def _load(tree: Path, cfg: dict):
    for m in [m for m in sys.modules if m == "tidal" or m.startswith("tidal.")]:
        del sys.modules[m]
    sys.path.insert(0, str(tree / "src"))
    try:
        from tidal.sim.config import load_config
        from tidal.sim.run import load_requests, run_simulation
    finally:
        sys.path.pop(0)
    c = load_config(cfg)
    return c, load_requests(c), run_simulation


def _turn(tree: Path, cfg: dict) -> float:
    c, reqs, run = _load(tree, cfg)
    run(c, reqs)
    best = float("inf")
    for _ in range(2):
        t = time.process_time()
        run(c, reqs)
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, required=True)
    ap.add_argument("--new", type=Path, default=Path("."))
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--rate", type=float, default=5.744)
    ap.add_argument("--only", default=None, help="run only the cases whose name contains this")
    args = ap.parse_args()
    old, new = args.old.resolve(), args.new.resolve()
    print("| case | old (s) | new (s) | old/new |\n|---|---|---|---|")
    for name, cfg in cases(args.rate).items():
        if args.only is not None and args.only not in name:
            continue
        res: dict[Path, list[float]] = {old: [], new: []}
        for i in range(args.repeats):
            for tree in (old, new) if i % 2 == 0 else (new, old):
                res[tree].append(_turn(tree, cfg))
        o, n = statistics.median(res[old]), statistics.median(res[new])
        print(f"| {name} | {o:.3f} | {n:.3f} | {o / n:.3f} |", flush=True)
        print(f"  old {[round(x, 3) for x in res[old]]}\n  new {[round(x, 3) for x in res[new]]}")


if __name__ == "__main__":
    main()
