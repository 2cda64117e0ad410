"""``tidal plan --quantization A,B`` is a search axis (one value: every option in it), and the
plan's outputs name each option's precision (issue 28, item 7)."""

from __future__ import annotations

import json

import polars as pl
from typer.testing import CliRunner

from tidal.cli import app

PLAN = [
    "plan", "--model", "llama-3.1-8b", "--num-requests", "40", "--rate", "2",
    "--prompt-len", "256", "--output-len", "32", "--tp", "1", "--batching", "mb",
    "--ordering", "fcfs", "--token-budget", "2048", "--max-seqs", "64", "--max-replicas", "2",
    "--slo-ttft-p99", "2", "--objective", "dollars", "--top", "5",
]  # fmt: skip


def test_a_comma_list_of_precisions_is_an_axis_reported_per_option(tmp_path) -> None:
    out = tmp_path / "p"
    argv = [*PLAN, "--gpus", "h100,b200", "--quantization", "fp8,modelopt_fp4", "--out", str(out)]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "plan.json").read_text())
    assert doc["search"]["axes"]["quantization"] == ["fp8", "modelopt_fp4"]
    opts = {(o["values"]["gpu"], o["precision"]): o for o in doc["options"]}
    assert set(opts) == {("h100", "fp8"), ("h100", "nvfp4"), ("b200", "fp8"), ("b200", "nvfp4")}
    assert opts[("h100", "nvfp4")]["status"] == "no-tables"
    assert "no nvfp4 GEMM" in opts[("h100", "nvfp4")]["detail"]
    assert "skipped 1 option: nvfp4 on h100" in res.output
    assert {c["precision"] for c in doc["candidates"]} == {"fp8", "nvfp4"}
    evals = pl.read_parquet(out / "evaluations.parquet")
    assert set(evals["precision"]) <= {"fp8", "nvfp4"}
    assert not any("h100" in c and "nvfp4" in c for c in evals["candidate"])  # never run
    assert "precision" in res.output


def test_one_precision_deploys_every_option_in_it(tmp_path) -> None:
    out = tmp_path / "p"
    res = CliRunner().invoke(app, [*PLAN, "--gpus", "h100", "--quantization", "fp8",
                                   "--out", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "plan.json").read_text())
    assert "quantization" not in doc["search"]["axes"]
    assert [o["precision"] for o in doc["options"]] == ["fp8"]
    assert doc["best"]["config"]["quantization"] == "fp8"


def test_an_unknown_precision_names_the_flag_and_the_valid_names(tmp_path) -> None:
    res = CliRunner().invoke(app, [*PLAN, "--quantization", "fp8,fp3", "--out", str(tmp_path)])
    assert res.exit_code != 0
    text = " ".join(res.output.split())
    assert "search.quantization" in text  # (and the flag: sys.argv's, pytest's under CliRunner)
    assert "unknown method 'fp3'" in text
    assert "modelopt_fp4" in text
    assert "bf16" in text


def test_pareto_refuses_a_precision_axis_rather_than_dropping_it(tmp_path) -> None:
    argv = ["plan", "--pareto", "--num-requests", "20", "--slo-ttft-p99", "2",
            "--quantization", "bf16,fp8", "--out", str(tmp_path)]  # fmt: skip
    res = CliRunner().invoke(app, argv)
    assert res.exit_code != 0
    assert "one precision" in " ".join(res.output.split())
