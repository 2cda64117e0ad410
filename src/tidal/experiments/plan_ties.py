"""The planner's ties: deployments that serve the traffic identically, and what differs in them.

Two evaluated deployments tie when the same GPUs (type, TP, replica count) serve the traffic
with every service metric equal (:data:`SERVICE_METRICS`): a knob that made no difference. The
planner's top list keeps one per tie group, whose candidate entry names the others
(``same_as``) and the knobs that vary within the group (``varied``).
"""

from __future__ import annotations

import json
from typing import Any

from tidal.experiments.plan_options import Evaluation


def sorted_values(values: set[Any]) -> list[Any]:
    """``values`` sorted; by their string forms where the types cannot be compared."""
    try:
        return sorted(values)
    except TypeError:  # mixed types
        return sorted(values, key=str)


SERVICE_METRICS = (
    "ttft_", "tpot_", "itl_", "e2e_", "queue_", "goodput", "request_throughput",
    "token_throughput", "output_token_throughput", "slo_attainment", "num_completed",
    "num_requests", "num_preemptions", "duration_s", "prefix_cache_hit", "effective_throughput",
    "normalized_latency_",
)  # fmt: skip
"""Prefixes of the metrics that say how the traffic was served (latencies, throughput, SLO,
completions, preemptions, cache hits) — not the deployment's configuration (KV plan, roofline)
nor a policy's internal state (EB⁺'s controller estimates, which differ between max_seqs even
when it never left mixed batching and served exactly as MB)."""


def same_service(a: Evaluation, b: Evaluation) -> bool:
    """The same GPUs (type, TP, capacity) serving the traffic identically: every metric of
    :data:`SERVICE_METRICS` equal, the same ones present (NaN equal to NaN)."""
    ca, cb = a.option.config, b.option.config
    if ca is None or cb is None or a.capacity != b.capacity:
        return False
    if (ca.gpu, ca.tp) != (cb.gpu, cb.tp):
        return False

    def served(m: dict[str, Any]) -> str:
        kept = {k: v for k, v in m.items() if k.startswith(SERVICE_METRICS)}
        return json.dumps(kept, sort_keys=True, default=str)

    return served(a.metrics) == served(b.metrics)


def tie_fields(group: list[Evaluation], ev: Evaluation) -> dict[str, Any]:
    """``same_as`` (the tied deployments' labels) and ``varied`` (each knob that differs
    within the tie → its values) of ``ev`` in its tie ``group``; empty when it is alone."""
    if len(group) < 2:
        return {}
    keys = sorted({k for e in group for k in e.option.values})
    varied = {
        k: sorted_values({e.option.values.get(k) for e in group})
        for k in keys
        if len({str(e.option.values.get(k)) for e in group}) > 1
    }
    same = [f"{e.capacity}× {e.option.label}" for e in group if e is not ev]
    return {"same_as": same, "varied": varied}
