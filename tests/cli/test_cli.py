"""The `tidal` command line: contract keys, determinism, and clear errors on bad input."""

from __future__ import annotations

import json

import polars as pl
import pytest
from typer.testing import CliRunner

from tidal.cli import app

runner = CliRunner()

CONTRACT_KEYS = {
    "num_requests",
    "num_completed",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p99_s",
    "request_throughput",
    "token_throughput",
    "goodput",
    "slo_attainment",
    "roofline_token_throughput",
}
SYNTH = [
    "--model",
    "qwen3-8b",
    "--gpu",
    "h100",
    "--num-requests",
    "300",
    "--rate",
    "20",
    "--arrival-cv",
    "2",
    "--prompt-len",
    "400",
    "--output-len",
    "100",
    "--length-dist",
    "uniform",
]


def run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_simulate_writes_the_contract_and_is_byte_identical(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run("simulate", *SYNTH, "--seed", "7", "--out", str(a)).exit_code == 0
    assert run("simulate", *SYNTH, "--seed", "7", "--out", str(b)).exit_code == 0
    summary = json.loads((a / "summary.json").read_text())
    assert set(summary["metrics"]) >= CONTRACT_KEYS
    assert summary["seed"] == 7
    assert summary["config"]["workload"]["num_requests"] == 300
    assert "tidal_version" in summary
    assert (a / "summary.json").read_bytes() == (b / "summary.json").read_bytes()
    assert (a / "requests.parquet").read_bytes() == (b / "requests.parquet").read_bytes()
    df = pl.read_parquet(a / "requests.parquet")
    assert df.height == 300
    assert json.loads((a / "run.json").read_text())["num_events"] > 0
    # A different seed gives a different workload.
    c = tmp_path / "c"
    assert run("simulate", *SYNTH, "--seed", "8", "--out", str(c)).exit_code == 0
    assert (a / "summary.json").read_bytes() != (c / "summary.json").read_bytes()


def test_no_fast_forward_gives_the_same_metrics(tmp_path):
    run("simulate", *SYNTH, "--out", str(tmp_path / "ff"))
    run("simulate", *SYNTH, "--no-fast-forward", "--out", str(tmp_path / "slow"))
    ff = json.loads((tmp_path / "ff" / "summary.json").read_text())["metrics"]
    slow = json.loads((tmp_path / "slow" / "summary.json").read_text())["metrics"]
    assert ff == slow


def test_yaml_config_with_flag_override(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "model: llama-3.1-8b\ngpu: h200\nscheduler: {token_budget: 1024, max_seqs: 64}\n"
        "workload: {num_requests: 50, rate: 5, prompt_len: 100, output_len: 20}\n"
    )
    out = tmp_path / "o"
    res = run("simulate", "--config", str(cfg), "--max-seqs", "32", "--out", str(out))
    assert res.exit_code == 0
    conf = json.loads((out / "summary.json").read_text())["config"]
    assert conf["gpu"] == "h200"
    assert conf["scheduler"] == conf["scheduler"] | {"token_budget": 1024, "max_seqs": 32}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpu", "h1000"], "valid: a100-80gb, a40, b200, b300, gb200, gb300, h100"),
        (["--model", "gpt-7"], "valid:"),
        (["--batching", "magic"], "batching"),
        (["--rate", "-3"], "rate"),
        (["--slo-ttft", "-1"], "slo.ttft_s"),
        (["--max-seqs", "512", "--token-budget", "256"], "token_budget"),
    ],
)
def test_bad_input_names_the_field(args, needle):
    res = runner.invoke(app, ["simulate", *SYNTH, *args])
    assert res.exit_code == 2
    assert needle in res.output


def test_model_that_does_not_fit_states_the_numbers():
    res = runner.invoke(app, ["simulate", *SYNTH, "--model", "llama-2-70b", "--gpu", "l40s"])
    assert res.exit_code == 2
    assert "does not fit" in res.output
    assert "GiB" in res.output


def test_malformed_trace_names_file_line_and_column(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,many,109\n"
    )
    res = runner.invoke(app, ["simulate", "--trace", str(bad), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert "bad.csv" in res.output
    assert "line 3" in res.output
    assert "ContextTokens" in res.output
    assert not (tmp_path / "o" / "summary.json").exists()


def test_requests_longer_than_the_context_window_are_refused_with_the_fix():
    args = [a if a != "qwen3-8b" else "llama-2-7b" for a in SYNTH]
    res = runner.invoke(app, ["simulate", *args, "--prompt-len", "5000"])
    assert res.exit_code == 2
    assert "context of 4096" in res.output
    assert "--max-prompt-len" in res.output
    ok = runner.invoke(app, ["simulate", *args, "--prompt-len", "5000", "--max-prompt-len", "3000"])
    assert ok.exit_code == 0


def test_branch_policy_flag(tmp_path):
    args = ["--num-requests", "3", "--rate", "1", "--output-len", "30000", "--n", "4"]
    probe = ["--branch-policy", "parallel-probe"]
    assert (
        run("simulate", *args, *probe, "--seed", "3", "--out", str(tmp_path / "p")).exit_code == 0
    )
    assert run("simulate", *args, "--seed", "3", "--out", str(tmp_path / "a")).exit_code == 0
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert summary["config"]["workload"]["branch_policy"] == "parallel-probe"
    p = pl.read_parquet(tmp_path / "p" / "requests.parquet")["output_len"].to_numpy()
    a = pl.read_parquet(tmp_path / "a" / "requests.parquet")["output_len"].to_numpy()
    assert len(p) == len(a) == 12
    assert (p <= a).all()
    assert p.sum() < a.sum()  # 30k-token branches: the consensus stop (T = 40 probes of 500) fires


def test_host_cache_flag(tmp_path):
    """--host-cache-gib sets memory.host_cache_gib; with a GPU cache too small for the
    shared prompts, some hits then come from host memory (reported in the summary)."""
    args = ["--num-requests", "80", "--rate", "40", "--prompt-len", "64", "--output-len", "16"]
    args += ["--shared-prefix-groups", "16", "--shared-prefix-len", "1024", "--seed", "1"]
    yaml_cfg = tmp_path / "c.yaml"
    yaml_cfg.write_text("memory:\n  num_blocks: 400\n")
    out = tmp_path / "h"
    res = run(
        "simulate", "--config", str(yaml_cfg), *args, "--host-cache-gib", "1", "--out", str(out)
    )
    assert res.exit_code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["memory"]["host_cache_gib"] == 1.0
    assert summary["metrics"]["prefix_cache_host_hits"] > 0


@pytest.mark.parametrize("host", ["vllm-v1", "vidur"])
def test_perf_host_flag_reaches_the_config(tmp_path, host):
    out = tmp_path / host
    args = ["--num-requests", "4", "--rate", "2", "--perf-model", "corrected-roofline"]
    assert run("simulate", *args, "--perf-host", host, "--out", str(out)).exit_code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["perf_host"] == host
    bad = run("simulate", *args, "--perf-host", "sglang", "--out", str(tmp_path / "bad"))
    assert bad.exit_code != 0
    assert "perf_host" in bad.output
