"""The planner's top list holds distinct deployments: options that served the traffic
identically (a knob that made no difference) collapse into one entry naming the knobs that
varied; the plan table shows them and, with prefix caching on, the hit rate (issue 31)."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from tidal.cli import app
from tidal.experiments.planner import plan, same_service
from tidal.experiments.space import load_plan_spec

WORKLOAD = {
    "num_requests": 300, "rate": 20, "prompt_len": 256, "output_len": 32,
    "length_dist": "uniform",
}  # fmt: skip
SEARCH = {
    "gpu": ["h100", "l40s"], "tp": [1], "scheduler.batching": ["mb"],
    "scheduler.ordering": ["fcfs"], "scheduler.token_budget": [2048],
    "scheduler.max_seqs": [64, 128, 256],
}  # fmt: skip
"""At 20 req/s of short requests no more than ~20 run at once: max_seqs never binds."""


def test_ties_collapse_into_one_entry_naming_the_varied_knob() -> None:
    spec = {"base": {"workload": WORKLOAD}, "search": SEARCH, "slo": {"ttft_p99_s": 1},
            "max_replicas": 4, "top": 3}  # fmt: skip
    out = plan(load_plan_spec(spec))
    labels = [c["label"] for c in out.candidates]
    assert len(out.candidates) == 2, labels  # one per GPU type, not three of the cheapest
    assert {c["gpu"] for c in out.candidates} == {"h100", "l40s"}
    for c in out.candidates:
        assert c["varied"] == {"scheduler.max_seqs": [64, 128, 256]}
        assert len(c["same_as"]) == 2
    # the collapsed evaluations really are identical in service, and differ from the others
    best = [e for e in out.evaluations if e.passed and e.option.config.gpu == "h100"]
    assert len(best) >= 3
    assert all(same_service(best[0], e) for e in best[1:])
    other = next(e for e in out.evaluations if e.passed and e.option.config.gpu == "l40s")
    assert not same_service(best[0], other)


def test_distinct_deployments_are_kept_apart() -> None:
    """Budgets that change the service stay separate rows (no knob listed)."""
    search = dict(SEARCH, gpu=["h100"], **{"scheduler.max_seqs": [64],
                  "scheduler.token_budget": [512, 2048]})  # fmt: skip
    spec = {"base": {"workload": WORKLOAD}, "search": search, "slo": {"ttft_p99_s": 1},
            "max_replicas": 4, "top": 3}  # fmt: skip
    out = plan(load_plan_spec(spec))
    assert len(out.candidates) == 2
    assert all("varied" not in c for c in out.candidates)


def test_the_plan_table_shows_the_varied_knobs_and_the_prefix_hit_rate(tmp_path) -> None:
    wl = dict(WORKLOAD, shared_prefix_groups=4, shared_prefix_len=512)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"base": {"workload": wl}}))
    args = ["plan", "--config", str(tmp_path / "p.yaml"), "--gpus", "h100", "--tp", "1",
            "--batching", "mb", "--ordering", "fcfs", "--token-budget", "2048",
            "--max-seqs", "64,128", "--max-replicas", "2", "--slo-ttft-p99", "1",
            "--out", str(tmp_path / "out")]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "the same with max_seqs 64, 128" in res.output
    assert "prefix hit" in res.output
    row = next(line for line in res.output.splitlines() if line.startswith("│ 1 "))
    assert row.rstrip(" │").endswith("%")
