"""CLI contract of issue 3: ``tidal simulate --batching {mb,eb,ebplus} [--concurrency C]`` and
``tidal ebplus explain``."""

from __future__ import annotations

import json

import polars as pl
import pytest
from typer.testing import CliRunner

from tidal.cli import app

runner = CliRunner()

RUN = [
    "--model",
    "qwen3-8b",
    "--gpu",
    "rtx-pro-6000",
    "--num-requests",
    "800",
    "--concurrency",
    "512",
    "--prompt-len",
    "512",
    "--output-len",
    "256",
    "--length-dist",
    "uniform",
    "--token-budget",
    "8192",
    "--max-seqs",
    "512",
    "--warmup",
    "100",
]


def run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.mark.parametrize("batching", ["eb", "ebplus"])
def test_simulate_with_exclusive_batching_writes_the_new_metrics(tmp_path, batching):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run("simulate", *RUN, "--batching", batching, "--out", str(a)).exit_code == 0
    assert run("simulate", *RUN, "--batching", batching, "--out", str(b)).exit_code == 0
    summary = json.loads((a / "summary.json").read_text())
    m = summary["metrics"]
    assert {"mode_switches", "eb_time_share"} <= set(m)
    assert 0.0 <= m["eb_time_share"] <= 1.0
    assert m["warmup_requests"] == 100
    assert m["num_completed"] == 800
    assert (a / "summary.json").read_bytes() == (b / "summary.json").read_bytes()
    assert pl.read_parquet(a / "eb.parquet").height > 0
    if batching == "ebplus":
        series = pl.read_parquet(a / "ebplus.parquet")
        assert {"time_ns", "mode", "theta", "k_hat", "n_hat", "signal"} <= set(series.columns)
        png = (a / "ebplus_mode.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_eb_option_names_the_field(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("scheduler:\n  batching: eb\n  eb:\n    theta_floor: 0.9\n    theta_max: 0.5\n")
    res = runner.invoke(app, ["simulate", "--config", str(cfg), *RUN])
    assert res.exit_code == 2
    assert "scheduler.eb" in res.output
    assert "theta_floor" in res.output


def _explain(*args: str) -> dict:
    res = run("ebplus", "explain", "--model", "qwen3-8b", *args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_explain_picks_mb_at_low_and_eb_at_high_concurrency():
    """On the paper's testbed constants (``--perf-model linear``: its eager-mode calibration;
    ``auto`` reads today's engine tables and agrees on both winners)."""
    low = _explain(
        "--gpu", "h200", "--prompt-len", "512", "--output-len", "256", "--concurrency", "32",
        "--perf-model", "linear",
    )
    assert low["winner"] == "mb"
    assert low["paper"]["winner"] == "mb"
    # ebplus.md §2.6: LHS 1.2e-5 vs RHS 8.3e-5 with the paper's fit
    assert low["paper"]["lhs"] == pytest.approx(1.2e-5, rel=0.03)
    assert low["paper"]["rhs"] == pytest.approx(8.3e-5, rel=0.03)
    high = _explain(
        "--gpu",
        "rtx-pro-6000",
        "--prompt-len",
        "512",
        "--output-len",
        "256",
        "--concurrency",
        "256",
        "--perf-model",
        "linear",
    )
    assert high["winner"] == "eb"
    assert high["margin"] > 0
    # the abstract's "≈20 %" on RTX PRO 6000, from the paper's fit
    assert high["paper"]["threshold_decode_share"] == pytest.approx(0.205, abs=0.003)
    assert 0 < high["threshold_decode_share"] < 1
    for gpu, c, winner in (("h200", "32", "mb"), ("rtx-pro-6000", "256", "eb")):
        today = _explain("--gpu", gpu, "--prompt-len", "512", "--output-len", "256",
                         "--concurrency", c)  # fmt: skip
        assert today["winner"] == winner


def test_explain_defaults_n_to_the_memory_safe_batch_and_prints_a_verdict():
    res = run(
        "ebplus",
        "explain",
        "--gpu",
        "l40s",
        "--model",
        "llama-3.1-8b",
        "--prompt-len",
        "512",
        "--output-len",
        "512",
    )
    assert res.exit_code == 0
    assert "wins by" in res.output
    assert "memory-safe" in res.output
    bad = runner.invoke(
        app,
        [
            "ebplus",
            "explain",
            "--gpu",
            "h201",
            "--model",
            "qwen3-8b",
            "--prompt-len",
            "1",
            "--output-len",
            "1",
        ],
    )
    assert bad.exit_code == 2
    assert "gpu" in bad.output


def test_explain_perf_host_flag_reaches_the_step_model():
    """``--perf-host vidur`` charges Vidur's older host time per step: every step cost rises."""
    args = ["ebplus", "explain", "--gpu", "h100", "--model", "llama-3.1-8b", "--json"]
    args += ["--prompt-len", "512", "--output-len", "128", "--perf-model", "corrected-roofline"]
    costs = {}
    for host in ("vllm-v1", "vidur"):
        res = runner.invoke(app, [*args, "--perf-host", host])
        assert res.exit_code == 0, res.output
        costs[host] = json.loads(res.output)["costs"]
    assert costs["vidur"] != costs["vllm-v1"]
    bad = runner.invoke(app, [*args, "--perf-host", "sglang"])
    assert bad.exit_code != 0
    assert "perf-host" in bad.output
