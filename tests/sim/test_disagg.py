"""Disaggregated prefill/decode (sim/disagg.py): the KV transfer on an idle link is hand-derived,
the TTFT breakdown telescopes for every request, fast-forward changes nothing, and a KV-bound
decode pool loses no request while every held prefill block comes back."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidal.sim.config import load_config
from tidal.sim.disagg_metrics import PARTS, ttft_breakdown
from tidal.sim.run import run_simulation

COLS = (
    "arrival_ns", "first_scheduled_ns", "first_token_ns", "finish_ns", "output_tokens",
    "num_preemptions", "prefill_instance", "decode_instance", "prefill_start_ns",
    "prefill_end_ns", "kv_transfer_start_ns", "kv_transfer_end_ns", "kv_transfer_bytes",
)  # fmt: skip


def _run(deployment, fast_forward=True, seed=0, **workload):
    wl = {"num_requests": 1, "rate": 1.0, "prompt_len": 4096, "output_len": 8, **workload}
    cfg = load_config(
        {
            "seed": seed,
            "model": "llama-3.1-8b",
            "gpu": "h100",
            "perf_model": "roofline",
            "fast_forward": fast_forward,
            "workload": wl,
            "deployment": deployment,
        }
    )
    return run_simulation(cfg)


def test_idle_link_transfer_is_bytes_over_bandwidth_plus_latency():
    link = {"link": "ib-ndr", "bandwidth_gbs": 50, "efficiency": 1.0, "latency_us": 10}
    res = _run({"prefill": {"tp": 1}, "decode": {"tp": 1}, "kv_transfer": link})
    c = res.columns
    # Llama-3.1-8B BF16 KV: 2 (K, V) × 32 layers × 8 KV heads × 128 dims × 2 bytes per token
    nbytes = 4096 * 2 * 32 * 8 * 128 * 2
    assert c["kv_transfer_bytes"][0] == nbytes == res.metrics["kv_transfer_bytes"]
    took = int(c["kv_transfer_end_ns"][0] - c["kv_transfer_start_ns"][0])
    assert took == math.ceil(nbytes / 50e9 * 1e9) + 10_000
    assert res.metrics["kv_transfer_stall_s"] == 0.0  # nothing shared the link
    # an idle decode instance starts the transfer at the hand-off and the first token follows
    assert c["kv_transfer_start_ns"][0] == c["prefill_end_ns"][0]
    assert c["first_token_ns"][0] > c["kv_transfer_end_ns"][0]


def test_decode_tp_sends_every_rank_its_shard():
    link = {"link": "ib-ndr", "bandwidth_gbs": 50, "efficiency": 1.0, "latency_us": 0}
    res = _run({"prefill": {"tp": 1}, "decode": {"tp": 2}, "kv_transfer": link})
    c = res.columns
    nbytes = 4096 * 2 * 32 * 8 * 128 * 2  # 4 KV heads on each of 2 ranks: the same total
    assert c["kv_transfer_bytes"][0] == nbytes
    # the prefill side's one port (50 GB/s) is the bottleneck, not the decode side's two
    took = int(c["kv_transfer_end_ns"][0] - c["kv_transfer_start_ns"][0])
    assert took == math.ceil(nbytes / 50e9 * 1e9)


def _check_breakdown(res) -> None:
    c = res.columns
    assert (c["first_token_ns"] >= 0).all()
    assert (c["output_tokens"] == c["output_len"]).all()
    parts = ttft_breakdown(c)
    assert set(PARTS) <= set(parts)  # (and ``handoff`` with a request overhead)
    total = sum(parts.values())
    assert np.array_equal(total, c["first_token_ns"] - c["arrival_ns"])
    for k in parts:
        assert (parts[k] >= 0).all(), k
    assert (parts["transfer"] > 0).all()
    assert (parts["first_decode"] > 0).all()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    p=st.integers(1, 3),
    d=st.integers(1, 3),
    rate=st.sampled_from([5.0, 40.0, 200.0]),
    seed=st.integers(0, 1000),
    router=st.sampled_from(["least-loaded", "round-robin"]),
)
def test_breakdown_sums_to_ttft_for_every_request(p, d, rate, seed, router):
    dep = {"prefill": {"instances": p}, "decode": {"instances": d}, "router": router}
    res = _run(
        dep, num_requests=60, rate=rate, prompt_len=512, output_len=32,
        length_dist="uniform", seed=seed,
    )  # fmt: skip
    _check_breakdown(res)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    p=st.integers(1, 2),
    d=st.integers(1, 2),
    rate=st.sampled_from([10.0, 80.0]),
    seed=st.integers(0, 1000),
    blocks=st.sampled_from([None, 300]),
    batching=st.sampled_from(["mb", "prefill-first"]),
    groups=st.sampled_from([0, 3]),
)
def test_fast_forward_changes_no_request(p, d, rate, seed, blocks, batching, groups):
    decode = {"instances": d, "scheduler": {"max_seqs": 16, "batching": batching}}
    if blocks is not None:
        decode["memory"] = {"num_blocks": blocks}
    dep = {"prefill": {"instances": p}, "decode": decode}
    wl = {"num_requests": 40, "rate": rate, "prompt_len": 256, "output_len": 64,
          "length_dist": "uniform", "seed": seed}  # fmt: skip
    if groups:  # prefix caching on both pools
        wl.update(shared_prefix_groups=groups, shared_prefix_len=128)
    a, b = _run(dep, True, **wl), _run(dep, False, **wl)
    for k in COLS:
        assert np.array_equal(a.columns[k], b.columns[k]), k


def test_kv_bound_decode_pool_loses_nothing_and_prefill_blocks_come_back():
    # 120 blocks of 16 tokens hold ~3 of these requests (512 + 128 tokens = 40 blocks each)
    dep = {"prefill": {"instances": 2}, "decode": {"memory": {"num_blocks": 120}}}
    res = _run(dep, num_requests=40, rate=200.0, prompt_len=512, output_len=128)
    _check_breakdown(res)
    parts = ttft_breakdown(res.columns)
    assert (parts["kv_wait"] > 0).sum() > 10  # decode admission waited for KV space
    pools = res.metrics["pools"]
    pre = pools["prefill"]
    assert pre["num_free_blocks_end"] == pre["instances"] * pre["num_blocks"]
    assert pools["decode"]["num_free_blocks_end"] == 120


def test_prefix_caching_on_both_pools():
    dep = {"prefill": {"instances": 1}, "decode": {"instances": 2}}
    res = _run(
        dep, num_requests=40, rate=50.0, prompt_len=1024, output_len=16,
        shared_prefix_groups=2, shared_prefix_len=768,
    )  # fmt: skip
    _check_breakdown(res)
    pools = res.metrics["pools"]
    assert pools["prefill"]["prefix_cache_hit_rate"] > 0.3
    assert pools["decode"]["prefix_cache_hit_rate"] > 0.3
    assert pools["prefill"]["num_free_blocks_end"] == pools["prefill"]["num_blocks"]
    tokens = int(res.columns["prompt_len"].sum())  # shared prefix + own tokens
    assert 0 < res.metrics["kv_transfer_bytes"] < tokens * 131072


def test_a_repeated_prefix_is_transferred_once_per_decode_instance():
    dep = {"prefill": {"instances": 2}, "decode": {"instances": 1}}
    res = _run(
        dep, num_requests=12, rate=20.0, prompt_len=256, output_len=8,
        shared_prefix_groups=1, shared_prefix_len=768,
    )  # fmt: skip
    _check_breakdown(res)
    c = res.columns
    sent = c["kv_transfer_bytes"] // 131072  # tokens (Llama-3.1-8B: 131072 B per token)
    first = int(np.argmin(c["kv_transfer_start_ns"]))
    assert sent[first] == c["prompt_len"][first]  # nothing cached on the decode side yet
    others = np.arange(len(sent)) != first
    # the 768 shared tokens (48 full blocks) are found in the decode instance's cache
    assert (sent[others] == c["prompt_len"][others] - 768).all()


def test_shared_slow_link_stalls_transfers_and_closed_loop_completes():
    link = {"link": "eth-100", "efficiency": 1.0}
    dep = {"prefill": {"instances": 3}, "decode": {"instances": 1}, "kv_transfer": link}
    res = _run(dep, num_requests=30, rate=None, concurrency=6, prompt_len=2048, output_len=16)
    _check_breakdown(res)
    m = res.metrics
    assert m["num_completed"] == 30
    assert m["kv_transfer_stall_s"] > 0  # transfers from 3 prefill instances share rx:d0
    parts = ttft_breakdown(res.columns)
    idle = math.ceil(2048 * 131072 / 12.5e9 * 1e9) + 30_000
    assert parts["transfer"].min() >= idle - 1
    assert parts["transfer"].max() > idle


# ---------------------------------------------------------------------- push (layer-wise)


def test_push_exposes_only_the_tail_on_an_idle_link():
    nbytes = 4096 * 131072  # Llama-3.1-8B: 32 layers, 131072 B of KV per token
    for gbs in (50, 1):  # a fast link (the last layer's share is exposed), a slow one
        link = {"protocol": "push", "link": "ib-ndr", "bandwidth_gbs": gbs, "efficiency": 1.0,
                "latency_us": 10}  # fmt: skip
        res = _run({"prefill": {"tp": 1}, "decode": {"tp": 1}, "kv_transfer": link})
        c = {k: int(v[0]) for k, v in res.columns.items() if k.endswith("_ns")}
        assert c["kv_transfer_start_ns"] == c["prefill_start_ns"]  # streams with the prefill
        assert c["decode_alloc_ns"] <= c["prefill_start_ns"]  # decode blocks reserved first
        link_done = c["kv_transfer_start_ns"] + math.ceil(nbytes / (gbs * 1e9) * 1e9)
        tail = c["prefill_end_ns"] + math.ceil(nbytes / (32 * gbs * 1e9) * 1e9)
        assert c["kv_transfer_end_ns"] == max(link_done, tail) + 10_000
        _check_breakdown(res)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    p=st.integers(1, 2),
    d=st.integers(1, 2),
    rate=st.sampled_from([10.0, 80.0]),
    seed=st.integers(0, 1000),
    blocks=st.sampled_from([None, 300]),
    link=st.sampled_from(["auto", "eth-100"]),
)
def test_push_breakdown_and_fast_forward(p, d, rate, seed, blocks, link):
    decode = {"instances": d, "scheduler": {"max_seqs": 16}}
    if blocks is not None:
        decode["memory"] = {"num_blocks": blocks}
    dep = {"prefill": {"instances": p}, "decode": decode,
           "kv_transfer": {"protocol": "push", "link": link}}  # fmt: skip
    wl = {"num_requests": 40, "rate": rate, "prompt_len": 256, "output_len": 64,
          "length_dist": "uniform", "seed": seed}  # fmt: skip
    a, b = _run(dep, True, **wl), _run(dep, False, **wl)
    _check_breakdown(a)
    for k in (*COLS, "decode_alloc_ns"):
        assert np.array_equal(a.columns[k], b.columns[k]), k
    pre = a.metrics["pools"]["prefill"]
    assert pre["num_free_blocks_end"] == pre["instances"] * pre["num_blocks"]


def test_push_hides_most_of_a_slow_transfer_behind_the_prefill():
    base = {"prefill": {"instances": 1}, "decode": {"instances": 1}}
    wl = {"num_requests": 10, "rate": 1.0, "prompt_len": 8192, "output_len": 8}
    pull = _run({**base, "kv_transfer": {"link": "roce-400"}}, **wl)
    push = _run({**base, "kv_transfer": {"link": "roce-400", "protocol": "push"}}, **wl)
    t_pull = ttft_breakdown(pull.columns)["transfer"]
    t_push = ttft_breakdown(push.columns)["transfer"]
    assert (t_push < t_pull).all()
    assert push.metrics["ttft_mean_s"] < pull.metrics["ttft_mean_s"]


SPEC = {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rate": 0.7}


def test_speculation_on_the_decode_pool_takes_fewer_decode_steps_and_counts_drafts():
    wl = {"num_requests": 20, "rate": 20.0, "prompt_len": 256, "output_len": 64}
    plain = _run({"decode": {}}, **wl)
    spec = _run({"decode": {"speculative": SPEC}}, **wl)
    pd, sd = plain.metrics["pools"]["decode"], spec.metrics["pools"]["decode"]
    assert sd["num_steps"] < pd["num_steps"]
    assert (spec.columns["output_tokens"] == plain.columns["output_tokens"]).all()
    # the prefill pool samples one token: it neither speculates nor changes
    assert spec.metrics["pools"]["prefill"]["speculative"] is None
    assert "spec_decode_num_drafts" not in spec.metrics["pools"]["prefill"]
    assert spec.metrics["pools"]["prefill"]["num_steps"] == plain.metrics["pools"]["prefill"][
        "num_steps"]  # fmt: skip
    m = spec.metrics
    assert sd["speculative"]["num_speculative_tokens"] == 3
    assert m["spec_decode_num_drafts"] == sd["spec_decode_num_drafts"] > 0
    assert m["spec_decode_num_draft_tokens"] == 3 * m["spec_decode_num_drafts"]
    assert 0 < m["spec_decode_num_accepted_tokens"] <= m["spec_decode_num_draft_tokens"]
    assert sum(m["spec_decode_num_accepted_tokens_per_pos"]) == m[
        "spec_decode_num_accepted_tokens"]  # fmt: skip
    assert "spec_decode_num_drafts" not in plain.metrics


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    d=st.integers(1, 2),
    rate=st.sampled_from([10.0, 80.0]),
    seed=st.integers(0, 1000),
    blocks=st.sampled_from([None, 300]),
    k=st.integers(1, 4),
    alpha=st.sampled_from([0.3, 0.8]),
)
def test_fast_forward_changes_no_request_with_speculation_on_the_decode_pool(
    d, rate, seed, blocks, k, alpha
):
    spec = {"method": "eagle3", "num_speculative_tokens": k, "acceptance_rate": alpha}
    decode = {"instances": d, "scheduler": {"max_seqs": 16}, "speculative": spec}
    if blocks is not None:
        decode["memory"] = {"num_blocks": blocks}
    wl = {"num_requests": 30, "rate": rate, "prompt_len": 256, "output_len": 64,
          "length_dist": "uniform", "seed": seed}  # fmt: skip
    a, b = _run({"decode": decode}, True, **wl), _run({"decode": decode}, False, **wl)
    for key in COLS:
        assert np.array_equal(a.columns[key], b.columns[key]), key
    for key in ("spec_decode_num_drafts", "spec_decode_num_accepted_tokens"):
        assert a.metrics[key] == b.metrics[key], key


def test_auto_link_counts_every_dp_rank_towards_the_node():
    # 1 + 1 GPUs fit one NVLink node; with the decode pool at DP 8 it is 1 + 8 GPUs: two nodes
    def run(decode):
        cfg = load_config({
            "model": "llama-3.1-8b", "gpu": "h100", "perf_model": "engine",
            "workload": {"num_requests": 2, "rate": 1.0, "prompt_len": 256, "output_len": 4},
            "deployment": {"prefill": {"tp": 1}, "decode": decode},
        })  # fmt: skip
        return run_simulation(cfg).metrics

    one, two = run({"tp": 1}), run({"tp": 1, "data_parallel_size": 8})
    assert one["kv_link"] == "nvlink"
    assert two["kv_link"] == "ib-ndr"
    assert two["pools"]["decode"]["gpus"] == 8
    assert two["num_gpus"] == 9
