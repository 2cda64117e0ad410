"""Factories for runtime tests: a tiny engine and a driver of arrivals by step index."""

from __future__ import annotations

import numpy as np

from tidal.core.request import Request
from tidal.runtime.config import RuntimeConfig, RuntimeEngine, build_engine


def write_cpu_profile(path) -> str:
    """A plausible CPU profile of tiny-llama (2 ms per step, 20 µs per token, 5 µs per decode
    request) at ``path``: the step costs ``eb``/``ebplus`` need on the real engine."""
    import json

    from tidal.hardware.profiled import DEFAULT_KNOTS, FEATURES, ProfiledPerfModel

    coef = dict.fromkeys(FEATURES, 0.0)
    coef.update({"const": 2e-3, "tokens": 20e-6, "decodes": 5e-6})
    coef.update({f"hinge_{k}": 0.0 for k in DEFAULT_KNOTS})
    coef["decode_ctx"] = 1e-8
    prof = ProfiledPerfModel(coef, DEFAULT_KNOTS, info={"model": "tiny-llama"})
    path.write_text(json.dumps(prof.to_json()))
    return str(path)


def tiny_engine(**kw) -> RuntimeEngine:
    kw.setdefault("num_kv_blocks", 256)
    kw.setdefault("block_size", 4)
    kw.setdefault("watermark", 0.0)
    kw.setdefault("num_threads", 1)
    return build_engine(RuntimeConfig(**kw))


def prompts(n: int, seed: int, lo: int = 3, hi: int = 40) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, int(rng.integers(lo, hi))).tolist() for _ in range(n)]


def run(
    rt: RuntimeEngine,
    prompt_ids: list[list[int]],
    max_tokens: int | list[int],
    arrive_at_step: list[int] | None = None,
    check: bool = True,
    sampling=None,
) -> tuple[list[list[int]], list[Request]]:
    """Generate for every prompt; request i joins before step ``arrive_at_step[i]``.
    Returns the generated ids per request and the requests."""
    n = len(prompt_ids)
    outs = max_tokens if isinstance(max_tokens, list) else [max_tokens] * n
    arrive = arrive_at_step or [0] * n
    reqs = [Request(i, 0, len(p), outs[i], token_ids=list(p)) for i, p in enumerate(prompt_ids)]
    if sampling is not None:
        for r in reqs:
            rt.runner.set_sampling(r, sampling(r.request_id))
    sched = rt.scheduler
    step = 0
    pending = sorted(range(n), key=lambda i: arrive[i])
    while pending or sched.has_work():
        while pending and arrive[pending[0]] <= step:
            sched.add_request(reqs[pending.pop(0)])
        rt.engine.step()
        if check:
            sched.check()
        step += 1
        assert step < 10_000
    assert sched.kv.num_free_blocks == sched.kv.num_blocks
    return [r.token_ids[r.prompt_len :] for r in reqs], reqs
