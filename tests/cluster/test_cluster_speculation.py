"""Speculative decoding in cluster runs (sim/cluster_spec.py): per-model configs (a model
without one does not speculate), a unit's decode engines speculate and its prefill engines never
do, vLLM's counters summed per model and over the cluster, the simulated mean acceptance length
against the closed form E = (1 − α^(k+1)) / (1 − α), and fast-forward exactness."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import needs_traces
from tidal.engine.spec_pool import SpecDecodePool
from tidal.report.digest import result_digest
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation
from tidal.workload.base import RequestSet

AZURE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"
COUNTERS = ("spec_decode_num_drafts", "spec_decode_num_draft_tokens",
            "spec_decode_num_accepted_tokens")  # fmt: skip


def _spec(k: int = 3, alpha: float = 0.7, method: str = "ngram") -> dict:
    return {"method": method, "num_speculative_tokens": k, "acceptance_rate": alpha}


def _warmserve(fast_forward: bool = True, top: dict | None = None, **cluster):
    c = {
        "spec": "1x4:h100", "perf_model": "roofline",
        "models": ["llama-2-7b:1p1d", "llama-2-7b", "llama-2-7b"],
        "placement": "warmserve", "warmup_s": 20,
        "mix": {"rate": 3.0, "alpha": 1.0, "replay_s": 240}, **cluster,
    }  # fmt: skip
    return load_config({"fast_forward": fast_forward, "workload": {"trace": AZURE}, "cluster": c,
                        **(top or {})})  # fmt: skip


@needs_traces
def test_per_model_speculation_and_counters():
    spec = _spec()
    on = run_simulation(_warmserve(speculative={"llama-2-7b#0": spec, "llama-2-7b#1": spec}))
    off = run_simulation(_warmserve())
    pm, pm_off = on.extras["summary"]["per_model"], off.extras["summary"]["per_model"]
    for name in ("llama-2-7b#0", "llama-2-7b#1"):
        m = pm[name]
        assert m["spec_decode_num_drafts"] > 0
        assert m["spec_decode_num_draft_tokens"] == 3 * m["spec_decode_num_drafts"]
        assert m["spec_decode_num_accepted_tokens"] <= m["spec_decode_num_draft_tokens"]
        assert m["tpot_p50_s"] < pm_off[name]["tpot_p50_s"]  # > 1 token per verification
    assert "spec_decode_num_drafts" not in pm["llama-2-7b#2"]
    for c in COUNTERS:  # the cluster's counters are the models' sums
        assert on.metrics[c] == pm["llama-2-7b#0"][c] + pm["llama-2-7b#1"][c]
    drafts, acc = (on.metrics[c] for c in COUNTERS[::2])
    assert on.metrics["spec_decode_mean_acceptance_length"] == 1 + acc / drafts
    # the unit: its decode engine speculates, its prefill engine (one token per leg) never
    ctl = on.extras["controller"]
    sim = ctl.backend.sim
    for w in ctl.backend.disagg.wirings:
        assert all(isinstance(sim.instances[i].scheduler.state.pool, SpecDecodePool)
                   for i in w.d_idx)  # fmt: skip
        assert not any(isinstance(sim.instances[i].scheduler.state.pool, SpecDecodePool)
                       for i in w.p_idx)  # fmt: skip


@needs_traces
def test_run_speculative_config_applies_to_every_model():
    res = run_simulation(_warmserve(top={"speculative": _spec(2, 0.6)}))
    pm = res.extras["summary"]["per_model"]
    assert all(m["spec_decode_num_drafts"] > 0 for m in pm.values())


def test_mean_acceptance_length_meets_the_closed_form():
    """16 long requests on a dedicated TP1 instance: the mean accepted length of ~12,000
    verifications within 2 % of (1 − α^(k+1)) / (1 − α) (the last, clipped step of each
    request is 16 of them)."""
    k, alpha = 3, 0.7
    cfg = load_config(
        {
            "workload": {"trace": AZURE},
            "speculative": _spec(k, alpha),
            "cluster": {
                "spec": "1x1:h100", "perf_model": "roofline", "models": ["llama-2-7b"],
                "placement": "dedicated", "warmup_s": 20, "max_model_len": 4096,
                "mix": {"rate": 1.0, "alpha": 1.0, "replay_s": 60},
            },
        }
    )  # fmt: skip
    n = 16
    rs = RequestSet(np.full(n, 30 * 10**9), np.full(n, 100), np.full(n, 2000), "test",
                    extra={"model": np.zeros(n, dtype=np.int64)})  # fmt: skip
    res = run_simulation(cfg, rs)
    assert res.metrics["num_completed"] == n
    want = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert abs(res.metrics["spec_decode_mean_acceptance_length"] / want - 1) < 0.02


@needs_traces
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    k=st.integers(1, 4),
    alpha=st.floats(0.3, 0.95),
    method=st.sampled_from(["ngram", "eagle3"]),
    augmented=st.sampled_from([None, "infercept-mix"]),
)
def test_fast_forward_exact_with_speculating_units(k, alpha, method, augmented):
    spec = _spec(k, alpha, method)
    mix = {"rate": 2.0, "alpha": 1.0, "replay_s": 180, "augmented": augmented}
    a = run_simulation(_warmserve(True, top={"speculative": spec}, mix=mix))
    b = run_simulation(_warmserve(False, top={"speculative": spec}, mix=mix))
    assert result_digest(a) == result_digest(b)
