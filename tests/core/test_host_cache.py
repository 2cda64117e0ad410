"""The prefix cache's host-memory tier (vLLM's CPU KV offload): invariants under random
operations (hypothesis), hits never on content not computed before, host hits within the
tier's capacity, and the transfer time of a hit computed by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.test_prefix_cache import (
    BS,
    admit,
    make_requests,
    prompt_st,
    reference_hit,
    used_by_reqs_and_bulk_check,
)
from tidal.core.prefix_cache import PrefixCachingKVManager
from tidal.core.request import Request
from tidal.sim.config import load_config
from tidal.sim.run import host_cache_blocks, run_simulation

OPS = ["admit", "admit", "grow", "take", "free", "preempt", "filler"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(prompt_st, st.integers(0, 6)), min_size=1, max_size=8),
    st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 99)), min_size=30, max_size=80),
    st.integers(6, 30),
    st.integers(1, 12),
)
def test_invariants_with_a_host_tier(spec: list, ops: list, num_blocks: int, host: int) -> None:
    """No leaked or double-freed block (GPU and host), host blocks within capacity, a load
    never larger than the tier, and every hit (GPU or host) is content some request computed
    before (the per-block reference of tests/test_prefix_cache.py bounds it)."""
    prompts, extra = [p for p, _ in spec], [e for _, e in spec]
    reqs = make_requests(prompts, extra)
    kv = PrefixCachingKVManager(num_blocks, BS, 0.0, 0, host, load_ns_per_block=3.5)
    tier = kv.host_tier
    assert tier is not None
    waiting, running = list(reqs), []
    seen: set[tuple[object, ...]] = set()
    prompt_of = {r.request_id: p for r, p in zip(reqs, prompts, strict=True)}
    bulk = 0
    for op, x in ops:
        if op == "admit" and waiting:
            req = waiting[x % len(waiting)]
            ref = reference_hit(seen, req, prompt_of[req.request_id])
            before = kv.cache_stats().host_hit_tokens
            hit = admit(kv, req, chunk=1 + x % 7)
            if hit >= 0:
                assert hit <= ref, "a hit on content never computed"
                loaded = kv.cache_stats().host_hit_tokens - before
                assert loaded <= host * BS
                event("a host hit" if loaded else "no host hit")
                assert kv.pending_load_ns == math.ceil(loaded // BS * 3.5)
                kv.pending_load_ns = 0
                waiting.remove(req)
                running.append(req)
                remember_computed(seen, req, prompt_of[req.request_id])
        elif op == "grow" and running:
            req = running[x % len(running)]
            n = min(1 + x % 5, req.num_tokens - req.num_computed_tokens)
            if n > 0 and kv.blocks_for(req.num_computed_tokens + n) - req.num_blocks <= (
                kv.num_free_blocks
            ):
                kv.allocate(req, req.num_computed_tokens + n)
                req.num_computed_tokens += n
                remember_computed(seen, req, prompt_of[req.request_id])
        elif op == "filler":  # a request without content: its blocks evict cached ones
            filler = Request(1000 + len(prompt_of), 0, BS * (1 + x % 6), 1)
            prompt_of[filler.request_id] = []
            if admit(kv, filler) >= 0:
                running.append(filler)
        elif op == "take" and kv.num_free_blocks:
            k = 1 + x % kv.num_free_blocks
            kv.take(k)
            bulk += k
        elif op in ("free", "preempt") and running:
            req = running.pop(x % len(running))
            kv.free(req)
            req.num_computed_tokens = 0
            if op == "preempt":
                waiting.append(req)
        used_by_reqs_and_bulk_check(kv, running, bulk)
        assert tier.used <= host
    for req in running:
        kv.free(req)
    used_by_reqs_and_bulk_check(kv, [], bulk)
    assert kv.num_free_blocks == kv.num_blocks - bulk


def remember_computed(seen: set[tuple[object, ...]], req: Request, prompt: list) -> None:
    """The reference learns ``req``'s full blocks of computed tokens (the cache registers a
    block once it is full of scheduled tokens)."""
    tokens: list[object] = [tid for i, n in prompt for tid in [(i, n, k) for k in range(n)]]
    tokens += [("own", req.request_id, k) for k in range(req.num_tokens - len(tokens))]
    for j in range(req.num_computed_tokens // BS):
        seen.add(tuple(tokens[: (j + 1) * BS]))


def test_hand_computed_host_hit_and_transfer_time() -> None:
    """a computes a 16-token prompt + 4 own tokens (5 blocks of 4) and is freed; a 24-token
    request without content then takes all 6 GPU blocks: the never-used one, then a's five,
    evicted into an 8-block host tier. b, with the same 16 tokens then its own 4, hits all 4
    prompt blocks in host memory: 4 blocks load at 2.5 ms each = 10 ms, charged once, and
    they are GPU-cached again; a's own question block stays in host memory."""
    a, b = make_requests([[(0, 16), (1, 4)], [(0, 16), (2, 4)]], [0, 0])
    kv = PrefixCachingKVManager(6, BS, 0.0, 0, host_cache_blocks=8, load_ns_per_block=2.5e6)
    tier = kv.host_tier
    assert tier is not None
    assert admit(kv, a) == 0
    kv.free(a)
    filler = Request(7, 0, 24, 1)
    assert admit(kv, filler) == 0
    assert kv.num_evicted_blocks == 5
    assert tier.used == 5
    kv.free(filler)
    kv.check([])
    assert kv.match_prefix(b) == (16, 0)
    assert admit(kv, b) == 16
    assert kv.pending_load_ns == 10_000_000
    assert kv.cache_stats().host_hit_tokens == 16
    assert tier.used == 1
    assert b.num_blocks == 5  # 4 loaded + 1 computed
    kv.check([b])


def test_host_tier_size_and_load_time_from_the_config() -> None:
    """Llama-3.1-8B: 2·32 layers·8 KV heads·128·2 B = 131,072 B per token, so a 16-token
    block is 2 MiB; 4 GiB hold 2048 blocks; at 0.5 × the H100's 64 GB/s a block loads in
    2,097,152 / 32e9 s = 65,536 ns."""
    w = {"num_requests": 4, "rate": 1.0, "shared_prefix_groups": 1, "shared_prefix_len": 64}
    cfg = load_config(
        {"workload": w, "memory": {"host_cache_gib": 4}, "augment": {"host_link_efficiency": 0.5}}
    )
    blocks, ns = host_cache_blocks(cfg)
    assert blocks == 2048
    assert ns == pytest.approx(65_536)
    assert host_cache_blocks(load_config({"workload": w})) == (0, 0.0)


def test_host_tier_in_a_simulation() -> None:
    """A GPU cache too small for the shared prompts: with a host tier some hits come from
    host memory, each load is charged to its admitting step, the tier-less run is unchanged
    by the option's default, and the hit rate does not fall."""
    w = {
        "num_requests": 120,
        "rate": 40.0,
        "shared_prefix_groups": 16,
        "shared_prefix_len": 1024,
        "prompt_len": 64,
        "output_len": 16,
    }
    base = {"workload": w, "memory": {"num_blocks": 400}}
    off = run_simulation(load_config(base)).metrics  # the link setting is refused without a tier
    cfg = load_config({**base, "memory": {"num_blocks": 400, "host_cache_gib": 1.0},
                       "augment": {"host_link_efficiency": 0.5}})  # fmt: skip
    on = run_simulation(cfg).metrics
    assert "prefix_cache_host_hits" not in off
    assert on["prefix_cache_host_hits"] > 0
    assert on["prefix_cache_hit_rate"] >= off["prefix_cache_hit_rate"]
    _, ns = host_cache_blocks(cfg)
    loads = on["prefix_cache_host_hits"] // 16
    # one ceil per admission: within one ns per load of the exact product
    assert loads * ns / 1e9 <= on["prefix_cache_host_load_s"] <= (loads * ns + loads) / 1e9
