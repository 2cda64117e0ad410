"""vLLM's memory plan → KV blocks: a hand-worked case, the vLLM log it is held against, and
invariants of the method (``tidal.hardware.memory``)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import GIB, get_gpu
from tidal.hardware.memory import (
    activation_peak_bytes,
    forward_peak_bytes,
    plan_memory,
    sampler_peak_bytes,
)
from tidal.hardware.models import get_model

LLAMA, H100 = get_model("llama-3.1-8b"), get_gpu("h100")


def test_llama31_8b_on_h100_by_hand():
    """Llama-3.1-8B (32 layers, h 4096, 32/8 heads of 128, I 14336, V 128256, bf16) on one
    H100, gpu_memory_utilization 0.9, max_num_batched_tokens T = 8192, max_num_seqs 256:

    total      = 79.11 GiB = 79.11 · 2³⁰                         = 84 943 715 696.64 B
    requested  = 0.9 · total                                      = 76 449 344 126.976 B
    weights    = 2 B · [32·(2·4096² + 2·4096·1024 + 3·4096·14336 + 2·4096)
                        + 2·128256·4096 + 4096] = 2 · 8 030 261 248  = 16 060 522 496 B
    forward    = T·2·max(4096 + (2·32 + 2·8)·128, 4096 + 3·14336)
               = 8192 · 2 · max(14 336, 47 104)                    =    771 751 936 B
    sampler    = R·V·28 + (T + R)·h·2, R = min(256, 8192) = 256
               = 256·128256·28 + 8448·4096·2 = 919 339 008 + 69 206 016 = 988 545 024 B
    activation = max(forward, sampler)                            =    988 545 024 B
    non-torch  = 0.35 GiB                                         =    375 809 638.4 B
    graphs     = 0.40 GiB                                         =    429 496 729.6 B
    KV bytes   = requested − weights − activation − non-torch − graphs
               = 58 594 970 238.976 B (54.57 GiB)
    block      = 16 tokens · 2·32·8·128·2 B = 16 · 131 072 B        =      2 097 152 B
    vLLM's num_gpu_blocks = ⌊58 594 970 238.976 / 2 097 152⌋ = ⌊27 940.26⌋ = 27 940,
    less the null block = 27 939 blocks = 447 024 tokens.
    """
    plan = plan_memory(LLAMA, H100, 1, 16, 0.9, token_budget=8192, max_seqs=256)
    assert plan.total_bytes == pytest.approx(84_943_715_696.64)
    assert plan.weight_bytes_per_gpu == 16_060_522_496
    assert forward_peak_bytes(LLAMA, 1, 8192) == 771_751_936
    assert sampler_peak_bytes(LLAMA, 8192, 256) == 988_545_024
    assert plan.activation_bytes == 988_545_024
    assert plan.kv_bytes_per_gpu == pytest.approx(58_594_970_238.976)
    assert plan.num_blocks == 27_939
    assert plan.kv_capacity_tokens == 447_024


def test_against_published_vllm_logs():
    """Start-up logs of this deployment (Llama-3.1-8B, one H100, utilization 0.9; vLLM 0.6–0.11,
    which did not yet subtract graphs) read weights 14.99 GiB, activation peak 1.19–1.24 GiB and
    KV 54.62–54.93 GiB. Without the graph term the plan's KV lies within 0.5 GiB of that range
    (≤ 1 %), its weights within 0.05 GiB; its activation peak is 0.3 GiB low."""
    plan = plan_memory(LLAMA, H100, token_budget=8192, max_seqs=256, cuda_graph_gib=0)
    assert 54.62 - 0.5 < plan.kv_bytes_per_gpu / GIB < 54.93 + 0.5
    assert plan.weight_bytes_per_gpu / GIB == pytest.approx(14.99, abs=0.05)
    assert 0.9 < plan.activation_bytes / GIB < 1.24


def test_flat_reserve_is_the_previous_method_on_gib():
    """activation_reserve_gb = 3: ⌊(0.9·79.11 GiB − 16 060 522 496 − 3·10⁹) / 2 097 152⌋ − 1
    = ⌊57 388 821 630.976 / 2 097 152⌋ − 1 = 27 365 − 1 blocks."""
    plan = plan_memory(LLAMA, H100, activation_reserve_gb=3.0)
    assert plan.method == "flat-reserve"
    assert plan.num_blocks == 27_364
    assert plan.reserve_bytes_per_gpu == 3e9


def test_tensor_parallel_splits_weights_kv_and_projections():
    m, g = get_model("llama-3.1-70b"), get_gpu("h100")
    p4 = plan_memory(m, g, 4)
    p8 = plan_memory(m, g, 8)
    assert p8.weight_bytes_per_gpu == pytest.approx(p4.weight_bytes_per_gpu / 2)
    assert p8.kv_bytes_per_token_per_gpu == p4.kv_bytes_per_token_per_gpu / 2
    assert p8.non_torch_bytes - p4.non_torch_bytes == pytest.approx(4 * 0.25 * GIB)
    # the sampler holds full-vocabulary logits on every rank, the forward's MLP is split
    assert forward_peak_bytes(m, 8, 8192) < forward_peak_bytes(m, 4, 8192)
    assert sampler_peak_bytes(m, 8192, 256) > forward_peak_bytes(m, 8, 8192)


def test_moe_forward_counts_the_active_experts():
    m = get_model("qwen3-30b-a3b")
    h, i, k = m.hidden_size, m.intermediate_size, m.num_active_experts
    assert forward_peak_bytes(m, 1, 100) == 100 * 2 * (h + k * (3 * i + h))


@settings(max_examples=60, deadline=None)
@given(
    budget=st.integers(256, 65536),
    seqs=st.integers(1, 1024),
    util=st.floats(0.5, 1.0),
    graphs=st.floats(0, 2),
)
def test_more_reserve_never_means_more_blocks(budget, seqs, util, graphs):
    """Monotone in every reserve term; the blocks exactly fill what is left (< 2 blocks spare,
    the null block and the floor)."""
    base = plan_memory(
        LLAMA, H100, gpu_memory_utilization=util, token_budget=budget, max_seqs=seqs,
        cuda_graph_gib=graphs,
    )  # fmt: skip
    bigger = plan_memory(
        LLAMA, H100, gpu_memory_utilization=util, token_budget=2 * budget, max_seqs=seqs,
        cuda_graph_gib=graphs + 0.5,
    )  # fmt: skip
    assert bigger.num_blocks <= base.num_blocks
    block = 16 * base.kv_bytes_per_token_per_gpu
    assert 0 <= base.kv_bytes_per_gpu - base.num_blocks * block < 2 * block
    assert base.activation_bytes == activation_peak_bytes(LLAMA, 1, budget, seqs)
    total = base.weight_bytes_per_gpu + base.reserve_bytes_per_gpu + base.kv_bytes_per_gpu
    assert total == pytest.approx(base.requested_bytes)


def test_too_small_for_one_request_names_every_term():
    with pytest.raises(ConfigError, match=r"activation peak .* non-torch .* CUDA graphs"):
        plan_memory(LLAMA, get_gpu("l40s"), min_tokens=10_000_000)


def test_summary_json_reports_the_plan(tmp_path):
    from tidal.sim.config import load_config
    from tidal.sim.run import memory_plan, run_simulation

    data = {
        "model": "llama-3.1-8b",
        "gpu": "h100",
        "perf_model": "roofline",
        "scheduler": {"token_budget": 4096, "max_seqs": 128},
        "workload": {"num_requests": 20, "rate": 5.0, "prompt_len": 100, "output_len": 10},
    }
    cfg = load_config(data)
    res = run_simulation(cfg)
    plan = memory_plan(cfg)
    assert res.metrics["kv_capacity_tokens"] == plan.kv_capacity_tokens
    kv = res.metrics["kv_plan"]
    assert kv["num_blocks"] * 16 == res.metrics["kv_capacity_tokens"]
    assert (kv["token_budget"], kv["max_seqs"]) == (4096, 128)
    assert kv["activation_peak_gib"] * GIB == pytest.approx(
        activation_peak_bytes(LLAMA, 1, 4096, 128)
    )
    fixed = load_config({**data, "memory": {"num_blocks": 64}})
    assert dataclasses.asdict(memory_plan(fixed))["num_blocks"] == 64
    assert run_simulation(fixed).metrics["kv_plan"]["method"] == "num_blocks"
