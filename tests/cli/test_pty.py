"""Every command with a progress bar, run in an interactive terminal (a pseudo-terminal): exit
0 and its result files. Issue 31: the console proxy handed to rich's ``Progress`` crashed
every one of them (``IndexError('pop from empty list') … lost sys.stderr``) in a terminal,
never in CI, which has none. ~15 s in all."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.cli.ptyrun import run_in_pty

pytestmark = pytest.mark.skipif(
    not hasattr(__import__("os"), "openpty"), reason="needs a pseudo-terminal (POSIX)"
)

PLAN = [
    "plan", "--num-requests", "300", "--rate", "30", "--prompt-len", "256", "--output-len", "32",
    "--length-dist", "uniform", "--gpus", "h100,l40s", "--tp", "1", "--batching", "mb",
    "--ordering", "fcfs", "--token-budget", "2048", "--max-seqs", "64", "--max-replicas", "4",
    "--slo-ttft-p99", "1", "--out", "plan",
]  # fmt: skip
"""A small plan: a few simulations of 300 requests, the progress spinner on."""


def _ok(res, what: str) -> None:
    assert res.returncode == 0, f"{what} exited {res.returncode} in a terminal:\n{res.output}"
    assert "lost sys.stderr" not in res.output, res.output
    assert "Traceback" not in res.output, res.output


def test_plan_sweep_report_and_a_long_simulate_in_a_terminal(tmp_path):
    res = run_in_pty(PLAN, tmp_path)
    _ok(res, "plan")
    best = json.loads((tmp_path / "plan" / "plan.json").read_text())["best"]
    assert best is not None
    assert best["metrics"]["ttft_p99_s"] <= 1
    assert "cheapest deployments meeting" in res.text

    base = {
        "model": "llama-3.1-8b",
        "gpu": "h100",
        "workload": {"num_requests": 200, "rate": 10, "prompt_len": 256, "output_len": 32},
        "grid": {"scheduler.token_budget": [512, 2048]},
    }
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(base))
    res = run_in_pty(["sweep", "sweep.yaml", "--out", "sweep", "--backend", "serial"], tmp_path)
    _ok(res, "sweep")
    assert (tmp_path / "sweep" / "results.parquet").is_file()
    assert "2 cells: 2 run" in res.text

    for target in ("sweep", "plan"):
        res = run_in_pty(["report", target], tmp_path)
        _ok(res, f"report {target}")
        assert (tmp_path / target / "report.html").is_file()
        assert list((tmp_path / target / "figures").glob("*.png"))

    # ≥ 20,000 requests: simulate's progress bar (a small model at a high rate: ~3 s)
    sim = [
        "simulate", "--model", "phi-2", "--num-requests", "20000", "--rate", "400",
        "--prompt-len", "64", "--output-len", "8", "--out", "sim",
    ]  # fmt: skip
    res = run_in_pty(sim, tmp_path)
    _ok(res, "simulate")
    summary = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert summary["metrics"]["num_completed"] == 20_000


def test_ctrl_c_says_what_was_kept_and_exits_130(tmp_path):
    """A long simulate stopped by Ctrl-C (after its progress bar appeared): exit 130 and a line
    saying what was written, not typer's silent 130."""
    sim = ["simulate", "--num-requests", "400000", "--rate", "100", "--out", "sim"]
    res = run_in_pty(sim, tmp_path, interrupt_when=lambda text, _: "simulating" in text)
    assert res.returncode == 130, res.text
    assert "interrupted: nothing written" in res.text
    assert not (tmp_path / "sim").exists()
