"""SGLang's step under ``--enable-mixed-chunk`` and ``--max-prefill-tokens`` (batching
``sglang``): which prompts a step admits, worked by hand from ``PrefillAdder``'s rules (first
prompt of a step whole, further ones only below the cap less the step's prefill so far, the
decodes of a mixed step counted against it); refused for vLLM; fast-forward exact."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import request_set, simulate
from tidal.core.errors import ConfigError
from tidal.core.kv import KVBlockManager
from tidal.core.request import Request
from tidal.engine.build import build_scheduler
from tidal.engine.plan import StepOutput
from tidal.engine.scheduler import Scheduler, SchedulerConfig
from tidal.engine.sglang_batching import SGLangBatching, SGLangOptions
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation


def sched(cap: int, mixed: bool = False, budget: int = 256, blocks: int = 1000) -> Scheduler:
    opts = SGLangOptions(enable_mixed_chunk=mixed, max_prefill_tokens=cap)
    kv = KVBlockManager(blocks, 4, 0.0)
    return build_scheduler(SchedulerConfig(budget, 16, options=opts), kv, "sglang")


def admitted(s: Scheduler, prompts: list[int], first_id: int = 0, now: int = 0) -> list:
    """The (request, tokens) prefills of the step scheduled at ``now`` after ``prompts``
    arrive, that step then committed (1 µs long)."""
    for i, p in enumerate(prompts):
        s.add_request(Request(first_id + i, now, p, 10))
    plan = s.schedule(now)
    got = [(r.request_id, n) for r, n in plan.prefills]
    s.update(plan, StepOutput(duration_ns=1000), now + 1000)
    return got


def test_further_prompts_only_below_the_cap_less_the_steps_prefill() -> None:
    """Cap 100, budget 256. 80 first (whole); 10 < 100 − 80 = 20 in; 30 < 100 − 90 = 10 no,
    and the step ends there (the queue is served in order)."""
    assert admitted(sched(100), [80, 10, 30, 5]) == [(0, 80), (1, 10)]
    # SGLang refuses at equality (real_input_tokens >= rem_input_tokens): 20 < 20 is false
    assert admitted(sched(100), [80, 20]) == [(0, 80)]
    # without the cap (16,384) the budget alone bounds the step: prefill-first's admission
    assert admitted(sched(16384), [80, 10, 30, 5]) == [(0, 80), (1, 10), (2, 30), (3, 5)]


def test_the_first_prompt_is_admitted_whole_above_the_cap_and_chunked_by_the_budget() -> None:
    """Cap 100: a 150-token first prompt runs whole (nothing further: 10 < −50 no); a
    300-token one is cut at the 256-token budget; its rest (44) is the next step's first
    prefill, after which 10 < 100 − 44 = 56 is admitted and 56 < 56 is not."""
    assert admitted(sched(100), [150, 10]) == [(0, 150)]
    s = sched(100)
    assert admitted(s, [300]) == [(0, 256)]
    assert admitted(s, [10, 56], first_id=1, now=1000) == [(0, 44), (1, 10)]


def _decoding_two(mixed: bool) -> Scheduler:
    """A scheduler whose requests 0 (40 tokens) and 1 (10 < 100 − 40) prefilled in one step
    and now decode."""
    s = sched(100, mixed)
    assert admitted(s, [40, 10]) == [(0, 40), (1, 10)]
    return s


def test_a_mixed_steps_decodes_count_against_the_cap() -> None:
    """Two decoding, then prompts 60 and 38 arrive. Mixed chunk: the step decodes both and
    prefills 60 (first); 38 < 100 − 2 − 60 = 38 is false. Without it the step prefills alone:
    38 < 100 − 60 = 40 is admitted, and no request decodes."""
    mixed = _decoding_two(True)
    for i, p in enumerate([60, 38]):
        mixed.add_request(Request(2 + i, 1000, p, 10))
    plan = mixed.schedule(1000)
    assert plan.num_decodes == 2
    assert [(r.request_id, n) for r, n in plan.prefills] == [(2, 60)]
    apart = _decoding_two(False)
    for i, p in enumerate([60, 38]):
        apart.add_request(Request(2 + i, 1000, p, 10))
    plan = apart.schedule(1000)
    assert plan.num_decodes == 0
    assert [(r.request_id, n) for r, n in plan.prefills] == [(2, 60), (3, 38)]


@pytest.mark.parametrize(
    "scheduler",
    [{"enable_mixed_chunk": True}, {"max_prefill_tokens": 4000}],
    ids=["enable_mixed_chunk", "max_prefill_tokens"],
)
def test_vllm_refuses_sglangs_flags_naming_them(scheduler: dict) -> None:
    flag = "--" + next(iter(scheduler)).replace("_", "-")
    with pytest.raises(ConfigError, match=flag):
        load_config({"scheduler": scheduler})
    with pytest.raises(ConfigError, match=flag):  # another batching policy cannot take them
        load_config({"engine": "sglang", "scheduler": {**scheduler, "batching": "mb"}})


def test_sglang_flags_select_sglangs_step_and_the_recorded_config_reruns() -> None:
    wl = {"num_requests": 12, "prompt_len": 300, "output_len": 20, "concurrency": 6}
    flags = {"enable_mixed_chunk": True, "max_prefill_tokens": 400}
    cfg = load_config({"engine": "sglang", "workload": wl, "scheduler": flags})
    assert cfg.scheduler.batching == "sglang"
    assert cfg.scheduler.options == {"enable_mixed_chunk": True, "max_prefill_tokens": 400}
    plain = load_config({"engine": "sglang", "workload": wl})
    assert plain.scheduler.batching == "sglang"  # SGLang's admission, its defaults
    assert plain.scheduler.options == {}
    res = run_simulation(cfg)
    again = run_simulation(load_config(cfg.model_dump(mode="json")))
    assert res.metrics["ttft_mean_s"] == again.metrics["ttft_mean_s"]
    assert res.metrics["ttft_mean_s"] != run_simulation(plain).metrics["ttft_mean_s"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 0.05), st.integers(1, 120), st.integers(1, 40)),
             min_size=1, max_size=14),
    st.integers(40, 120),
    st.integers(1, 200),
    st.booleans(),
)  # fmt: skip
def test_fast_forward_is_exact(reqs, blocks, cap, mixed) -> None:
    arrivals = sorted(r[0] for r in reqs)
    rs = request_set(arrivals, [r[1] for r in reqs], [r[2] for r in reqs])
    runs = []
    for ff in (True, False):
        s = sched(cap, mixed, budget=64, blocks=blocks)
        assert isinstance(s.policy, SGLangBatching)
        rec, _, _ = simulate(rs, s, fast_forward=ff)
        runs.append((rec.first_token_ns.copy(), rec.finish_ns.copy()))
    assert np.array_equal(runs[0][0], runs[1][0])
    assert np.array_equal(runs[0][1], runs[1][1])
    assert (runs[0][1] >= 0).all()
