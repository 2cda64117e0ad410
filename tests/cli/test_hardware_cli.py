"""``tidal hardware show`` and ``perf_model_source`` in summary.json (issue 13)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tidal.cli import app
from tidal.cli.hardware import shape_ms
from tidal.hardware.calibration import build_perf_model
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model

runner = CliRunner()
SYNTH = ["--num-requests", "80", "--rate", "10", "--prompt-len", "300", "--output-len", "40",
         "--length-dist", "uniform"]  # fmt: skip


def test_summary_records_which_step_model_ran(tmp_path) -> None:
    for gpu, model, tp, kind, want in (
        ("h200", "llama-3.1-8b", "1", "auto", "engine:vllm-0.24.0/h200_sxm/llama-3.1-8b/tp1"),
        ("a40", "llama-2-7b", "1", "auto", "measured:vidur/a40/llama-2-7b/tp1"),
        ("a40", "llama-3.1-8b", "1", "auto", "corrected-roofline"),
        ("a100-80gb", "llama-2-70b", "4", "auto-vidur", "measured:vidur/a100-80gb/llama-2-70b/tp4"),
        ("h200", "llama-3.1-8b", "1", "auto-vidur", "corrected-roofline"),
    ):
        out = tmp_path / f"{gpu}-{model}-{kind}"
        res = runner.invoke(app, ["simulate", *SYNTH, "--gpu", gpu, "--model", model, "--tp", tp,
                                  "--perf-model", kind, "--out", str(out)])  # fmt: skip
        assert res.exit_code == 0, res.output
        metrics = json.loads((out / "summary.json").read_text())["metrics"]
        assert metrics["perf_model_source"] == want
    out = tmp_path / "old"
    res = runner.invoke(app, ["simulate", *SYNTH, "--gpu", "a100-80gb", "--model", "llama-2-7b",
                              "--perf-model", "roofline", "--out", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads((out / "summary.json").read_text())["metrics"]["perf_model_source"] == (
        "roofline")  # fmt: skip


def test_hardware_show_prints_each_model_side_by_side_and_the_kv_plan() -> None:
    res = runner.invoke(app, ["hardware", "show", "--gpu", "h100", "--model", "llama-2-7b",
                              "--tp", "2"], terminal_width=200)  # fmt: skip
    assert res.exit_code == 0, res.output
    for needle in ("roofline", "corrected-roofline", "measured", "decode b=128",
                   "measured:vidur/h100/llama-2-7b/tp2", "kv_capacity_tokens"):  # fmt: skip
        assert needle in res.output
    m, g = get_model("llama-2-7b"), get_gpu("h100")
    want = f"{shape_ms(build_perf_model('measured', m, g, 2), 128, 0):.3f}"
    assert want in res.output
    res = runner.invoke(app, ["hardware", "show", "--gpu", "h200", "--model", "llama-3.1-8b"],
                        terminal_width=200)  # fmt: skip
    assert res.exit_code == 0
    assert "corrected-roofline" in res.output
    assert "measured " not in res.output.split("--perf-model")[0]
    res = runner.invoke(app, ["hardware", "show", "--gpu", "h100", "--model", "nope"])
    assert res.exit_code == 2
    assert "model" in res.output
