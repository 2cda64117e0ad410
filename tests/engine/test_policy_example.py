"""The documented example policy (docs/examples/decode_first.py): one file, registered with
its options model, built by ``build_scheduler``, validated from a run's config."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from tests.conftest import unit_perf
from tidal.core.kv import KVBlockManager
from tidal.engine.build import build_scheduler
from tidal.engine.policy import BATCHING, describe_batching, validate_options
from tidal.engine.scheduler import SchedulerConfig
from tidal.sim.instance import SimInstance
from tidal.sim.recorder import RequestRecorder
from tidal.sim.simulator import Simulation
from tidal.workload.base import RequestSet

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "decode_first.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("decode_first_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    yield mod
    BATCHING._items.pop("decode-first")  # keep the registry as the package defines it


def _workload(n: int = 120) -> RequestSet:
    rng = np.random.default_rng(5)
    return RequestSet(
        np.cumsum(rng.exponential(2e6, n)).astype(np.int64),
        rng.integers(50, 600, n).astype(np.int64),
        rng.integers(5, 80, n).astype(np.int64),
        "example",
    )


def _run(sched, rs):
    plans = []
    schedule = sched.schedule

    def spy(now_ns):
        plan = schedule(now_ns)
        plans.append(plan.prefill_tokens)
        return plan

    sched.schedule = spy
    rec = RequestRecorder(rs)
    Simulation([SimInstance(0, sched, unit_perf(), False)], rs, rec).run()
    return rec.columns(), plans


def test_the_example_caps_prefill_tokens_per_step_and_serves_everything(example):
    opts = example.DecodeFirstOptions(max_prefill_tokens=64)
    cfg = SchedulerConfig(512, 32, options=opts)
    sched = build_scheduler(cfg, KVBlockManager(2000, 16, 0.0), "decode-first")
    cols, prefills = _run(sched, _workload())
    assert max(prefills) == 64  # the cap binds, and is never exceeded
    assert (cols["finish_ns"] > 0).all()
    np.testing.assert_array_equal(cols["output_tokens"], cols["output_len"])
    assert sched.kv.num_free_blocks == sched.kv.num_blocks


def test_with_a_cap_above_the_budget_it_is_mixed_batching(example):
    rs = _workload()
    opts = example.DecodeFirstOptions(max_prefill_tokens=10_000)
    a, _ = _run(build_scheduler(SchedulerConfig(512, 32), KVBlockManager(300, 16, 0.0)), rs)
    cfg = SchedulerConfig(512, 32, options=opts)
    b, _ = _run(build_scheduler(cfg, KVBlockManager(300, 16, 0.0), "decode-first"), rs)
    for k in ("first_token_ns", "finish_ns", "num_preemptions"):
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_options_are_validated_and_listed_from_the_registry(example):
    assert validate_options("decode-first", {"max_prefill_tokens": 8}).max_prefill_tokens == 8
    with pytest.raises(ValidationError, match="max_prefill_tokens"):
        validate_options("decode-first", {"max_prefill_tokens": 0})
    with pytest.raises(ValueError, match=r"scheduler\.eb"):
        validate_options("eb", {"delta": 1.0})
    assert "decode-first (Mixed batching with at most max_prefill_tokens" in describe_batching()
    assert "[options: scheduler.options]" in describe_batching()
