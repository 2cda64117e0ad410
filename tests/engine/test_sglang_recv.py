"""SGLang's ``--scheduler-recv-interval`` (engine/sglang_recv.py): new requests are received
only every N decode steps and right after a prefill step; worked by hand, refused where SGLang
refuses it, fast-forward exact."""

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
from tidal.engine.sglang_recv import RecvGate
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation


def sched(interval: int, budget: int = 256, blocks: int = 1000, mixed: bool = False) -> Scheduler:
    opts = SGLangOptions(scheduler_recv_interval=interval, enable_mixed_chunk=mixed)
    kv = KVBlockManager(blocks, 4, 0.0)
    return build_scheduler(SchedulerConfig(budget, 16, options=opts), kv, "sglang")


def step(s: Scheduler, now: int) -> tuple[list[int], int]:
    """Schedule at ``now`` and commit the step (1 µs): (request ids prefilled, decodes)."""
    plan = s.schedule(now)
    s.update(plan, StepOutput(duration_ns=1000), now + 1000)
    return [r.request_id for r, _ in plan.prefills], plan.num_decodes


def test_an_idle_engine_receives_at_once_a_decoding_one_every_n_steps() -> None:
    """Interval 3. Request 0 arrives at an idle engine: prefilled at once (counter 1,000).
    Request 1 arrives after that prefill step: received at the next schedule (1,000 ≥ 3; reset
    to 0), prefilled (1,000 again). The schedule at 2000 receives nothing new (reset to 0) and
    decodes (1). Request 2 arrives at 3000 while both decode: the decodes at 3000 and 4000 put
    the counter at 3, and the schedule at 5000 receives and prefills it."""
    s = sched(3)
    s.add_request(Request(0, 0, 8, 50))
    assert step(s, 0) == ([0], 0)
    s.add_request(Request(1, 1000, 8, 50))
    assert step(s, 1000) == ([1], 0)
    assert step(s, 2000) == ([], 2)
    s.add_request(Request(2, 3000, 8, 50))
    assert step(s, 3000) == ([], 2)
    assert step(s, 4000) == ([], 2)
    assert step(s, 5000) == ([2], 0)


def test_without_the_flag_a_request_is_received_at_the_next_step() -> None:
    s = sched(1)
    assert isinstance(s.policy, SGLangBatching)
    assert s.policy.recv is None
    s.add_request(Request(0, 0, 8, 50))
    step(s, 0)
    step(s, 1000)
    s.add_request(Request(1, 2000, 8, 50))
    assert step(s, 2000) == ([1], 0)


def test_the_gate_counts_as_sglangs_skipper() -> None:
    g = RecvGate(30)
    assert g.steps_to_recv() == 30
    g.counter = 29
    assert g.steps_to_recv() == 1
    with pytest.raises(ValueError, match="at least 2"):
        RecvGate(1)


def test_vllm_and_data_parallel_attention_refuse_the_flag_naming_it() -> None:
    flag = "--scheduler-recv-interval"
    with pytest.raises(ConfigError, match=flag):
        load_config({"scheduler": {"scheduler_recv_interval": 10}})
    with pytest.raises(ConfigError, match=flag):
        load_config({"engine": "sglang", "tp": 2, "data_parallel_size": 2,
                     "scheduler": {"scheduler_recv_interval": 10}})  # fmt: skip


def test_the_interval_delays_first_tokens_in_a_closed_loop() -> None:
    """Poisson arrivals at a decoding engine wait for the receive (lengths jittered: a
    fixed-length closed loop finishes its cohort together and re-sends to an idle engine)."""
    wl = {"num_requests": 60, "prompt_len": 300, "output_len": 60, "rate": 20.0,
          "length_dist": "uniform"}
    base = {"engine": "sglang", "workload": wl}
    cfg = load_config({**base, "scheduler": {"scheduler_recv_interval": 30}})
    assert cfg.scheduler.options == {"scheduler_recv_interval": 30}
    slow = run_simulation(cfg).metrics["ttft_mean_s"]
    fast = run_simulation(load_config(base)).metrics["ttft_mean_s"]
    assert slow > fast


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 0.05), st.integers(1, 120), st.integers(1, 40)),
             min_size=1, max_size=14),
    st.integers(40, 120),
    st.integers(2, 40),
    st.booleans(),
)  # fmt: skip
def test_fast_forward_is_exact(reqs, blocks, interval, mixed) -> None:
    arrivals = sorted(r[0] for r in reqs)
    rs = request_set(arrivals, [r[1] for r in reqs], [r[2] for r in reqs])
    runs = []
    for ff in (True, False):
        s = sched(interval, budget=64, blocks=blocks, mixed=mixed)
        rec, _, _ = simulate(rs, s, fast_forward=ff)
        runs.append((rec.first_token_ns.copy(), rec.finish_ns.copy()))
    assert np.array_equal(runs[0][0], runs[1][0])
    assert np.array_equal(runs[0][1], runs[1][1])
    assert (runs[0][1] >= 0).all()
