"""Parallel sampling n (vLLM v1 fans a request out into n that share the prompt through the
prefix cache): the prompt is computed once, the other branches reuse it."""

from __future__ import annotations

from tidal.sim.config import load_config
from tidal.sim.run import run_simulation


def run(n: int, caching: bool = True, shared: int = 0):
    w = {"num_requests": 6, "rate": 0.2, "prompt_len": 500, "output_len": 50, "n": n}
    if shared:
        w |= {"shared_prefix_groups": 2, "shared_prefix_len": shared}
    cfg = {"workload": w, "memory": {"prefix_caching": caching}, "seed": 2}
    return run_simulation(load_config(cfg))


def test_branches_share_the_prompt() -> None:
    res = run(4)
    c = res.columns
    assert len(c["prompt_len"]) == 24
    p = c["prompt_len"].reshape(6, 4)
    assert (p == p[:, :1]).all()
    assert (c["arrival_ns"][::4] == c["arrival_ns"].reshape(6, 4).T).all()
    cached = c["cached_tokens"].reshape(6, 4)
    assert (cached[:, 0] == 0).all()
    # admitted in the same step as the first branch, whose prompt blocks are registered at
    # allocation (vLLM): all full blocks but the one holding the last prompt token
    assert ((p[:, 0] - 1) // 16 * 16 == cached[:, 1:].T).all()
    off = run(4, caching=False)
    assert off.columns["cached_tokens"].sum() == 0
    assert res.metrics["ttft_mean_s"] < off.metrics["ttft_mean_s"]


def test_branches_after_a_shared_system_prompt() -> None:
    res = run(2, shared=256)
    c = res.columns
    assert (c["prompt_len"] == 756).all()
    cached = c["cached_tokens"].reshape(6, 2)
    assert (cached[:, 1] == 752).all()
    assert (cached[:, 0] % 256 == 0).all()  # a first branch reuses at most its system prompt
