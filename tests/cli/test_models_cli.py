"""Hugging Face models, precision flags and table GPU ids on the command line (issue 28)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tidal.cli import app
from tidal.hardware.hf_config import shipped_configs

runner = CliRunner()
pytestmark = pytest.mark.skipif(not shipped_configs(), reason="aiconfigurator-core not installed")


def test_simulate_a_repo_id_with_fp8_kv_on_a_table_gpu_id(tmp_path) -> None:
    argv = ["simulate", "--model", "Qwen/Qwen3-30B-A3B-FP8", "--kv-cache-dtype", "fp8",
            "--gpu", "h100_sxm", "--num-requests", "40", "--rate", "5", "--prompt-len", "300",
            "--output-len", "30", "--out", str(tmp_path)]  # fmt: skip
    res = runner.invoke(app, argv)
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    # the plan worked by hand in tests/hardware/test_memory_precision.py
    assert summary["metrics"]["kv_capacity_tokens"] == 881_856
    assert summary["config"]["kv_cache_dtype"] == "fp8"


def test_bad_precision_flags_name_the_key(tmp_path) -> None:
    argv = ["simulate", "--model", "llama-3.1-8b", "--quantization", "int3", "--num-requests",
            "5", "--rate", "1", "--out", str(tmp_path)]  # fmt: skip
    res = runner.invoke(app, argv)
    assert res.exit_code != 0
    assert "quantization" in res.output
    assert "modelopt_fp4" in res.output


def test_hardware_show_takes_the_precision_flags() -> None:
    argv = ["hardware", "show", "--gpu", "h100", "--model", "openai/gpt-oss-120b",
            "--kv-cache-dtype", "fp8"]  # fmt: skip
    res = runner.invoke(app, argv)
    assert res.exit_code == 0, res.output
    assert "w4a16_mxfp4" in res.output
    assert "window KV / linear state" in res.output
