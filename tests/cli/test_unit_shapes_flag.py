"""``tidal simulate --cluster … --unit-shapes auto``: each model's unit shape planned on its
slice of the trace before the run (experiments/unit_shapes.py): printed, written to
unit_shapes.json, and the run's config holds the chosen entries; bad values are refused."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.conftest import needs_traces
from tidal.cli import app

AZURE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"


def _invoke(tmp_path, *extra: str):
    yaml = tmp_path / "short.yaml"
    yaml.write_text("cluster:\n  mix: {replay_s: 60}\n")
    return CliRunner().invoke(app, [
        "simulate", "--config", str(yaml), "--cluster", "1x4:h100",
        "--models", "llama-2-13b,llama-2-7b", "--placement", "warmserve", "--trace", AZURE,
        "--alpha", "1", "--rate", "3", "--slo-ttft", "0.1", "--slo-tpot", "0.02", "--no-plot",
        *extra,
    ])  # fmt: skip


@needs_traces
def test_unit_shapes_auto_plans_every_model(tmp_path):
    out = tmp_path / "run"
    res = _invoke(tmp_path, "--unit-shapes", "auto", "--unit-shapes-attainment", "0.95",
                  "--out", str(out))  # fmt: skip
    assert res.exit_code == 0, res.output
    plan = json.loads((out / "unit_shapes.json").read_text())
    assert list(plan) == ["llama-2-13b", "llama-2-7b"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["cluster"]["models"] == [p["entry"] for p in plan.values()]
    for name, p in plan.items():
        assert f"unit shape of {name}: {p['entry']}" in res.output
        ran = [s for s in p["shapes"] if not s["skipped"]]
        meeting = [s for s in ran if s["meets"]]
        assert meeting  # 3 req/s on a 1×4 H100 node: some shape meets the SLO
        assert p["gpus"] == min(s["gpus"] for s in meeting)  # the fewest GPUs
        assert all(s["slo_attainment"] >= 0.95 for s in meeting)
        assert all(s["num_requests"] == ran[0]["num_requests"] > 0 for s in ran)
    skipped = [s for s in plan["llama-2-13b"]["shapes"] if s["skipped"]]
    assert skipped  # the 13B's 3-engine and 2p2d units need 8 GPUs: not on a 4-GPU node
    assert all("cluster.models" in s["skipped"] for s in skipped)


@needs_traces
def test_unit_shapes_refuses_bad_values(tmp_path):
    res = _invoke(tmp_path, "--unit-shapes", "best")
    assert res.exit_code != 0
    assert "--unit-shapes 'best'" in res.output
    res = _invoke(tmp_path, "--unit-shapes", "auto", "--unit-shapes-attainment", "95")
    assert res.exit_code != 0
    assert "--unit-shapes-attainment" in res.output
