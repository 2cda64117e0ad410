"""``tidal calibrate`` and ``tidal fidelity`` end to end on a tiny grid and workload."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from typer.testing import CliRunner

from tidal.cli import app
from tidal.hardware.profiled import ProfiledPerfModel

pytestmark = pytest.mark.engine


def test_calibrate_then_fidelity(tmp_path):
    runner = CliRunner()
    prof = tmp_path / "cpu.json"
    res = runner.invoke(
        app,
        [
            "calibrate",
            "--out",
            str(prof),
            "--repeats",
            "1",
            "--max-batch",
            "2",
            "--max-ctx",
            "16",
            "--max-prompt",
            "32",
            "--no-serving",
        ],
    )
    assert res.exit_code == 0, res.output
    model = ProfiledPerfModel.load(prof)
    assert model.info["model"] == "tiny-llama"
    assert model.info["clock"] == "cpu"  # the default, auto, on a CPU device
    noise = model.info["noise"]
    assert noise["repeat_spread"] is None  # one pass: nothing to compare
    assert noise["probe_drift"] == pytest.approx(
        model.info["probe_after_s"] / model.info["probe_before_s"] - 1
    )
    assert isinstance(noise["warnings"], list)
    assert model.step_seconds(4, 400, 0, 0, 0, 0) > model.step_seconds(1, 100, 0, 0, 0, 0) > 0
    out = tmp_path / "fid"
    res = runner.invoke(
        app,
        [
            "fidelity",
            "--profile",
            str(prof),
            "--out",
            str(out),
            "--num-requests",
            "12",
            "--rate",
            "40",
            "--arrival-cv",
            "3",
            "--prompt-len",
            "16",
            "--output-len",
            "6",
            "--num-kv-blocks",
            "128",
            "--repeats",
            "1",
            "--warmup-requests",
            "3",
            "--recalibrate",
            "4",
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads((out / "fidelity.json").read_text())
    # headline errors: the profile rescaled by held-out replays around the run
    (ratio,) = data["recalibrated"]["speed_ratio"]
    rep = data["per_repeat"][0]
    assert ratio == pytest.approx((rep["speed_before"] + rep["speed_after"]) / 2)
    assert 0.2 < ratio < 5
    scaled = ProfiledPerfModel.load(out / "profile_recalibrated_0.json")
    assert scaled.coef["tokens"] == pytest.approx(model.coef["tokens"] * ratio)
    assert data["raw_profile"]["ttft_median_rel_error"] >= 0
    assert data["recalibrate"] == 4
    assert data["warmup_requests"] == 3
    assert data["clock"] == "cpu"
    assert data["noise"]["cpus"] >= 1
    assert isinstance(data["noise"]["warnings"], list)
    for m in ("ttft", "tpot", "e2e"):
        for s in ("median", "p90"):
            assert data[f"{m}_{s}_rel_error"] >= 0
        assert data[f"{m}_median_rel_error"] <= data[f"{m}_p90_rel_error"]
    assert data["real_metrics"][0]["num_completed"] == 12
    assert data["sim_metrics"]["num_completed"] == 12
    share = data["scheduler_overhead"][0]["scheduler_share_of_step"]
    assert 0 < share < 1
    assert (out / "real_requests.parquet").exists()
    assert (out / "sim_requests.parquet").exists()


def test_calibrate_serving_flags_are_checked(tmp_path):
    res = CliRunner().invoke(
        app,
        ["calibrate", "--out", str(tmp_path / "p.json"), "--serving-concurrency", "two"],
    )
    assert res.exit_code == 2
    assert "serving-concurrency" in res.output


def test_fidelity_refuses_a_profile_of_another_model(tmp_path):
    prof = tmp_path / "p.json"
    coef = dict.fromkeys(("const", "tokens", "decodes", "prefill_chunks", "prefill_attn"), 0.001)
    coef.update({"prefill_ctx": 0.0, "hinge_32": 0.0, "hinge_256": 0.0, "decode_ctx": 0.0})
    prof.write_text(json.dumps(ProfiledPerfModel(coef, info={"model": "llama-3.1-8b"}).to_json()))
    res = CliRunner().invoke(
        app,
        ["fidelity", "--profile", str(prof), "--out", str(tmp_path / "o"), "--num-requests", "2"],
    )
    assert res.exit_code == 2
    assert "measured for llama-3.1-8b" in res.output


def test_noise_hint_says_what_to_do_when_the_machine_drifted():
    from tidal.cli.fidelity_report import ROBUST, noise_hint

    base = {"speed_probe": {"calibration_s": 1.0, "runs_s": [[1.2, 1.3]]}, "clock": "wall"}
    hint = noise_hint({**base, "recalibrate": 0})
    assert "25% slower" in hint
    assert ROBUST in hint
    assert noise_hint({**base, "clock": "cpu", "recalibrate": 40}) is None  # already robust
    steady = {"speed_probe": {"calibration_s": 1.0, "runs_s": [[1.02, 0.99]]}, "clock": "wall"}
    assert noise_hint(steady) is None
    assert noise_hint({"speed_probe": {"calibration_s": None, "runs_s": []}}) is None


def test_fidelity_defaults_are_the_robust_protocol(tmp_path, monkeypatch):
    """Without flags: CPU clock on a CPU device, 3 real runs, 40 warm-up requests and
    held-out recalibration with 40 requests (BENCHMARKS, issue 6's final protocol)."""
    import tidal.cli.fidelity as cli_fidelity

    seen = {}

    def fake(profile, out, **kw):
        seen.update(kw)
        raise cli_fidelity.TidalError("stop here")

    monkeypatch.setattr(cli_fidelity, "run_fidelity", fake)
    prof = tmp_path / "p.json"
    res = CliRunner().invoke(app, ["fidelity", "--profile", str(prof), "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "stop here" in res.output
    assert (seen["clock"], seen["repeats"]) == ("auto", 3)
    assert (seen["warmup_requests"], seen["recalibrate"]) == (40, 40)


def test_fidelity_warns_when_the_machine_is_noisy():
    from tidal.cli.fidelity_report import noise_warning

    assert noise_warning({"noise": {"warnings": []}}) is None
    assert noise_warning({}) is None
    text = noise_warning({"noise": {"warnings": ["two real runs differed"]}})
    assert "two real runs differed" in text
    assert "--repeats" in text
