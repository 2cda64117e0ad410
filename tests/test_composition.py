"""The three papers' policies compose in one configuration: WarmServe placement, EB⁺ batching
in every engine, and AugServe's interception, ordering and token budget over it, on a
multi-model cluster serving augmented (tool-calling) requests."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import needs_traces
from tidal.augment.component import Augmentation
from tidal.augment.ordering import ValueQueue
from tidal.batching.ebplus import EBPlus
from tidal.core.errors import TidalError
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

pytestmark = needs_traces


def _cfg(ff: bool = True, batching: str = "ebplus", policy: str = "augserve"):
    return load_config(
        {
            "workload": {"trace": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz"},
            "scheduler": {"batching": batching},
            "augment": {"serving_policy": policy},
            "fast_forward": ff,
            "cluster": {
                "spec": "1x4:h100",
                "models": ["llama-2-7b", "llama-2-13b"],
                "placement": "warmserve",
                "warmup_s": 20,
                "mix": {"rate": 1.0, "alpha": 1.0, "replay_s": 90, "augmented": "infercept-mix"},
            },
        }
    )


def _schedulers(res):
    b = res.extras["controller"].backend
    return [i.scheduler for i in b.sim.instances]  # stopped ones are summed, then dropped


def test_warmserve_ebplus_augserve_in_one_cluster():
    res = run_simulation(_cfg())
    m = res.metrics
    assert m["num_completed"] == m["num_requests"] > 0
    assert res.extras["controller"].memory.is_empty()
    scheds = _schedulers(res)
    for s in scheds:
        assert isinstance(s.augmentation, Augmentation)
        assert isinstance(s.policy, EBPlus)
        assert isinstance(s.waiting, ValueQueue)  # AugServe's value order
        assert s.augmentation.token_budget.dynamic  # and its dynamic budget
        assert s.kv.num_free_blocks == s.kv.num_blocks
        assert s.kv.num_free_host_blocks == s.kv.num_host_blocks
    # every call of every request was intercepted, and each request decoded its tokens
    calls = int(res.columns["num_calls"].sum())
    assert m["num_intercepts"] == calls > 0
    np.testing.assert_array_equal(res.columns["output_tokens"], res.columns["output_len"])
    e2e = res.columns["finish_ns"] - res.columns["arrival_ns"]
    assert (e2e >= res.columns["call_ns"]).all()
    for key in ("effective_throughput", "normalized_latency_p50_s", "mode_switches"):
        assert key in m
    per_model = res.extras["summary"]["per_model"]
    assert sum(pm["num_intercepts"] for pm in per_model.values()) == calls


def test_composed_cluster_fast_forward_is_exact():
    a, b = run_simulation(_cfg(ff=False)), run_simulation(_cfg(ff=True))
    for col in ("first_token_ns", "finish_ns", "instance", "num_preemptions"):
        np.testing.assert_array_equal(a.columns[col], b.columns[col], err_msg=col)


def test_serving_policy_changes_the_composed_result():
    """The flag reaches the engines: INFERCEPT's static 384-token budget and FCFS-by-stage
    order serve the same requests differently from AugServe's."""
    a = run_simulation(_cfg(policy="augserve"))
    b = run_simulation(_cfg(policy="infercept"))
    assert not np.array_equal(a.columns["finish_ns"], b.columns["finish_ns"])


def test_single_instance_augmented_field_is_refused_in_a_cluster():
    data = _cfg().model_dump()
    data["workload"] = {"augmented": "infercept-mix"}
    with pytest.raises((TidalError, ValueError), match=r"cluster\.mix\.augmented"):
        load_config(data)


def test_planner_searches_the_three_policies_in_one_option_and_agrees_with_exhaustive():
    """A plan over placement × batching × serving policy on an augmented multi-model cluster
    (capacity: GPUs of one node). Its best deployment is one configuration naming all three
    policies, and it is the exhaustive grid's optimum, found with fewer simulations."""
    from tidal.experiments.planner import plan
    from tidal.experiments.space import load_plan_spec

    base = _cfg().model_dump(mode="json", exclude_unset=True)
    base["cluster"]["batch"] = 128
    spec = load_plan_spec(
        {
            "base": base,
            "search": {
                "gpu": ["h100"],
                "cluster.placement": ["serverlessllm", "warmserve"],
                "scheduler.batching": ["ebplus"],
                "augment.serving_policy": ["augserve"],
            },
            "capacity_key": "cluster.spec",
            "capacity_template": "1x{n}:{gpu}",
            "gpus_per_unit": 1,
            "max_replicas": 4,
            "slo": {"ttft_p99_s": 1.0},
            "top": 1,
        }
    )
    out = plan(spec)
    exh = plan(spec, exhaustive=True)
    assert out.best is not None
    assert exh.best is not None
    assert (out.best["label"], out.best["num_gpus"]) == (exh.best["label"], exh.best["num_gpus"])
    assert out.simulations_run < exh.simulations_run
    cfg = out.best["config"]
    assert cfg["scheduler"]["batching"] == "ebplus"
    assert cfg["augment"]["serving_policy"] == "augserve"
    assert cfg["cluster"]["placement"] in ("serverlessllm", "warmserve")
