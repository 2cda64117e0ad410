"""Speed of the prefix-cache path: the simulation of both Mooncake traces with caching off
and on, interleaved, CPU time (``time.process_time``) of each run, the ratio of the medians
printed as JSON with the load average. For A/B runs of two source trees, run it with each
tree's ``src`` and ``bench`` (the config comes from that tree's ``bench/prefix_cache.py``).

    PYTHONPATH=TREE/src python bench/prefix_cache_ab.py TREE/bench [REPEATS]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__))
from prefix_cache import config

from tidal.sim.run import load_requests, run_simulation


def main() -> None:
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    out: dict[str, object] = {"load_before": os.getloadavg()}
    for name in ("conversation", "synthetic"):
        cfgs = {"off": config(name, 1.0, prefix_caching=False), "on": config(name, 1.0)}
        reqs = load_requests(cfgs["on"])
        t: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(repeats):
            for c in ("off", "on"):
                t0 = time.process_time()
                run_simulation(cfgs[c], reqs)
                t[c].append(time.process_time() - t0)
        med = {c: statistics.median(v) for c, v in t.items()}
        out[name] = {"cpu_s": t, "median_cpu_s": med, "speed_on_over_off": med["off"] / med["on"]}
    out["load_after"] = os.getloadavg()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
