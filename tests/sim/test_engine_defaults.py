"""``engine: sglang``'s defaults (``sim/engine_defaults.py``): SGLang's chunked-prefill size and
its static memory fraction, worked by hand from ``ServerArgs._handle_gpu_memory_settings``."""

from __future__ import annotations

import pytest

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import GIB, get_gpu
from tidal.hardware.models import get_model
from tidal.sim.config import load_config
from tidal.sim.engine_defaults import (
    sglang_chunked_prefill_size,
    sglang_cuda_graph_max_bs,
    sglang_mem_fraction_static,
)
from tidal.sim.single import memory_plan

WORKLOAD = {"num_requests": 8, "prompt_len": 1024, "output_len": 128, "concurrency": 4}


def sglang(**kw: object) -> dict:
    return {"model": "Qwen/Qwen3-32B", "gpu": "h100", "engine": "sglang", "workload": WORKLOAD,
            **kw}  # fmt: skip


def test_the_chunk_and_graph_batch_follow_sglangs_memory_tiers() -> None:
    mem = {g: get_gpu(g).mem_bytes for g in ("l40s", "h100", "h200", "b200")}
    assert [sglang_chunked_prefill_size(mem[g]) for g in mem] == [4096, 8192, 8192, 16384]
    assert [sglang_cuda_graph_max_bs(mem[g], 1) for g in mem] == [32, 256, 256, 512]
    assert [sglang_cuda_graph_max_bs(mem[g], 4) for g in mem] == [160, 512, 512, 512]
    assert sglang_chunked_prefill_size(24 * GIB) == 2048


def test_qwen3_32b_on_one_h100_gets_sglangs_pool_worked_by_hand() -> None:
    """H100: 81,008.64 MiB as CUDA reports it. Reserve (MiB) = 512 + 1.5 · 8192 (chunk)
    + 2 · 256 (CUDA-graph batch, TP < 4) + 1024 · 1 / 8 = 13,440, above no floor (10,240):
    fraction = round((81,008.64 − 13,440) / 81,008.64, 3) = round(0.83409, 3) = 0.834. Pool =
    0.834 · 79.11 GiB − 61.024 GiB of bf16 weights = 4.9536 GiB; at 256 KiB a token (64 layers
    × 8 KV heads × 128 × 2 × 2 bytes) that is 1,268.1 blocks of 16 → 1,268, one of them the
    null block: 1,267 blocks = 20,272 tokens (vLLM's profile at 0.88 gave 26,976)."""
    cfg = load_config(sglang())
    assert cfg.memory.mem_fraction_static == 0.834
    assert cfg.scheduler.token_budget == 8192
    plan = memory_plan(cfg)
    assert plan.method == "sglang-static"
    assert get_model("Qwen/Qwen3-32B").kv_bytes_per_token_per_gpu(1) == 64 * 8 * 128 * 2 * 2
    assert plan.num_blocks == 1267
    assert plan.kv_capacity_tokens == 20272


def test_data_parallel_attention_and_the_10_gib_floor_enter_the_fraction() -> None:
    """H200 (143,165.44 MiB), SGLang TP 8 with DP attention over 8: batch 512, reserve = 512
    + 12,288 + 1,024 + 1,024 + 3 · 512 · 8 + 1.5 · 512 · 8 = 33,280 → 0.768. A100-80GB
    (81,049.6 MiB) with a 2,048-token chunk: 512 + 3,072 + 512 + 128 = 4,224, raised to the
    10,240 floor → 0.874."""
    assert sglang_mem_fraction_static(get_gpu("h200").mem_bytes, 8, 8192, dp=8) == 0.768
    assert sglang_mem_fraction_static(get_gpu("a100-80gb").mem_bytes, 1, 2048) == 0.874
    cfg = load_config(sglang(gpu="a100-80gb", scheduler={"token_budget": 2048}))
    assert cfg.memory.mem_fraction_static == 0.874


def test_a_config_that_plans_its_own_memory_keeps_it() -> None:
    own = load_config(sglang(memory={"gpu_memory_utilization": 0.88}))
    assert own.memory.mem_fraction_static is None
    assert memory_plan(own).method == "vllm-profile"
    assert memory_plan(own).kv_capacity_tokens == 26976
    mine = load_config(sglang(memory={"mem_fraction_static": 0.8}))
    assert mine.memory.mem_fraction_static == 0.8
    vllm = load_config({**sglang(), "engine": "vllm"})
    assert vllm.memory.mem_fraction_static is None
    both = load_config(sglang(memory={"mem_fraction_static": 0.8, "activation_reserve_gb": 2.0}))
    with pytest.raises(ConfigError, match="mem_fraction_static"):
        memory_plan(both)


def test_sglang_s_fraction_needs_the_sglang_engine_and_is_not_given_with_vllm_s_utilization():
    """Each of the two memory plans is named by its own flag: the fraction on a vLLM run, or
    with ``gpu_memory_utilization`` beside it, is refused naming both flags."""
    from tidal.core.errors import ConfigError
    from tidal.sim.config import load_config

    base = {"workload": {"num_requests": 2, "rate": 1.0}}
    with pytest.raises(ConfigError, match="--engine sglang"):
        load_config({**base, "memory": {"mem_fraction_static": 0.5}})
    both = {"mem_fraction_static": 0.5, "gpu_memory_utilization": 0.5}
    with pytest.raises(ConfigError, match="--gpu-memory-utilization, --mem-fraction-static"):
        load_config({**base, "engine": "sglang", "memory": both})
    ok = load_config({**base, "engine": "sglang", "memory": {"mem_fraction_static": 0.5}})
    assert ok.memory.mem_fraction_static == 0.5
