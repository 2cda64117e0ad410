"""Prefix caching in cluster runs (issue 14): engines cache prompt prefixes by default, as one
instance does (``memory.prefix_caching``, ``--no-prefix-caching``), and report vLLM's counters
summed per model and per cluster.

The workload: 3 system prompts of 1,024 tokens (4 blocks of the cluster's 256) before a
200-token question, one request every 5 s (each finishes long before the next arrives, and
nothing is evicted), so exactly the 40 − 3 requests after each prompt's first hit 1,024
tokens. A cluster with one dedicated instance must give the single instance's per-request
cached tokens and hit rate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.conftest import needs_traces
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation
from tidal.workload.base import RequestSet
from tidal.workload.content import PrefixContent

pytestmark = needs_traces

N, SHARED, GROUPS = 40, 1024, 3


def shared_prefix_requests() -> RequestSet:
    group = np.arange(N, dtype=np.int64) % GROUPS
    content = PrefixContent.from_segments(group, np.full(N, SHARED, np.int64), np.ones(N, np.int64))
    arrival = np.arange(N, dtype=np.int64) * 5_000_000_000
    prompt = np.full(N, 200 + SHARED, np.int64)
    output = np.full(N, 16, np.int64)
    extra = {"model": np.zeros(N, np.int64)}
    return RequestSet(arrival, prompt, output, "shared prefixes", extra, content=content)


def cluster_run(prefix_caching: bool = True) -> Any:
    cfg = load_config(
        {
            "workload": {"trace": "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"},
            "memory": {"prefix_caching": prefix_caching},
            "cluster": {
                "spec": "1x1:h100",
                "models": ["llama-2-7b"],
                "placement": "dedicated",
                "warmup_s": 0,
                "mix": {"rate": 1.0, "replay_s": 60},
            },
        }
    )
    return run_simulation(cfg, shared_prefix_requests())


def test_cluster_hit_rate_equals_one_instance() -> None:
    res = cluster_run()
    rs = shared_prefix_requests()
    one = run_simulation(
        load_config(
            {
                "model": "llama-2-7b",
                "gpu": "h100",
                "workload": {"num_requests": N, "rate": 0.2},
                "memory": {"block_size": 256},
            }
        ),
        RequestSet(rs.arrival_ns, rs.prompt_len, rs.output_len, content=rs.content),
    )
    cached = np.asarray(res.columns["cached_tokens"])
    assert cached.tolist() == [0] * GROUPS + [SHARED] * (N - GROUPS)
    assert cached.tolist() == np.asarray(one.columns["cached_tokens"]).tolist()
    hits = (N - GROUPS) * SHARED
    assert res.metrics["prefix_cache_hits"] == hits == one.metrics["prefix_cache_hits"]
    assert res.metrics["prefix_cache_queries"] == N * (200 + SHARED)
    assert res.metrics["prefix_cache_hit_rate"] == one.metrics["prefix_cache_hit_rate"]
    assert res.metrics["prefix_caching"] is True
    per_model = res.extras["summary"]["per_model"]["llama-2-7b"]
    assert per_model["prefix_cache_hit_rate"] == res.metrics["prefix_cache_hit_rate"]
    # cached prompt tokens are not prefilled: the cached requests' TTFT is shorter
    ttft = np.asarray(res.columns["first_token_ns"]) - np.asarray(res.columns["arrival_ns"])
    assert ttft[GROUPS:].max() < ttft[:GROUPS].min()


def test_no_prefix_caching_turns_it_off() -> None:
    res = cluster_run(prefix_caching=False)
    assert not np.asarray(res.columns["cached_tokens"]).any()
    assert res.metrics["prefix_caching"] is False
    assert res.metrics["prefix_cache_hits"] == 0
