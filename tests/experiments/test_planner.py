"""The capacity planner: the exhaustive optimum with fewer simulations; exact early stops."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from tidal.cli import app
from tidal.core.errors import ConfigError
from tidal.experiments.planner import plan, write_plan
from tidal.experiments.space import load_plan_spec
from tidal.hardware.gpus import get_gpu
from tidal.report.render import render_report

SPEC = {
    "base": {
        "model": "llama-3.1-8b",
        # pinned: the cheap-L40S case below was built on the plain roofline; with the corrected
        # roofline (issue 13: host time, PCIe all-reduce) no L40S option meets this SLO
        "perf_model": "roofline",
        "workload": {
            "num_requests": 600,
            "rate": 40,
            "prompt_len": 1500,
            "output_len": 150,
            "length_dist": "uniform",
        },
    },
    "search": {
        "gpu": ["h100", "l40s"],
        "tp": [1, 2],
        "scheduler.token_budget": [512, 4096],
        "scheduler.max_seqs": [256],
        # pinned: the default axis spans every registered policy (eb, ebplus since issue 3)
        "scheduler.batching": ["mb"],
    },
    "slo": {"ttft_p99_s": 0.5, "tpot_p99_s": 0.05},
    "max_replicas": 6,
    "top": 2,
}


@pytest.fixture(scope="module")
def exhaustive():
    return plan(load_plan_spec(SPEC), exhaustive=True)


def _brute_force(exh, objective, prices):
    """The optimum from the exhaustive table, costed by hand: GPUs = replicas × TP."""
    hours = exh.span_s / 3600
    best = None
    for ev in exh.evaluations:
        if not ev.passed:
            continue
        cfg = ev.option.config
        gpus = ev.capacity * cfg.tp
        usd = gpus * prices.get(cfg.gpu, get_gpu(cfg.gpu).price_per_hour) * hours
        cost = (gpus * hours, usd) if objective == "gpu_hours" else (usd, gpus * hours)
        key = (*cost, ev.metrics["ttft_p99_s"], ev.option.label)
        if best is None or key < best[0]:
            best = (key, ev)
    return best[1]


def test_exhaustive_table_is_monotone_in_replicas(exhaustive):
    by_option = {}
    for ev in exhaustive.evaluations:
        by_option.setdefault(ev.option.label, []).append((ev.capacity, ev.passed))
    assert len(by_option) == 8
    for runs in by_option.values():
        passed = [p for _, p in sorted(runs)]
        assert passed == sorted(passed), "meeting the SLO must be monotone in replicas"
    # the grid is not trivial: some options need several replicas, some never make it
    assert any(not any(p for _, p in r) for r in by_option.values())
    assert all(not p for r in by_option.values() for c, p in r if c == 1)


@pytest.mark.parametrize(
    ("objective", "prices"),
    [("gpu_hours", {}), ("dollars", {}), ("dollars", {"l40s": 0.4})],
)
def test_planner_returns_the_exhaustive_optimum_with_fewer_simulations(
    exhaustive, objective, prices
):
    spec = load_plan_spec(dict(SPEC, objective=objective, prices=prices))
    out = plan(spec)
    truth = _brute_force(exhaustive, objective, prices)
    assert out.best is not None
    assert out.best["option"] == truth.option.label
    assert out.best["replicas"] == truth.capacity
    assert out.simulations_run < out.exhaustive_simulations == 6 * 8
    # the best meets the SLO and one replica fewer does not
    assert out.best["metrics"]["ttft_p99_s"] <= 0.5
    fewer = [
        e
        for e in exhaustive.evaluations
        if e.option.label == truth.option.label and e.capacity == truth.capacity - 1
    ]
    assert all(not e.passed for e in fewer)
    # the runner-up is the exhaustive second best, never cheaper than the best
    assert len(out.candidates) == 2
    assert out.candidates[0][objective] <= out.candidates[1][objective]


def test_cheap_gpus_change_the_answer_and_costs_are_gpus_times_hours(exhaustive):
    by_hours = plan(load_plan_spec(SPEC)).best
    by_usd = plan(load_plan_spec(dict(SPEC, objective="dollars", prices={"l40s": 0.4}))).best
    assert by_hours["gpu"] == "h100"
    assert by_usd["gpu"] == "l40s"
    hours = exhaustive.span_s / 3600
    assert by_hours["gpu_hours"] == pytest.approx(by_hours["num_gpus"] * hours)
    assert by_usd["dollars"] == pytest.approx(by_usd["num_gpus"] * 0.4 * hours)
    assert by_hours["num_gpus"] == by_hours["replicas"] * by_hours["tp"]


def test_options_costlier_than_the_bound_are_pruned_without_simulating():
    spec = load_plan_spec(dict(SPEC, search=dict(SPEC["search"], tp=[1, 2, 4]), top=1))
    out = plan(spec)
    tp4 = [o for o in out.outcomes if o.option.config.tp == 4]
    assert tp4
    assert all(o.status == "pruned" for o in tp4)
    assert all(o.simulations == 0 for o in tp4)
    # failing runs are stopped early
    assert any(ev.stopped_early for ev in out.evaluations)
    assert all(not ev.passed for ev in out.evaluations if ev.stopped_early)


@given(
    n=st.integers(1, 400),
    p=st.sampled_from([50, 90, 99]),
    seed=st.integers(0, 2**32 - 1),
)
def test_early_stop_threshold_is_exact_for_numpy_percentiles(n, p, seed):
    """With `allowed` values above S the p-th percentile exceeds S (so stopping is sound);
    with one fewer it need not (so the threshold cannot be lowered)."""
    allowed = n - math.floor(p / 100 * (n - 1))
    rng = np.random.default_rng(seed)
    s = 1.0
    x = np.concatenate([rng.uniform(1.0001 * s, 10 * s, allowed), rng.uniform(0, s, n - allowed)])
    assert np.percentile(rng.permutation(x), p) > s
    if allowed > 1:
        y = np.concatenate([np.full(allowed - 1, s * (1 + 1e-6)), np.full(n - allowed + 1, s / 2)])
        assert np.percentile(y, p) <= s


def test_write_plan_and_report(tmp_path):
    out = plan(load_plan_spec(SPEC))
    write_plan(out, tmp_path)
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["best"] == doc["candidates"][0]
    for c in doc["candidates"]:
        assert {"config", "num_gpus", "gpu_hours", "dollars", "metrics", "replicas"} <= set(c)
        assert c["config"]["gpu"] == c["gpu"]
    assert doc["simulations_run"] == out.simulations_run
    ev = pl.read_parquet(tmp_path / "evaluations.parquet")
    assert ev.height == out.simulations_run
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 2
    dep = json.loads((runs[0] / "deployment.json").read_text())
    assert dep["replicas"] == doc["best"]["replicas"]
    _, figs = render_report(tmp_path)
    names = {f.path.name for f in figs}
    assert {"plan_costs.png", "plan_search.png", "gpu_timeline.png", "latency_cdf.png"} <= names
    gpu_fig = next(f for f in figs if f.path.name == "gpu_timeline.png")
    assert f"on {dep['replicas']}× (1× h100)" in gpu_fig.title


def test_plan_specs_refuse_bad_input():
    with pytest.raises(ConfigError, match="at least one target"):
        load_plan_spec(dict(SPEC, slo={}))
    with pytest.raises(ConfigError, match="unknown target"):
        load_plan_spec(dict(SPEC, slo={"ttft_p95_s": 1.0}))
    with pytest.raises(ConfigError, match="router"):
        load_plan_spec(dict(SPEC, router="random"))
    closed = dict(SPEC["base"], workload=dict(SPEC["base"]["workload"], concurrency=8))
    with pytest.raises(ConfigError, match=r"workload\.concurrency"):
        plan(load_plan_spec(dict(SPEC, base=closed)))


def test_cli_plan_on_a_real_trace_window(tmp_path):
    args = [
        "plan",
        "--trace",
        "azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz",
        "--rate-scale",
        "4",
        "--end-s",
        "120",
        "--gpus",
        "h100,l40s",
        "--tp",
        "1",
        "--token-budget",
        "2048",
        "--max-seqs",
        "256",
        "--batching",
        "mb",
        "--slo-ttft-p99",
        "1.0",
        "--max-replicas",
        "8",
        "--out",
        str(tmp_path),
    ]
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["slo"] == {"ttft_p99_s": 1.0}
    assert doc["best"]["metrics"]["ttft_p99_s"] <= 1.0
    assert doc["simulations_run"] < doc["exhaustive_simulations"] == 16
    assert "simulations (the exhaustive grid: 16)" in res.output
    bad = CliRunner().invoke(app, ["plan", "--out", str(tmp_path), "--slo-ttft-p99", "1"])
    assert bad.exit_code == 2
    assert "--trace" in bad.output


def test_policy_names_in_the_search_space_are_checked_against_the_registries():
    spec = load_plan_spec(
        dict(SPEC, search=dict(SPEC["search"], **{"scheduler.batching": ["mb", "nope"]}))
    )
    with pytest.raises(ConfigError, match=r"search\.scheduler\.batching: unknown value 'nope'"):
        plan(spec)
    with pytest.raises(ConfigError, match=r"search\.workload\.rate: the planner sizes"):
        plan(load_plan_spec(dict(SPEC, search={"workload.rate": [1, 2]})))
    bad_key = load_plan_spec(dict(SPEC, search={"schedular.token_budget": [512]}))
    with pytest.raises(ConfigError, match="no option of the search space is valid"):
        plan(bad_key)


def test_a_capacity_key_with_a_template_is_searched_through_the_config():
    """Any monotone config value can be the capacity: here the memory bandwidth of a what-if
    GPU (``h100@{n}TBs``), one instance. The planner's answer is the smallest passing n."""
    spec = dict(
        SPEC,
        search={
            "gpu": ["h100"],
            "tp": [1],
            "scheduler.token_budget": [2048],
            "scheduler.max_seqs": [256],
            "scheduler.batching": ["mb"],
        },
        slo={"tpot_p99_s": 0.02},
        capacity_key="gpu",
        capacity_template="{gpu}@{n}TBs",
        gpus_per_unit=1,
        max_replicas=12,
        top=1,
    )
    spec["base"] = dict(SPEC["base"], workload=dict(SPEC["base"]["workload"], rate=4))
    out = plan(load_plan_spec(spec))
    exh = plan(load_plan_spec(spec), exhaustive=True)
    passing = sorted(ev.capacity for ev in exh.evaluations if ev.passed)
    assert passing
    assert passing == list(range(passing[0], 13))  # monotone in bandwidth
    assert out.best["replicas"] == passing[0] > 1
    assert out.simulations_run < 12


def test_an_unreachable_slo_gives_no_best_and_says_so(tmp_path):
    spec = dict(
        SPEC,
        search={
            "gpu": ["h100"],
            "tp": [1],
            "scheduler.token_budget": [2048],
            "scheduler.max_seqs": [256],
            "scheduler.batching": ["mb"],
        },
        slo={"ttft_p99_s": 1e-6},
        max_replicas=2,
    )
    out = plan(load_plan_spec(spec))
    assert out.best is None
    assert [o.status for o in out.outcomes] == ["infeasible"]
    write_plan(out, tmp_path)
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["best"] is None
    assert doc["candidates"] == []
    _, figs = render_report(tmp_path)
    assert "plan_search.png" in {f.path.name for f in figs}
    assert (
        "No deployment in the search space meets the SLO" in (tmp_path / "report.html").read_text()
    )
