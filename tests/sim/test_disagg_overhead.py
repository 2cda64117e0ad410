"""``deployment.request_overhead_ms`` (sim/disagg_overhead.py): the serving path's per-request
latency adds exactly itself to an idle request's TTFT in both protocols, is its own TTFT term
(the breakdown still telescopes), keeps fast-forward exact, and is absent at its default."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sim.test_disagg import COLS, _check_breakdown, _run
from tidal.sim.config import load_config
from tidal.sim.disagg_metrics import ttft_breakdown
from tidal.sim.disagg_overhead import PRESETS, REQUEST_OVERHEAD_MS
from tidal.sim.run import run_simulation

LINK = {"link": "ib-ndr", "bandwidth_gbs": 50, "efficiency": 1.0, "latency_us": 10}


@pytest.mark.parametrize("protocol", ["pull", "push"])
def test_an_idle_request_gets_exactly_the_overhead_more_ttft(protocol):
    kv = {**LINK, "protocol": protocol}
    dep = {"prefill": {"tp": 1}, "decode": {"tp": 1}, "kv_transfer": kv}
    base = _run(dep)
    late = _run({**dep, "request_overhead_ms": 37.5})
    b, c = base.columns, late.columns
    ttft = lambda x: int(x["first_token_ns"][0] - x["arrival_ns"][0])  # noqa: E731
    assert ttft(c) - ttft(b) == 37_500_000
    assert "handoff_ns" not in b
    assert c["handoff_ns"][0] == 37_500_000
    parts, before = ttft_breakdown(c), ttft_breakdown(b)
    assert parts["handoff"][0] == 37_500_000
    assert "handoff" not in before
    for k in before:  # every other term is the run's without the overhead
        assert parts[k][0] == before[k][0], k
    _check_breakdown(late)
    if protocol == "pull":  # the decode leg arrives after the proxy's second hop
        assert c["kv_transfer_start_ns"][0] == c["prefill_end_ns"][0] + 37_500_000
    else:  # the prefill leg waits for the handshake after the decode blocks are reserved
        assert c["prefill_start_ns"][0] == c["decode_alloc_ns"][0] + 37_500_000
    assert late.metrics["request_overhead_ms"] == 37.5
    assert "request_overhead_ms" not in base.metrics
    assert set(late.metrics["ttft_breakdown_mean_s"]) == set(parts)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_auto_takes_the_decode_engines_measured_value(engine):
    dep = {"prefill": {"tp": 1}, "decode": {"tp": 1, "engine": engine},
           "request_overhead_ms": "auto"}  # fmt: skip
    res = _run(dep)
    assert res.metrics["request_overhead_ms"] == REQUEST_OVERHEAD_MS[engine]
    assert ttft_breakdown(res.columns)["handoff"][0] == REQUEST_OVERHEAD_MS[engine] * 1e6


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_measured_path_by_name_holds_for_either_engine(name):
    for engine in ("vllm", "sglang"):
        dep = {"prefill": {"tp": 1}, "decode": {"tp": 1, "engine": engine},
               "request_overhead_ms": name}  # fmt: skip
        assert _run(dep).metrics["request_overhead_ms"] == PRESETS[name]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    p=st.integers(1, 2),
    d=st.integers(1, 2),
    rate=st.sampled_from([10.0, 80.0]),
    seed=st.integers(0, 1000),
    protocol=st.sampled_from(["pull", "push"]),
    ms=st.sampled_from([0.5, 20.0, 180.0]),
)
def test_overhead_keeps_fast_forward_exact_and_the_breakdown_whole(p, d, rate, seed, protocol, ms):
    dep = {"prefill": {"instances": p}, "decode": {"instances": d, "scheduler": {"max_seqs": 16}},
           "kv_transfer": {"protocol": protocol}, "request_overhead_ms": ms}  # fmt: skip
    wl = {"num_requests": 30, "rate": rate, "prompt_len": 256, "output_len": 48,
          "length_dist": "uniform", "seed": seed}  # fmt: skip
    a, b = _run(dep, True, **wl), _run(dep, False, **wl)
    _check_breakdown(a)
    for k in (*COLS, "handoff_ns"):
        assert np.array_equal(a.columns[k], b.columns[k]), k
    assert (ttft_breakdown(a.columns)["handoff"] == round(ms * 1e6)).all()


def test_closed_loop_with_overhead_completes_and_returns_every_block():
    dep = {"prefill": {"instances": 2}, "decode": {"memory": {"num_blocks": 120}},
           "request_overhead_ms": 50}  # fmt: skip
    res = _run(dep, num_requests=30, rate=None, concurrency=8, prompt_len=512, output_len=64)
    _check_breakdown(res)
    assert res.metrics["num_completed"] == 30
    pools = res.metrics["pools"]
    pre = pools["prefill"]
    assert pre["num_free_blocks_end"] == pre["instances"] * pre["num_blocks"]
    assert pools["decode"]["num_free_blocks_end"] == 120


@pytest.mark.parametrize(
    ("value", "needle"),
    [(-1, "negative"), ("fast", "neither a number of ms nor auto"), (float("nan"), "NaN")],
)
def test_bad_overhead_names_the_field_and_the_fix(value, needle):
    with pytest.raises(Exception, match="request_overhead_ms") as err:
        load_config({"model": "llama-3.1-8b", "gpu": "h100",
                     "deployment": {"decode": {}, "request_overhead_ms": value}})  # fmt: skip
    assert needle in str(err.value)


def test_agg_mode_refuses_an_overhead():
    with pytest.raises(Exception, match="mode: disagg or drop them"):
        load_config({"model": "llama-3.1-8b", "gpu": "h100",
                     "deployment": {"mode": "agg", "request_overhead_ms": 10}})  # fmt: skip


def test_a_string_number_is_read_as_ms():
    cfg = load_config({"model": "llama-3.1-8b", "gpu": "h100", "perf_model": "roofline",
                       "workload": {"num_requests": 1, "rate": 1.0, "prompt_len": 64,
                                    "output_len": 2},
                       "deployment": {"decode": {}, "request_overhead_ms": "12.5"}})  # fmt: skip
    assert cfg.deployment is not None
    assert cfg.deployment.request_overhead_ms == 12.5
    assert run_simulation(cfg).metrics["request_overhead_ms"] == 12.5
