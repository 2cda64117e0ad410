"""What ``Scheduler``'s plain forwarding methods cost on the simulator's hot path (issue 30):
the same run with ``schedule``, ``repeatable_steps`` and ``update`` rebound on the instance to
the policy's and the state's methods (the bound attributes the scheduler used before), against
the plain methods, interleaved in one process; process CPU time, medians.

    python bench/scheduler_calls.py [--repeats 8] [--fast-forward on|off]
"""

from __future__ import annotations

import argparse
import statistics
import time

import tidal.sim.single as sim_run
from tidal.sim.config import load_config
from tidal.sim.run import load_requests, run_simulation

_build = sim_run.build_scheduler
_bound = {"on": False}


def _build_maybe_bound(*args, **kw):
    s = _build(*args, **kw)
    if _bound["on"] and s.augmentation is None and s._before_apply is None:
        apply = s.state.apply
        s.schedule = s.policy.schedule
        s.repeatable_steps = s.policy.repeatable_steps
        s.update = lambda plan, out, end: apply(plan, end, plan.num_steps, out.sampled)
    return s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--fast-forward", choices=["on", "off"], default="off")
    args = ap.parse_args()
    sim_run.build_scheduler = _build_maybe_bound
    wl = {"num_requests": 10_000, "rate": 5.744, "length_dist": "empirical:sharegpt"}
    ff = args.fast_forward == "on"
    cfg = load_config(
        {"model": "llama-3.1-8b", "gpu": "h100", "workload": wl, "seed": 1, "fast_forward": ff,
         "perf_model": "auto-vidur"}  # the recorded results' step model (auto before issue 28)
    )
    reqs = load_requests(cfg)
    res: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.repeats):
        for bound in (False, True):
            _bound["on"] = bound
            t = time.process_time()
            run_simulation(cfg, reqs)
            res[bound].append(time.process_time() - t)
    p, b = statistics.median(res[False]), statistics.median(res[True])
    print(f"fast-forward {args.fast_forward}: plain {p:.3f} s, bound {b:.3f} s, +{p / b - 1:.1%}")


if __name__ == "__main__":
    main()
