"""``prefix-aware`` routing (SGLang's / vLLM router's cache_aware policy on the replicas'
prefix caches): requests of one system prompt gather on the replica that caches it."""

from __future__ import annotations

import numpy as np

from tidal.experiments.replicas import run_replicated
from tidal.sim.config import load_config

W = {
    "num_requests": 400,
    "rate": 40.0,
    "prompt_len": 64,
    "output_len": 32,
    "length_dist": "uniform",
    "shared_prefix_groups": 4,
    "shared_prefix_len": 2048,
}


def run(router: str, workload: dict | None = None, ff: bool = True):
    cfg = load_config({"workload": workload or W, "seed": 7, "fast_forward": ff})
    return run_replicated(cfg, 4, router)


def test_prefix_aware_routing_hits_more_than_load_balancing() -> None:
    aware, least, rr = run("prefix-aware"), run("least-loaded"), run("round-robin")
    hits = {k: r.columns["cached_tokens"].sum() for k, r in (("a", aware), ("l", least), ("r", rr))}
    assert hits["a"] > hits["l"]
    assert hits["a"] > hits["r"]
    # once warm, every request of a group goes to one replica: it misses only on first sight
    first = aware.columns["cached_tokens"] == 0
    assert first.sum() <= 4 * 2
    assert aware.metrics["ttft_mean_s"] < least.metrics["ttft_mean_s"]


def test_prefix_aware_without_content_is_least_loaded() -> None:
    plain = {k: v for k, v in W.items() if not k.startswith("shared")}
    a, b = run("prefix-aware", plain), run("least-loaded", plain)
    for col in ("instance", "first_token_ns", "finish_ns"):
        np.testing.assert_array_equal(a.columns[col], b.columns[col])


def test_prefix_aware_fast_forward_is_exact() -> None:
    a, b = run("prefix-aware"), run("prefix-aware", ff=False)
    for col in ("instance", "first_token_ns", "finish_ns", "cached_tokens"):
        np.testing.assert_array_equal(a.columns[col], b.columns[col])
