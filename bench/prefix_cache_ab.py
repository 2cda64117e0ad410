"""Speed of the prefix-cache path, for A/B runs of two source trees: the simulation phase of
both Mooncake traces with caching off and on, three interleaved repeats, printed as JSON.

    PYTHONPATH=OLD/src python bench/prefix_cache_ab.py OLD/bench   # then the same with NEW
"""

from __future__ import annotations

import json
import sys

sys.path.insert(0, sys.argv[1])
from prefix_cache import config

from tidal.sim.run import load_requests, run_simulation


def main() -> None:
    out = {}
    for name in ("conversation", "synthetic"):
        cfgs = {"off": config(name, 1.0, prefix_caching=False), "on": config(name, 1.0)}
        reqs = load_requests(cfgs["on"])
        t: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(3):
            for c in ("off", "on"):
                t[c].append(run_simulation(cfgs[c], reqs).run_info["simulate_s"])
        out[name] = t
    print(json.dumps(out))


if __name__ == "__main__":
    main()
