"""Interception composes over any batching policy: on requests that never call a tool it must
be the identity (same admissions, preemptions and timestamps as the bare policy).

This pins, among others, EB's forecast invariant under composition: a preemption makes the
KV forecast's projection of the running set stale (the preempted request left it), so the
next admission re-projects — also when the preemption goes through the augmented scheduler."""

from __future__ import annotations

import numpy as np
import pytest

from tests.augment.helpers import make, run
from tests.conftest import unit_perf
from tidal.batching.eb_options import EBOptions
from tidal.core.kv import KVBlockManager
from tidal.engine.build import build_scheduler
from tidal.engine.scheduler import SchedulerConfig
from tidal.hardware.gpus import get_gpu
from tidal.hardware.interference import step_costs
from tidal.hardware.models import get_model
from tidal.workload.base import RequestSet

COLUMNS = ("first_scheduled_ns", "first_token_ns", "finish_ns", "num_preemptions")


def _workload(seed: int, n: int = 300) -> RequestSet:
    rng = np.random.default_rng(seed)
    return RequestSet(
        np.cumsum(rng.exponential(1e6, n)).astype(np.int64),
        rng.integers(20, 300, n).astype(np.int64),
        rng.geometric(1 / 300, n).astype(np.int64),
        "plain",
    )


@pytest.mark.parametrize("batching", ["mb", "eb", "ebplus"])
@pytest.mark.parametrize("seed", [0, 1])
def test_interception_without_calls_is_the_identity(batching, seed):
    # eps = 0.5, no cold reserve, a 200-block cache: the forecast admits close to the cache,
    # so EB preempts after its first estimate, and admissions follow before the next
    # departure (where a projection still holding the preempted request would refuse)
    opts = EBOptions(eps=0.5, cold_reserve=0.0, forecast_recent=0)
    costs = step_costs(get_model("gpt-j-6b"), get_gpu("a100-80gb"), 1, unit_perf())
    cfg = SchedulerConfig(512, 64, costs=costs, eb=opts)
    rs = _workload(seed)
    bare, _ = run(rs, build_scheduler(cfg, KVBlockManager(200, 16, 0.0), batching))
    aug = make(
        "vllm",
        num_blocks=200,
        token_budget=512,
        max_seqs=64,
        batching=batching,
        static_budget=512,
        eb=opts,
    )
    composed, _ = run(rs, aug)
    a, b = bare.columns(), composed.columns()
    assert int(a["num_preemptions"].sum()) > 0
    for k in COLUMNS:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
