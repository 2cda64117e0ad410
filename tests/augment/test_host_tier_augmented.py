"""The prefix cache's host tier in augmented runs (issue 14): a discarded context whose cached
blocks were evicted to host memory re-hits them from there, paying exactly ``blocks ×
block bytes / host link`` as a stall of its admitting step, and the waste accounting counts
them as spared. The tier is host memory of its own, beside the swap space."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tests.augment.helpers import make, spec, workload
from tests.augment.helpers import run as run_sched
from tidal.core.errors import ConfigError
from tidal.sim.config import load_config
from tidal.sim.run import host_cache_blocks, run_simulation
from tidal.workload.content import unique_content

T_TOK = 250.0
"""Host-link ns per KV token: a 16-token block loads in 4 µs (unit_perf computes 1 µs/token)."""


def _discarded(host_tier: int):
    """7 GPU blocks of 16 tokens. A: a 40-token prompt, 10 tokens, a 50 ms call returning 5,
    5 more; discarded at its call with 49 tokens computed (3 full blocks cached + 1 partial).
    B (80-token prompt, 3 tokens) arrives during the call and holds ⌈82/16⌉ = 6 blocks: the 3
    never-used ones, A's partial one, then A's last two cached blocks (evicted tail first,
    into the host tier if there is one). B is done long before A resumes."""
    rs = workload([0.0, 0.02], [40, 80], [spec((10, 50.0, 5), final=5), spec(final=3)])
    rs = dataclasses.replace(rs, content=unique_content(rs.prompt_len))
    s = make(
        "infercept",
        intercept="discard",
        prefix_caching=True,
        num_blocks=7,
        host_tier=host_tier,
        swap_ns_per_token=T_TOK,
    )
    rec, _ = run_sched(rs, s)
    return s, rec


@pytest.mark.parametrize(("tier", "from_host"), [(8, 2), (2, 2), (1, 1)])
def test_a_discarded_context_re_hits_its_evicted_blocks_from_host(
    tier: int, from_host: int
) -> None:
    """Without a tier A re-hits its first block only (16 tokens) and recomputes 33. With one,
    A's evicted blocks wait in host memory (a 1-block tier keeps the front one, block 1):
    A re-hits 16 + 16·from_host tokens, ``from_host`` blocks load at 16 × 250 ns = 4 µs each
    as a stall, and A finishes 16·from_host µs of prefill sooner, less that stall."""
    base, rec0 = _discarded(0)
    s, rec = _discarded(tier)
    aug0, aug = base.augmentation, s.augmentation
    assert (aug0.recompute_hit_tokens, aug0.recompute_tokens) == (16, 33)
    hit = 16 + 16 * from_host
    assert (aug.recompute_hit_tokens, aug.recompute_tokens) == (hit, 49 - hit)
    kv = s.kv
    assert kv.cache_stats().host_hit_tokens == 16 * from_host
    stall = from_host * 16 * int(T_TOK)  # blocks × (block bytes / host bandwidth)
    assert kv.cache_stats().host_load_ns == stall
    assert aug.stall_block_ns > 0  # the load is a transfer stall (swap waste)
    assert rec0.finish_ns[0] - rec.finish_ns[0] == 16 * from_host * 1_000 - stall
    assert rec0.finish_ns[1] == rec.finish_ns[1]  # B never meets the tier


def _augmented_cfg(**memory: float) -> dict:
    return {
        "model": "gpt-j-6b",
        "gpu": "a100-80gb",
        "workload": {"augmented": "infercept-mix", "rate": 3.0, "num_requests": 60},
        "augment": {"serving_policy": "vllm", "predictor": "oracle", "prefix_caching": True},
        "memory": {"num_blocks": 600, **memory},
        "seed": 4,
    }


def test_host_tier_in_an_augmented_simulation() -> None:
    """vLLM-style serving discards every context at its call; with a GPU cache of 600 blocks
    some are evicted before the call returns. A host tier turns some of those into host
    hits: more tokens are spared, each load is charged at the host link's speed (one
    ``ceil`` per admission), and fast-forward stays exact."""
    off = run_simulation(load_config(_augmented_cfg())).metrics
    cfg = load_config(_augmented_cfg(host_cache_gib=2.0))
    res = run_simulation(cfg)
    on = res.metrics
    assert "prefix_cache_host_hits" not in off
    assert on["num_completed"] == off["num_completed"] == 60
    assert on["prefix_cache_host_hits"] > 0
    assert on["recompute_hit_tokens"] > off["recompute_hit_tokens"]
    assert on["recompute_tokens"] < off["recompute_tokens"]
    _, ns = host_cache_blocks(cfg)
    loads = on["prefix_cache_host_hits"] // 16
    assert math.floor(loads * ns) / 1e9 <= on["prefix_cache_host_load_s"]
    assert on["prefix_cache_host_load_s"] <= (loads * ns + loads) / 1e9
    slow = run_simulation(
        load_config({**_augmented_cfg(host_cache_gib=2.0), "fast_forward": False})
    )
    for col in ("first_token_ns", "finish_ns", "cached_tokens"):
        assert (res.columns[col] == slow.columns[col]).all(), col


def test_host_tier_refused_where_it_cannot_apply() -> None:
    """A config asking for a host tier where nothing would be cached fails, naming the field
    and the fix: no prefix cache; augmented contexts not cached; a workload without content."""
    aug = _augmented_cfg(host_cache_gib=1.0)
    aug["augment"] = {**aug["augment"], "prefix_caching": False}
    with pytest.raises(ConfigError, match=r"host_cache_gib.*augment.prefix_caching"):
        load_config(aug)
    plain = {"workload": {"num_requests": 4, "rate": 1.0}, "memory": {"host_cache_gib": 1.0}}
    with pytest.raises(ConfigError, match=r"host_cache_gib.*prefix_caching is off"):
        load_config({**plain, "memory": {"host_cache_gib": 1.0, "prefix_caching": False}})
    with pytest.raises(ConfigError, match=r"memory.host_cache_gib.*no prompt content"):
        run_simulation(load_config(plain))
