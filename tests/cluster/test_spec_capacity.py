"""Speculation in the controller's load estimates (``cluster/spec_capacity.py``,
``sim/cluster_spec.spec_capacities``): the decode-time factor by hand on a linear step model,
and on a cluster — the dedicated placement's demand and WarmServe's priors at speculation's
decode rate, from the engines' own speculative step model, the requests unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import needs_traces
from tidal.cluster.spec_capacity import decode_capacity, speculative_service
from tidal.engine.spec_config import SpeculativeConfig
from tidal.hardware.perf import PerfModel
from tidal.hardware.spec_perf import SpecPerfModel
from tidal.sim.cluster_run import cluster_workload
from tidal.sim.cluster_workload import workload_stats
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

AZURE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.7}


class _Linear(PerfModel):
    """10 ms + 0.1 ms per decode row + 10 ns per token of Σ context."""

    name = "linear"

    def step_seconds(self, num_decodes, decode_ctx, prefill_tokens, prefill_attn, prefill_ctx,
                     num_prefills, mx=max):  # fmt: skip
        return 0.01 + 1e-4 * (num_decodes + prefill_tokens) + 1e-8 * decode_ctx


def test_decode_factor_by_hand():
    """B = 32 requests of context 1000, n-gram k = 3, α = 0.7:
    plain step 10 + 3.2 + 0.32 = 13.52 ms; verification of 128 rows at Σ context
    32 000 + 32·3 = 32 096: 10 + 12.8 + 0.32096 ms, plus the host lookup 32 × 5 µs = 0.16 ms,
    = 23.28096 ms; E = (1 − 0.7⁴)/(1 − 0.7) = 0.7599/0.3 = 2.533; so the decode time per token
    is 23.28096 / 2.533 = 9.1910 ms against 13.52 ms: factor 0.67981, and one engine emits
    32 × 2.533 / 23.28096 ms = 3482 tokens/s (plain: 32 / 13.52 ms = 2367)."""
    plain = _Linear()
    spec = SpeculativeConfig.model_validate(NGRAM)
    e = spec.expected_tokens()
    assert e == pytest.approx(0.7599 / 0.3, rel=1e-12)
    cap = decode_capacity(plain, SpecPerfModel(plain, 3, "ngram"), e, 32, 1000)
    assert cap.step_s == pytest.approx(13.52e-3, rel=1e-12)
    assert cap.verify_step_s == pytest.approx(23.28096e-3, rel=1e-12)
    assert cap.factor == pytest.approx(23.28096 / (0.7599 / 0.3) / 13.52, rel=1e-12)
    assert cap.factor == pytest.approx(0.67981, abs=1e-5)
    assert cap.tokens_per_s() == pytest.approx(3482.0, abs=1.0)
    assert speculative_service((35.0, 15.0), cap) == (35.0, 15.0 * cap.factor)
    assert speculative_service((35.0, 15.0), None) == (35.0, 15.0)
    # at α = 0 every step yields one token: speculation only costs (factor > 1)
    worst = decode_capacity(plain, SpecPerfModel(plain, 3, "ngram"), 1.0, 32, 1000)
    assert worst.factor == pytest.approx(23.28096 / 13.52, rel=1e-12)


def _cfg(placement: str, speculative: dict) -> dict:
    return load_config(
        {
            "workload": {"trace": AZURE},
            "cluster": {
                "spec": "1x8:h100", "perf_model": "roofline",
                "models": ["llama-2-7b", "llama-2-13b"], "placement": placement,
                "warmup_s": 20, "mix": {"rate": 2.0, "alpha": 1.0, "replay_s": 60},
                "speculative": speculative,
            },
        }
    )  # fmt: skip


@needs_traces
def test_dedicated_sizes_a_speculating_model_by_its_decode_rate():
    """The 7B speculates: its demand is the workload's load with the artifact's 15 ms/token
    × the factor of its engines' own step models (verification step of the engine that ran,
    at B = 32 and the model's mean context), the 13B's is unchanged, and the dedicated
    placement gives the 13B the GPUs the 7B no longer needs (7B 4 → 2 instances, 13B 2 → 3)."""
    plain = run_simulation(_cfg("dedicated", {}))
    spec = run_simulation(_cfg("dedicated", {"llama-2-7b": NGRAM}))
    p_ctl, s_ctl = plain.extras["controller"], spec.extras["controller"]
    pm = spec.extras["summary"]["per_model"]
    cap = pm["llama-2-7b"]["spec_capacity"]
    assert "spec_capacity" not in pm["llama-2-13b"]
    assert "spec_capacity" not in plain.extras["summary"]["per_model"]["llama-2-7b"]
    assert cap["tokens_per_step"] == pytest.approx(0.7599 / 0.3, rel=1e-12)
    assert cap["decode_time_factor"] == cap["verify_step_s"] / (
        cap["tokens_per_step"] * cap["step_s"]
    )
    # the step times are those of the engines that served: plain and speculative
    table = s_ctl.instance_table()
    first = int(np.asarray(table["engine"])[np.asarray(table["model"]) == 0][0])
    engine = s_ctl.backend.sim.instances[first]
    b, ctx = cap["batch"], cap["ctx"]
    assert engine.perf.step_seconds(b, b * ctx, 0, 0, 0, 0) == cap["verify_step_s"]
    assert engine.perf.base.step_seconds(b, b * ctx, 0, 0, 0, 0) == cap["step_s"]
    reqs = cluster_workload(spec.config).requests
    c = spec.config.cluster
    want = workload_stats(c, reqs, [(35.0, 15.0 * cap["decode_time_factor"]), (70.0, 20.0)])
    assert s_ctl.demand == [s["concurrency"] for s in want]
    assert s_ctl.demand[1] == p_ctl.demand[1]
    assert s_ctl.demand[0] < p_ctl.demand[0]

    def counts(res):
        return np.bincount(np.asarray(res.extras["controller"].instance_table()["model"])).tolist()

    assert counts(plain) == [4, 2]
    assert counts(spec) == [2, 3]


@needs_traces
def test_warmserve_priors_count_speculation_and_the_requests_stay():
    """WarmServe's seasonal priors of a speculating model shrink (its decode term × the
    factor < 1), the other model's priors and every request are the same as without."""
    plain = cluster_workload(_cfg("warmserve", {}))
    spec = cluster_workload(_cfg("warmserve", {"llama-2-13b": NGRAM}))
    p, q = plain.requests, spec.requests
    for name in ("arrival_ns", "prompt_len", "output_len"):
        assert np.array_equal(getattr(p, name), getattr(q, name))
    assert np.array_equal(p.extra["model"], q.extra["model"])
    assert plain.prior_avg is not None
    assert spec.prior_avg is not None
    assert np.array_equal(plain.prior_avg[0], spec.prior_avg[0])
    assert np.all(spec.prior_avg[1] <= plain.prior_avg[1])
    assert spec.prior_avg[1].sum() < plain.prior_avg[1].sum()


@needs_traces
def test_streamed_stats_with_speculation_equal_the_whole_workloads():
    """A streamed (ServeGen) cluster run whose 13B speculates: its statistics are the whole
    workload's with the 13B's decode term × its factor, bit for bit; the others' as without."""
    from tests.cluster.test_exact_hash import _servegen
    from tidal.sim.cluster_spec import service_times, spec_capacities
    from tidal.sim.cluster_stream import streamed_workload, streams

    cfg = load_config(_servegen("warmserve", days=0.04, rate=2.0,
                                speculative={"llama-2-13b": NGRAM}))  # fmt: skip
    assert streams(cfg)
    whole = cluster_workload(cfg).requests
    plain = workload_stats(cfg.cluster, whole)
    caps = spec_capacities(cfg, plain)
    assert [c is not None for c in caps] == [False, False, True, False]
    *_, stats, _ = streamed_workload(cfg)
    assert stats == workload_stats(cfg.cluster, whole, service_times(cfg, caps))
    assert stats[2]["concurrency"] < plain[2]["concurrency"]
    assert [s for i, s in enumerate(stats) if i != 2] == [s for i, s in enumerate(plain) if i != 2]


@pytest.mark.parametrize("factor", [1.0, 0.42, 1.3])
def test_muxserve_estimate_scales_the_decode_term(factor):
    """MuxServe's tpt(b) = b / (S · t_d(b) · f + t_p(b)): with free prefill and a constant
    decode step c, the smallest batch meeting λ is b* = λ · S · c · f (the tool's bisection
    returns it within one), so a speculating model (f < 1) needs a smaller batch."""
    from tests.cluster.test_muxserve import GPU_BYTES, _Linear
    from tidal.cluster.policies.muxserve_plan import MuxLLM, MuxServeOptimizer
    from tidal.hardware.models import get_model

    rate, c, output = 20.0, 0.01, 200
    llm = MuxLLM(0, get_model("llama-2-7b"), rate, 100, output, 1e9, 1.0,
                 lambda n: _Linear(c), lambda n, p, pre: 1.0, decode_factor=factor)  # fmt: skip
    opt = MuxServeOptimizer.__new__(MuxServeOptimizer)
    opt.avg_util, opt.gpu_bytes = 1.0, GPU_BYTES
    _, _, bs = opt.estimate_throughput(llm, 1, rate, 50, cache_bytes=1e15)
    b_star = rate * output * c * factor  # 40 · f
    assert b_star - 2 < bs < b_star + 1


@needs_traces
def test_muxserve_llms_carry_the_speculating_models_factor():
    """MuxServe's optimiser sees each model's factor from the run's statistics (1 without
    speculation), the one ``summary.json`` reports."""
    res = run_simulation(load_config({
        "workload": {"trace": AZURE},
        "cluster": {"spec": "1x4:h100", "perf_model": "roofline",
                    "models": ["llama-2-7b", "llama-2-7b", "llama-2-13b"],
                    "placement": "muxserve", "warmup_s": 20,
                    "mix": {"rate": 3.0, "alpha": 1.0, "replay_s": 60},
                    "speculative": {"llama-2-13b": NGRAM}},
    }))  # fmt: skip
    llms = res.extras["controller"].policy.llms()
    cap = res.extras["summary"]["per_model"]["llama-2-13b"]["spec_capacity"]
    assert [m.decode_factor for m in llms] == [1.0, 1.0, cap["decode_time_factor"]]
    assert cap["decode_time_factor"] < 1
