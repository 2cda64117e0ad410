"""`tidal demo` and `tidal trace info` on the shared real traces."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tidal.cli import app
from tidal.core.errors import ConfigError
from tidal.workload.paths import traces_dir

try:
    traces_dir()
except ConfigError:  # pragma: no cover - CI without ../shared/traces
    pytest.skip("shared/traces not found", allow_module_level=True)

runner = CliRunner()


def test_demo_compares_variants_on_a_real_trace(tmp_path):
    res = runner.invoke(app, ["demo", "--out", str(tmp_path)], catch_exceptions=False)
    assert res.exit_code == 0
    rows = {d.name: json.loads((d / "summary.json").read_text()) for d in tmp_path.iterdir()}
    assert len(rows) >= 2
    for s in rows.values():
        assert s["metrics"]["num_completed"] == s["metrics"]["num_requests"] > 1000
    # The small token budget (Sarathi-style chunks) bounds inter-token stalls better than 8192.
    itl = {name: s["metrics"]["itl_p99_s"] for name, s in rows.items()}
    assert itl["sarathi-512"] < itl["vllm-v1-8192"]


def test_trace_info_prints_the_published_statistics():
    res = runner.invoke(app, ["trace", "info", "azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz"])
    assert res.exit_code == 0
    assert "19366" in res.output.replace(",", "")
