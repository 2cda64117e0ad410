"""``tidal --version``, ``tidal gpus``, ``tidal models`` and ``tidal hardware list``: every
catalog entry listed with the data behind its step times (issue 31)."""

from __future__ import annotations

from typer.testing import CliRunner

import tidal
from tidal.cli import app
from tidal.hardware.calibration import CALIBRATIONS, build_perf_model, perf_model_source
from tidal.hardware.catalog import backing
from tidal.hardware.gpus import GPUS, get_gpu
from tidal.hardware.models import MODELS, get_model


def _run(*args: str) -> str:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.output


def test_version() -> None:
    assert _run("--version").strip() == f"tidal {tidal.__version__}"


def test_gpus_and_models_list_every_catalog_entry() -> None:
    gpus, models = _run("gpus"), _run("models")
    for name in GPUS:
        assert f"\n{name} " in gpus
    for name in MODELS:
        assert f"\n{name} " in models
    both = _run("hardware", "list")
    assert all(name in both for name in [*GPUS, *MODELS])
    assert "a40" in _run("simulate", "--help")


def test_gpus_list_the_engine_tables_behind_perf_model_engine() -> None:
    from tidal.hardware.engine_data import engine_versions

    lines = {ln.split()[0]: ln for ln in _run("gpus").splitlines() if ln.strip()}
    newest = engine_versions("h100_sxm", "vllm")[-1]
    assert "--perf-model engine" in _run("gpus")
    assert "vllm" in lines["h100"]
    assert newest in lines["h100"]
    assert "sglang" in lines["h100"]
    assert "no tables" in lines["a40"]


def test_the_listed_backing_is_what_perf_model_auto_uses() -> None:
    """Every (model, GPU) the catalog calls measured or calibrated gets that model from
    ``--perf-model auto-vidur`` at TP 1 where listed; unlisted pairs get the corrected roofline
    (``auto`` reads the engine tables, listed apart, before the profiles: issue 28)."""
    by_gpu, by_model = backing()
    for g in ("h100", "a100-80gb", "l40s", "h200"):
        for m in ("llama-2-7b", "qwen3-8b", "gpt-j-6b", "llama-3.1-8b"):
            src = perf_model_source(build_perf_model("auto-vidur", get_model(m), get_gpu(g), 1))
            b = by_gpu[g]
            if (m, g, 1) in CALIBRATIONS:
                assert src.startswith("calibrated:")
                assert (1, CALIBRATIONS[(m, g, 1)].source) in b.calibrated[m]
            elif 1 in b.measured.get(m, []):
                assert src.startswith("measured") or "/" in src, src
                assert 1 in by_model[m].measured[g]
            else:
                assert src == "corrected-roofline", (m, g, src)
    assert by_gpu["l40s"].describe().startswith("corrected roofline only")
