"""Routers over a pool of identical instances (moved here from
``experiments/replicas.py``, which re-exports them; also the per-pool routers of a
disaggregated deployment, ``sim/disagg.py``).

Routers (deterministic, ties to the lowest index):

* ``round-robin`` — request i goes to replica i mod R, so each replica serves a fixed
  subsequence of the trace exactly as if it ran alone (a test checks this identity);
* ``least-loaded`` — the replica with the fewest unfinished requests (running + waiting) when
  the request arrives (join-the-shortest-queue, as Vidur's LOR global scheduler and vLLM's
  production router do); ties go to the first replica after the previous choice, cyclically
  (with lowest-index ties, replica 0 takes every request of a quiet period);
* ``prefix-aware`` — SGLang's / vLLM router's ``cache_aware`` policy on the replicas' actual
  prefix caches: while the load is balanced, the replica whose cache holds the longest prefix
  of the request, if that covers more than ``CACHE_THRESHOLD`` of the prompt, else the replica
  whose cache holds the least content; once the busiest replica has more than
  ``BALANCE_ABS`` requests over the idlest and more than ``BALANCE_REL`` times as many, the
  least-loaded one (defaults of both routers: 0.3, 64, 1.5). Without content (no prefix
  cache) it is ``least-loaded``.
"""

from __future__ import annotations

from collections.abc import Callable

from tidal.core.errors import ConfigError
from tidal.core.request import Request
from tidal.sim.instance import SimInstance

ROUTERS = ("least-loaded", "round-robin", "prefix-aware")
CACHE_THRESHOLD = 0.3
BALANCE_ABS = 64
BALANCE_REL = 1.5


def make_router(name: str, instances: list[SimInstance]) -> Callable[[Request], int]:
    if name == "round-robin":
        n = len(instances)
        return lambda req: req.request_id % n
    if name == "least-loaded":
        scheds = [inst.scheduler for inst in instances]
        n = len(scheds)
        last = [n - 1]

        def least_loaded(req: Request) -> int:
            best, best_load = 0, -1
            for j in range(1, n + 1):
                i = (last[0] + j) % n
                s = scheds[i]
                load = len(s.running) + len(s.waiting)
                if best_load < 0 or load < best_load:
                    best, best_load = i, load
            last[0] = best
            return best

        return least_loaded
    if name == "prefix-aware":
        return _prefix_aware(instances, make_router("least-loaded", instances))
    raise ConfigError("router", f"unknown value {name!r}", f"valid: {', '.join(ROUTERS)}")


def _prefix_aware(
    instances: list[SimInstance], fallback: Callable[[Request], int]
) -> Callable[[Request], int]:
    scheds = [inst.scheduler for inst in instances]

    def route(req: Request) -> int:
        loads = [len(s.running) + len(s.waiting) for s in scheds]
        hi, lo = max(loads), min(loads)
        if req.content is None or (hi - lo > BALANCE_ABS and hi > BALANCE_REL * lo):
            return fallback(req)
        hits = [s.kv.match_prefix(req)[0] for s in scheds]  # a query: nothing is taken
        best = max(range(len(hits)), key=lambda i: (hits[i], -loads[i]))
        if hits[best] > CACHE_THRESHOLD * req.prompt_len:
            return best
        # blocks holding content: in use, or free but cached
        held = [
            s.kv.num_blocks - s.kv.num_free_blocks + s.kv.num_cached_free_blocks() for s in scheds
        ]
        return min(range(len(held)), key=lambda i: (held[i], loads[i]))

    return route
