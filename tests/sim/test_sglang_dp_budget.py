"""SGLang's ``--chunked-prefill-size`` is the instance's token budget: with DP attention each
rank gets ``chunked_prefill_size // dp_size`` (SGLang ``server_args``); vLLM's DP engines each
have their own ``--max-num-batched-tokens`` (issue 29)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.sim.config import load_config
from tidal.sim.single import build_instance, instance_token_budget


def cfg(engine: str, dp: int, budget: int | None = None) -> dict:
    sched: dict = {"max_seqs": 4}
    if budget is not None:
        sched["token_budget"] = budget
    return {
        "model": "qwen3-30b-a3b", "gpu": "h100", "tp": 1, "perf_model": "engine",
        "engine": engine, "data_parallel_size": dp, "enable_expert_parallel": True,
        "scheduler": sched,
        "workload": {"num_requests": 4, "concurrency": 4, "prompt_len": 8192, "output_len": 4},
    }  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8), st.integers(64, 16384))
def test_sglang_divides_the_budget_vllm_multiplies_it(dp: int, budget: int) -> None:
    sg = load_config(cfg("sglang", dp, budget))
    vl = load_config(cfg("vllm", dp, budget))
    assert instance_token_budget(vl) == dp * budget
    per_rank = instance_token_budget(sg) // dp
    assert per_rank == max(budget // dp, 1)
    assert instance_token_budget(sg) <= max(budget, dp)


@pytest.mark.parametrize(("engine", "expected"), [("sglang", 8192), ("vllm", 4 * 8192)])
def test_the_scheduler_gets_the_engine_s_instance_budget(engine: str, expected: int) -> None:
    c = load_config(cfg(engine, 4, 8192))
    sched, _, _ = build_instance(c, 8192 + 4)
    assert sched.config.max_num_batched_tokens == expected


def test_a_budget_whose_sglang_reserve_exceeds_the_gpu_is_refused_naming_it() -> None:
    """SGLang reserves 1.5 MiB per chunked-prefill token: 65,536 tokens on 8 H100 ranks of DP
    attention leave its default ``mem_fraction_static`` below zero."""
    from tidal.core.errors import ConfigError

    with pytest.raises(ConfigError, match="token_budget") as err:
        load_config(cfg("sglang", 8, 65536))
    assert "--mem-fraction-static" in str(err.value)
