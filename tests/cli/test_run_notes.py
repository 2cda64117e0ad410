"""What ``tidal simulate`` says under its table (issue 31): an overload warning when the
offered rate exceeds what the deployment serves, a note when a CPU profile meets a GPU's
roofline, a note when latencies are below the table's precision, and the prefix-cache hit
rate when caching is on."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.hardware.test_profiled import COEF
from tidal.cli import app
from tidal.hardware.profiled import ProfiledPerfModel

LIGHT = ["simulate", "--num-requests", "300", "--rate", "5", "--prompt-len", "256",
         "--output-len", "32"]  # fmt: skip


def _simulate(*extra: str) -> str:
    res = CliRunner().invoke(app, [*LIGHT, *extra])
    assert res.exit_code == 0, res.output
    return res.output


def test_overload_is_flagged_only_when_the_queue_grows() -> None:
    assert "overloaded" not in _simulate()
    heavy = _simulate("--rate", "400", "--prompt-len", "2048", "--output-len", "256")
    assert "overloaded: the workload offers" in heavy
    # closed loop (no --rate: a rate beside --concurrency is refused): saturation by design
    closed = ["simulate", "--num-requests", "300", "--concurrency", "256", "--prompt-len",
              "256", "--output-len", "32"]  # fmt: skip
    res = CliRunner().invoke(app, closed)
    assert res.exit_code == 0, res.output
    assert "overloaded" not in res.output


def test_a_profile_run_says_which_machine_each_number_describes(tmp_path) -> None:
    path = tmp_path / "cpu.json"
    info = {"device": "cpu", "cpu": "Some CPU 9000"}
    path.write_text(json.dumps(ProfiledPerfModel(COEF, info=info).to_json()))
    out = _simulate("--model", "tiny-llama", "--perf-model", f"profile:{path}")
    assert "measured on cpu (Some CPU 9000)" in out
    assert "roofline of --gpu h100" in out
    assert "measured on" not in _simulate()


def test_sub_millisecond_latencies_get_a_note() -> None:
    out = _simulate("--model", "tiny-llama", "--prompt-len", "32", "--output-len", "4")
    assert "below the table's 1 ms precision" in out
    assert "tiny-llama is the real engine's" in out
    assert "precision" not in _simulate()


def test_prefix_cache_hit_rate_is_printed_when_caching_is_on() -> None:
    shared = ("--shared-prefix-groups", "4", "--shared-prefix-len", "512")
    assert "prefix cache hit rate" in _simulate(*shared)
    assert "prefix cache hit rate" not in _simulate(*shared, "--no-prefix-caching")
    assert "prefix cache hit rate" not in _simulate()  # nothing to cache
