"""``tidal simulate`` on augmented workloads: the CLI contract of issue 4."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tidal.cli import app

KEYS = (
    "effective_throughput",
    "normalized_latency_p50_s",
    "normalized_latency_p99_s",
    "num_intercepts",
    "waste_preserve_gb_s",
    "waste_recompute_gb_s",
    "waste_swap_gb_s",
)


def _run(tmp_path, *args):
    out = tmp_path / "o"
    res = CliRunner().invoke(
        app,
        ["simulate", "--model", "gpt-j-6b", "--gpu", "a100-80gb", "--out", str(out), *args],
    )
    assert res.exit_code == 0, res.output
    return json.loads((out / "summary.json").read_text())


def test_serving_policies_write_the_augmented_metrics(tmp_path):
    base = ["--workload", "infercept-mix", "--rate", "2", "--num-requests", "60"]
    got = {}
    for policy in ("vllm", "infercept", "augserve"):
        s = _run(tmp_path / policy, *base, "--serving-policy", policy, "--predictor", "oracle")
        m = s["metrics"]
        for k in KEYS:
            assert k in m
        assert m["num_completed"] == 60
        assert s["config"]["augment"]["serving_policy"] == policy
        got[policy] = m
    # the same workload: the same calls, resolved differently
    assert len({m["num_intercepts"] for m in got.values()}) == 1
    assert got["vllm"]["intercepts_discarded"] == got["vllm"]["num_intercepts"]
    assert got["infercept"]["intercepts_swapped"] > 0
    # InferCept does not recompute every context: lower normalized latency than vLLM
    assert got["infercept"]["normalized_latency_p50_s"] < got["vllm"]["normalized_latency_p50_s"]


def test_user_jsonl_workload(tmp_path):
    p = tmp_path / "mine.jsonl"
    line = {
        "prompt_tokens": 200,
        "segments": [
            {"decode_tokens": 10, "call_s": 0.2, "return_tokens": 30},
            {"decode_tokens": 5},
        ],
    }
    p.write_text("\n".join(json.dumps(line) for _ in range(5)) + "\n")
    m = _run(
        tmp_path, "--workload", f"augmented:{p}", "--rate", "1", "--serving-policy", "infercept"
    )["metrics"]
    assert m["num_intercepts"] == 5
    assert m["num_completed"] == 5


def test_bad_jsonl_is_a_clear_error(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"prompt_tokens": 3, "segments": [{"decode_tokens": 0}]}\n')
    res = CliRunner().invoke(app, ["simulate", "--workload", f"augmented:{p}", "--rate", "1"])
    assert res.exit_code == 2
    assert "line 1" in res.output
    assert "segments[0].decode_tokens" in res.output


def test_same_config_and_seed_give_byte_identical_summaries(tmp_path):
    args = [
        "--workload",
        "infercept-mix",
        "--rate",
        "3",
        "--num-requests",
        "40",
        "--serving-policy",
        "augserve",
        "--token-budget",
        "1024",
    ]
    _run(tmp_path / "a", *args)
    _run(tmp_path / "b", *args)
    a = (tmp_path / "a" / "o" / "summary.json").read_bytes()
    assert a == (tmp_path / "b" / "o" / "summary.json").read_bytes()
    m = json.loads(a)["metrics"]
    assert m["token_budget_mean"] > 384  # dynamic: the static budget does not apply


def test_token_budget_flag_sets_the_static_budget(tmp_path):
    m = _run(
        tmp_path,
        "--workload",
        "infercept-mix",
        "--rate",
        "1",
        "--num-requests",
        "10",
        "--serving-policy",
        "infercept",
        "--token-budget",
        "1024",
    )["metrics"]
    assert m["token_budget_mean"] == 1024


def test_measured_deployment_runs_on_infercepts_profile_and_swap_rate(tmp_path):
    base = ["--workload", "infercept-mix", "--rate", "2", "--num-requests", "20",
            "--perf-model", "linear"]  # fmt: skip  (auto reads today's engine tables)
    m = _run(tmp_path / "a", *base, "--serving-policy", "infercept")["metrics"]
    assert m["perf_model"] == "linear"
    # half of INFERCEPT's 605.5-token swap budget per 27.78 ms iteration × 458,752 B
    assert m["swap_link_gbs"] == pytest.approx(5.0, abs=1e-3)
    assert 0 <= m["recompute_time_share"] < 1
    # an explicit link efficiency overrides the measurement: 0.8 × 32 GB/s PCIe 4.0
    cfg = tmp_path / "link.yaml"
    cfg.write_text("augment:\n  host_link_efficiency: 0.8\n")
    m = _run(
        tmp_path / "b",
        *base,
        "--serving-policy",
        "infercept",
        "--perf-model",
        "roofline",
        "--config",
        str(cfg),
    )["metrics"]
    assert m["perf_model"] == "roofline"
    assert m["swap_link_gbs"] == pytest.approx(25.6, abs=1e-3)
