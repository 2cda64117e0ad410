"""The cluster CLI contract: flags, per_model in summary.json, new metrics."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.conftest import needs_traces
from tidal.cli import app

pytestmark = needs_traces


def test_simulate_cluster_writes_per_model_summary(tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(
        app,
        [
            "simulate",
            "--cluster",
            "1x4:h100",
            "--models",
            "llama-2-7b,llama-2-7b,llama-2-13b",
            "--placement",
            "warmserve",
            "--trace",
            "azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz",
            "--alpha",
            "1",
            "--rate",
            "1",
            "--warmserve-disable",
            "placement",
            "--warmserve-disable",
            "kv-reservation,memory-switching",
            "--no-plot",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert set(s["per_model"]) == {"llama-2-7b#0", "llama-2-7b#1", "llama-2-13b"}
    for key in ("cold_starts", "prewarm_hit_rate", "gpu_seconds"):
        assert key in s["metrics"]
    for pm in s["per_model"].values():
        assert set(s["metrics"]) - set(pm) <= {
            "replicas_loaded",
            "replicas_evicted",
            "loads_cancelled",
            "peak_pages_used",
            "pages_per_gpu",
            "num_engines",
            "num_steps",
        }
    assert s["config"]["cluster"]["warmserve"]["disable"] == [
        "placement",
        "kv-reservation",
        "memory-switching",
    ]
    assert s["config"]["cluster"]["mix"]["rate"] == 1.0


def test_unknown_feature_is_a_clear_error(tmp_path):
    res = CliRunner().invoke(
        app,
        [
            "simulate",
            "--cluster",
            "1x4:h100",
            "--models",
            "llama-2-7b",
            "--trace",
            "azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz",
            "--warmserve-disable",
            "magic",
        ],
    )
    assert res.exit_code == 2
    assert "warmserve.disable" in res.output
    assert "kv-reservation" in res.output
