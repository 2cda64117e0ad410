"""``tidal plan`` interrupted with Ctrl-C says what it kept, and run again finishes with the
plan of an uninterrupted run — the same files, byte for byte — reusing the simulations that
had finished (issue 31). Run in a pseudo-terminal, as a user's Ctrl-C is."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.cli.ptyrun import run_in_pty
from tidal.cli import app

PLAN = [
    "plan", "--num-requests", "1500", "--rate", "60", "--prompt-len", "512", "--output-len", "64",
    "--length-dist", "uniform", "--gpus", "h100,l40s", "--tp", "1,2", "--batching", "mb",
    "--ordering", "fcfs", "--token-budget", "512,2048", "--max-seqs", "64",
    "--max-replicas", "8", "--slo-ttft-p99", "0.5", "--top", "3",
]  # fmt: skip
"""~14 simulations of 1,500 requests (~0.5 s each)."""


def _files(out):
    """The plan's deterministic files: plan.json, evaluations.parquet, and each returned run
    (run.json holds wall-clock times)."""
    files = {p: (out / p).read_bytes() for p in ("plan.json", "evaluations.parquet")}
    for run in sorted((out / "runs").iterdir()):
        for f in sorted(run.iterdir()):
            if f.name != "run.json":
                files[f"runs/{run.name}/{f.name}"] = f.read_bytes()
    return files


def test_an_interrupted_plan_resumes_to_the_uninterrupted_answer(tmp_path):
    whole = CliRunner().invoke(app, [*PLAN, "--out", str(tmp_path / "whole")])
    assert whole.exit_code == 0, whole.output
    total = json.loads((tmp_path / "whole" / "plan.json").read_text())["simulations_run"]
    assert total >= 8

    def after_four(text: str, _: float) -> bool:
        return text.count(" the SLO") >= 4

    cut = run_in_pty([*PLAN, "--out", "cut"], tmp_path, interrupt_when=after_four, columns=200)
    assert cut.returncode == 130, cut.text
    assert "interrupted:" in cut.text
    assert "run the same command again to resume" in cut.text
    assert not (tmp_path / "cut" / "plan.json").exists()
    kept = len(list((tmp_path / "cut" / "simulations").glob("*.json")))
    assert 4 <= kept < total
    assert f"{kept} simulations kept" in cut.text

    again = CliRunner().invoke(app, [*PLAN, "--out", str(tmp_path / "cut")])
    assert again.exit_code == 0, again.output
    assert f"{kept} reused from an earlier run" in again.output
    record = json.loads((tmp_path / "cut" / "plan_run.json").read_text())
    assert record["simulations_reused"] == kept
    assert _files(tmp_path / "cut") == _files(tmp_path / "whole")

    # and a third run simulates nothing new
    third = CliRunner().invoke(app, [*PLAN, "--out", str(tmp_path / "cut")])
    assert third.exit_code == 0, third.output
    assert json.loads((tmp_path / "cut" / "plan_run.json").read_text())["simulations_reused"] == (
        total
    )
    assert _files(tmp_path / "cut") == _files(tmp_path / "whole")
