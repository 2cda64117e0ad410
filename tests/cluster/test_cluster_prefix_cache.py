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
import pytest

from tests.conftest import needs_traces
from tidal.core.errors import ConfigError
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
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


def cluster_cfg(prefix_caching: bool = True, **cluster: Any) -> dict[str, Any]:
    return {
        "workload": {"trace": "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"},
        "memory": {"prefix_caching": prefix_caching},
        "cluster": {
            "spec": "1x1:h100",
            "models": ["llama-2-7b"],
            "placement": "dedicated",
            "warmup_s": 0,
            "mix": {"rate": 1.0, "replay_s": 60},
            **cluster,
        },
    }


def cluster_run(prefix_caching: bool = True) -> Any:
    return run_simulation(load_config(cluster_cfg(prefix_caching)), shared_prefix_requests())


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


def test_host_tier_in_a_cluster() -> None:
    """``gpu_memory_utilization`` 0.173 leaves the engine 9 KV blocks of 256 tokens; every
    request holds 5 (1,224 + 16 tokens), so between two requests of a group the other two
    take 10 blocks > 9 and no prefix survives on the GPU: no hit at all. With a 2 GiB host
    tier (16 blocks of 128 MiB) every evicted prefix waits in host memory, so the 37 requests
    after each group's first hit their 4 blocks there; each admission loads 4 blocks at
    128 MiB / (0.8 × 64 GB/s) = 2,621,440 ns each."""
    small = {"gpu_memory_utilization": 0.173}
    none = run_simulation(load_config(cluster_cfg(**small)), shared_prefix_requests())
    cfg = cluster_cfg(**small)
    cfg["memory"]["host_cache_gib"] = 2.0
    res = run_simulation(load_config(cfg), shared_prefix_requests())
    assert none.metrics["prefix_cache_hits"] == 0
    assert "prefix_cache_host_hits" not in none.metrics
    cached = np.asarray(res.columns["cached_tokens"])
    assert cached.tolist() == [0] * GROUPS + [SHARED] * (N - GROUPS)
    m = res.metrics
    assert m["prefix_cache_host_hits"] == m["prefix_cache_hits"] == (N - GROUPS) * SHARED
    assert m["prefix_cache_host_blocks"] == 16
    block_bytes = get_model("llama-2-7b").kv_bytes_per_token_per_gpu(1) * 256
    assert block_bytes == 2**27
    load_ns = block_bytes / (0.8 * get_gpu("h100").pcie_gbs * 1e9) * 1e9
    assert load_ns == 2_621_440
    assert m["prefix_cache_host_load_s"] == (N - GROUPS) * 4 * 2_621_440 / 1e9
    per_model = res.extras["summary"]["per_model"]["llama-2-7b"]
    assert per_model["prefix_cache_host_hits"] == m["prefix_cache_host_hits"]
    # loading 1,024 tokens over PCIe (10.5 ms) beats prefilling them
    assert (ttft(res)[GROUPS:] < ttft(none)[GROUPS:]).all()


def ttft(res: Any) -> np.ndarray:
    return np.asarray(res.columns["first_token_ns"]) - np.asarray(res.columns["arrival_ns"])


def test_host_tier_needs_prompt_content_in_a_cluster() -> None:
    """The cluster's own mixes have no prompt content: a host tier there is refused."""
    cfg = cluster_cfg()
    cfg["memory"]["host_cache_gib"] = 1.0
    with pytest.raises(ConfigError, match=r"memory.host_cache_gib.*no prompt content"):
        run_simulation(load_config(cfg))
