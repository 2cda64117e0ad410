"""Multi-turn sessions: each turn is released a think time after the previous one finishes
and reuses the previous turn's prompt and answer from the prefix cache."""

from __future__ import annotations

import numpy as np

from tidal.sim.config import load_config
from tidal.sim.run import run_simulation


def run(turns: int, caching: bool = True, think: float = 0.5):
    cfg = {
        "workload": {
            "num_requests": 12,
            "rate": 0.5,
            "turns": turns,
            "think_time_s": think,
            "prompt_len": 100,
            "output_len": 40,
            "length_dist": "uniform",
        },
        "memory": {"prefix_caching": caching},
        "seed": 3,
    }
    return run_simulation(load_config(cfg))


def test_turns_follow_their_predecessor_and_reuse_its_context() -> None:
    res = run(3)
    c = res.columns
    bs = 16
    for i in range(12):
        if i % 3 == 0:
            assert c["cached_tokens"][i] == 0
            continue
        # released think_ns after the previous turn finished (exactly: an event of its own)
        assert c["arrival_ns"][i] == c["finish_ns"][i - 1] + c["think_ns"][i]
        # the previous prompt + answer are cached, but for the answer's last token (never
        # computed) and the partial block: hit = full blocks of (p + o − 1) tokens
        p, o = c["prompt_len"][i - 1], c["output_len"][i - 1]
        assert c["prompt_len"][i] > p + o
        assert c["cached_tokens"][i] == (p + o - 1) // bs * bs
    assert res.metrics["prefix_cache_hit_rate"] > 0.4


def test_sessions_without_caching_hit_nothing_and_prompts_grow() -> None:
    on, off = run(3), run(3, caching=False)
    np.testing.assert_array_equal(on.columns["prompt_len"], off.columns["prompt_len"])
    assert off.columns["cached_tokens"].sum() == 0
    assert on.metrics["ttft_mean_s"] < off.metrics["ttft_mean_s"]


def test_sessions_fast_forward_is_exact() -> None:
    cfg = {
        "workload": {
            "num_requests": 30,
            "rate": 2.0,
            "turns": 4,
            "think_time_s": 0.2,
            "prompt_len": 200,
            "output_len": 100,
            "length_dist": "geometric",
        },
        "memory": {"num_blocks": 120},
        "seed": 5,
    }
    a = run_simulation(load_config(cfg))
    b = run_simulation(load_config({**cfg, "fast_forward": False}))
    for col in ("arrival_ns", "first_token_ns", "finish_ns", "cached_tokens", "num_preemptions"):
        np.testing.assert_array_equal(a.columns[col], b.columns[col], err_msg=col)
    assert a.columns["num_preemptions"].sum() > 0  # a small cache: recompute re-hits too


def test_agent_chain_text_handoff_reuses_nothing_and_is_slower() -> None:
    """A chain of 4 agents (think time 0): handing the context on as KV reuses it, as text
    (same prompt lengths, instruction first) recomputes it."""
    base = {
        "num_requests": 40,
        "rate": 1.0,
        "turns": 4,
        "prompt_len": 300,
        "output_len": 150,
        "length_dist": "uniform",
    }
    runs = {
        h: run_simulation(load_config({"workload": {**base, "handoff": h}, "seed": 1}))
        for h in ("kv", "text")
    }
    kv, text = runs["kv"].columns, runs["text"].columns
    np.testing.assert_array_equal(kv["prompt_len"], text["prompt_len"])
    assert text["cached_tokens"].sum() == 0
    assert kv["cached_tokens"].sum() > 0.5 * kv["prompt_len"][np.arange(40) % 4 > 0].sum()
    assert runs["kv"].metrics["ttft_mean_s"] < runs["text"].metrics["ttft_mean_s"]
