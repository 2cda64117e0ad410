"""One million requests through one instance: wall time and peak memory (target ≤ 4 GiB).

    python bench/sim_million.py [--requests 1000000]

Llama-3.1-8B on H100, ShareGPT lengths, Poisson at 80% of capacity (as bench/sim_speed.py).
Peak RSS is the process's ru_maxrss, so it includes the interpreter and the workload columns.
"""

from __future__ import annotations

import argparse
import resource
import time

from _common import PINNED_PERF_MODEL, save
from sim_speed import config

from tidal.sim.run import load_requests, run_simulation


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=None, help="req/s (default: 80% of capacity)")
    args = ap.parse_args()
    rate = args.rate
    if rate is None:
        rate = round(
            0.8 * run_simulation(config(4000, float("inf"), True, PINNED_PERF_MODEL)).metrics[
                "request_throughput"], 3
        )  # fmt: skip
    cfg = config(args.requests, rate, True, PINNED_PERF_MODEL)  # the recorded run's step model
    t0 = time.perf_counter()
    reqs = load_requests(cfg)
    res = run_simulation(cfg, reqs)
    wall = time.perf_counter() - t0
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    data = {
        "requests": args.requests,
        "rate_req_s": rate,
        "wall_s": wall,
        "simulate_s": res.run_info["simulate_s"],
        "peak_rss_gib": rss_gib,
        "num_completed": res.metrics["num_completed"],
        "simulated_s": res.metrics["duration_s"],
    }
    print(
        f"{args.requests:,} requests: {wall:.1f} s wall ({res.run_info['simulate_s']:.1f} s "
        f"simulating), peak RSS {rss_gib:.2f} GiB, completed {res.metrics['num_completed']:,}, "
        f"{res.metrics['duration_s'] / 3600:.1f} simulated hours"
    )
    save("sim_million", data)


if __name__ == "__main__":
    main()
