"""Simulator vs real engine on a shared-prefix workload (issue 14): with the same requests
(the real prompts realise the simulator's segments as shared token ids), the same scheduler
and the same block size, every request finds the same cached tokens in both backends."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.helpers import run, tiny_engine
from tidal.sim.config import load_config
from tidal.sim.run import load_requests, run_simulation
from tidal.workload.content import content_token_ids


def test_token_ids_share_exactly_the_segments() -> None:
    cfg = load_config(
        {
            "model": "tiny-llama",
            "workload": {"num_requests": 6, "rate": 1.0, "prompt_len": 5, "output_len": 2,
                         "shared_prefix_groups": 2, "shared_prefix_len": 9},
        }
    )  # fmt: skip
    reqs = load_requests(cfg)
    toks = content_token_ids(reqs.content, reqs.prompt_len, np.random.default_rng(0), 256)
    ids, _, _ = reqs.content.segments()
    for i, t in enumerate(toks):
        assert len(t) == reqs.prompt_len[i]
        for j, u in enumerate(toks):
            same = ids[i] == ids[j]
            assert (t[:9] == u[:9]) == same
            if i != j:
                assert t[9:] != u[9:]  # own questions


@pytest.mark.parametrize("num_blocks", [256, 16])
def test_cached_tokens_per_request_equal_in_both_backends(num_blocks: int) -> None:
    """All requests arrive at once, so the step sequence depends on scheduling alone; the
    budget of 32 tokens chunks the 24-token system prompts, so later requests also hit
    blocks that are scheduled but not yet computed (vLLM caches a block once full); with
    16 blocks requests are preempted and cached blocks evicted."""
    cfg = load_config(
        {
            "model": "tiny-llama",
            "memory": {"num_blocks": num_blocks, "block_size": 4, "watermark": 0.0},
            "scheduler": {"token_budget": 32, "max_seqs": 8},
            "workload": {"num_requests": 10, "rate": "inf", "prompt_len": 10, "output_len": 5,
                         "length_dist": "uniform", "shared_prefix_groups": 2,
                         "shared_prefix_len": 24},
        }
    )  # fmt: skip
    reqs = load_requests(cfg)
    sim = run_simulation(cfg, reqs)
    prompts = content_token_ids(reqs.content, reqs.prompt_len, np.random.default_rng(1), 256)
    rt = tiny_engine(num_kv_blocks=num_blocks, block_size=4, token_budget=32, max_seqs=8)
    _, real = run(rt, prompts, [int(o) for o in reqs.output_len])
    real_cached = [r.num_cached_tokens for r in real]
    assert real_cached == sim.columns["cached_tokens"].tolist()
    assert sum(real_cached) > 0
    assert rt.scheduler.kv.cache_hits == sim.metrics["prefix_cache_hits"]
    assert rt.scheduler.num_preemptions == sim.metrics["num_preemptions"]
    assert (num_blocks < 100) == (sim.metrics["num_preemptions"] > 0)
