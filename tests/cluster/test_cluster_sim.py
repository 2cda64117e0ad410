"""Whole cluster runs: every policy serves every request, GPU memory never exceeds a pool and
is empty after the run, and fast-forward gives the same timestamps as stepping."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import needs_traces
from tidal.cluster.config import ABLATIONS
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation
from tidal.workload.base import RequestSet

pytestmark = needs_traces

MODELS = ["llama-2-7b", "llama-2-7b", "llama-2-13b"]


def _cfg(
    placement: str,
    ff: bool = True,
    disable: tuple[str, ...] = (),
    rate: float = 2.0,
    batch: int = 32,
):
    placement, _, variant = placement.partition(":")
    eager = variant == "eager"
    muxcap = "" if eager else variant
    return load_config(
        {
            "workload": {"trace": "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"},
            "fast_forward": ff,
            "cluster": {
                "spec": "1x4:h100",
                "models": MODELS,
                "placement": placement,
                "warmup_s": 20,
                "batch": batch,
                "eager_overhead": eager,
                "warmserve": {"disable": list(disable)},
                "muxserve": {"cap": muxcap or "batch"},
                "mix": {"rate": rate, "alpha": 1.0, "replay_s": 240},
            },
        }
    )


def _check(result) -> None:
    ctl = result.extras["controller"]
    assert result.metrics["num_completed"] == result.metrics["num_requests"] > 0
    assert ctl.memory.is_empty()
    assert all(p <= ctl.pages_per_gpu for p in ctl.memory.peak_used)
    # the log never shows more pages on a GPU than its pool
    log = result.extras["tables"]["gpu_memory"]
    for g in range(ctl.topo.num_gpus):
        sel = log["gpu"] == g
        cur: dict[tuple[int, int], int] = {}
        for m, k, p in zip(log["model"][sel], log["kind"][sel], log["pages"][sel], strict=True):
            cur[(int(m), int(k))] = int(p)
            assert sum(cur.values()) <= ctl.pages_per_gpu
        assert sum(cur.values()) == 0


@pytest.mark.parametrize("placement", ["dedicated", "serverlessllm", "muxserve", "warmserve"])
def test_every_policy_serves_all_and_leaves_memory_empty(placement):
    _check(run_simulation(_cfg(placement)))


@pytest.mark.parametrize("ablation", sorted(ABLATIONS))
def test_every_warmserve_ablation_runs_clean(ablation):
    _check(run_simulation(_cfg("warmserve", disable=ABLATIONS[ablation], rate=3.0)))


def test_prewarming_beats_autoscaling_from_scratch_on_tail_ttft():
    full = run_simulation(_cfg("warmserve", rate=3.0)).metrics
    vanilla = run_simulation(_cfg("warmserve", disable=ABLATIONS["a"], rate=3.0)).metrics
    assert full["prewarm_hit_rate"] > 0.5
    assert vanilla["prewarm_hit_rate"] == 0.0
    assert full["ttft_p99_s"] < vanilla["ttft_p99_s"] / 3


@settings(max_examples=18, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(5, 80),
    placement=st.sampled_from(
        [
            "dedicated",
            "serverlessllm",
            "muxserve",
            "muxserve:plan",
            "muxserve:eager",
            "warmserve",
            "warmserve:eager",
        ]
    ),
    span=st.sampled_from([10.0, 60.0]),
    batch=st.sampled_from([2, 32]),
)
def test_cluster_fast_forward_is_exact(seed, n, placement, span, batch):
    """Small router caps make requests wait and retry: they reach engines from control events
    in the middle of fast-forwarded runs, which must then be cut where stepping sees them."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(20, 20 + span, n))
    rs = RequestSet(
        (t * 1e9).astype(np.int64),
        rng.integers(1, 1024, n),
        rng.integers(3, 600, n),
        "random",
        {"model": rng.integers(0, len(MODELS), n)},
    )
    runs = [run_simulation(_cfg(placement, ff=ff, batch=batch), rs) for ff in (False, True)]
    a, b = (r.columns for r in runs)
    for col in ("first_scheduled_ns", "first_token_ns", "finish_ns", "num_preemptions", "instance"):
        np.testing.assert_array_equal(a[col], b[col], err_msg=col)
    assert runs[1].run_info["num_events"] <= runs[0].run_info["num_events"]
