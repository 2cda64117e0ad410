"""Issue 32, commands and flags: ``--out`` checked before any work and cleared by literal name
(§11), plain-text errors (§10), bounded YAML (§9), named errors for bad configs and planner
input (§13, §14), and a recorded ``rate: inf`` that re-runs (§14)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tidal.cli import app
from tidal.core.io import clear_stale
from tidal.core.yaml_safe import expanded_nodes, safe_load_bounded
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

runner = CliRunner()
SIM = ["simulate", "--num-requests", "5", "--rate", "2"]


def _fails(argv: list[str], *needles: str) -> str:
    res = runner.invoke(app, argv)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    for n in needles:
        assert n in res.output, res.output
    return res.output


def test_clear_stale_matches_the_name_literally_never_as_a_glob(tmp_path: Path) -> None:
    other = tmp_path / ".o_run.tmp-abcd1234"
    other.mkdir()
    mine = tmp_path / ".o_*.tmp-abcd1234"
    mine.mkdir()
    clear_stale(tmp_path / "o_*")
    assert other.exists(), "another run's temporary directory was deleted"
    assert not mine.exists()


@pytest.mark.parametrize(
    ("out", "needle"),
    [(".", "names no directory"), ("x" * 250, "255-byte limit")],
)
def test_bad_out_names_are_refused_before_the_run(tmp_path, monkeypatch, out, needle):
    monkeypatch.chdir(tmp_path)
    _fails([*SIM, "--out", out], "out:", needle)


def test_a_dangling_symlink_and_an_unwritable_parent_are_refused(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "missing")
    _fails([*SIM, "--out", str(link)], "symbolic link", "dangling")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root writes anywhere
            pytest.skip("running as root")
        _fails([*SIM, "--out", str(locked / "run")], "not writable")
    finally:
        locked.chmod(0o700)


def test_sweep_out_a_file_and_calibrate_out_a_directory_are_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("workload: {num_requests: 5, rate: 2}\n")
    f = tmp_path / "file"
    f.write_text("x")
    _fails(["sweep", str(cfg), "--out", str(f)], "not a directory")
    from tidal.core.errors import ConfigError
    from tidal.core.outpath import check_out_file

    with pytest.raises(ConfigError, match="is a directory"):
        check_out_file(tmp_path)


@pytest.mark.parametrize("value", ["[/x]", "[red]hidden[/red]"])
def test_user_values_are_printed_as_given(tmp_path, value):
    out = _fails([*SIM, "--model", value], value)
    assert "MarkupError" not in out


def test_install_hints_keep_their_extra() -> None:
    from tidal.cli import _fail
    from tidal.core.errors import TidalError

    res = runner.invoke(app, ["--help"])  # a console exists
    assert res.exit_code == 0
    import io
    import sys

    buf = io.StringIO()
    old, sys.stderr = sys.stderr, buf
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011  (typer.Exit)
            _fail(TidalError("install the server with: pip install 'tidal[serve]'"))
    finally:
        sys.stderr = old
    assert "pip install 'tidal[serve]'" in buf.getvalue()


BOMB = "\n".join(
    [
        'a: &a ["x","x","x","x","x","x","x","x","x","x"]',
        *(
            f"{c}: &{c} [{','.join(['*' + p] * 10)}]"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        "workload: {num_requests: 10, rate: 1}",
    ]
)


def test_an_alias_bomb_is_refused_quickly_in_plan_and_sweep(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert len(BOMB) < 700
    t0 = time.perf_counter()
    _fails(["sweep", str(path), "--out", str(tmp_path / "s")], "alias")
    _fails(["plan", "--config", str(path), "--out", str(tmp_path / "p")], "alias")
    assert time.perf_counter() - t0 < 20


def test_expanded_size_counts_shared_and_recursive_aliases() -> None:
    import yaml

    assert expanded_nodes(yaml.compose("a: &a [1, 2]\nb: [*a, *a]")) == 1 + 2 + 3 + 1 + 2 * 3
    assert expanded_nodes(yaml.compose("&a [*a]")) > 10**6
    assert safe_load_bounded("a: &a [1]\nb: *a", "x") == {"a": [1], "b": [1]}


def test_a_directory_or_binary_config_is_a_named_error(tmp_path: Path) -> None:
    _fails(["simulate", "--config", str(tmp_path)], "is not a file")
    binary = tmp_path / "b.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    _fails(["simulate", "--config", str(binary)], "not UTF-8")


@pytest.mark.parametrize(
    ("prices", "needle"),
    [("h100=-3", "not a price"), ("h100=nan", "not a price"), ("h999=2", "unknown value 'h999'")],
)
def test_plan_prices_are_validated(tmp_path, prices, needle):
    argv = ["plan", "--num-requests", "20", "--rate", "2", "--slo-ttft-p99", "2"]
    _fails([*argv, "--prices", prices, "--out", str(tmp_path / "p")], needle)


def test_a_plan_axis_value_out_of_range_is_refused_not_dropped(tmp_path) -> None:
    argv = ["plan", "--num-requests", "20", "--rate", "2", "--slo-ttft-p99", "2"]
    _fails(
        [*argv, "--token-budget", "0,512", "--out", str(tmp_path / "p")],
        "search.scheduler.token_budget",
        "greater than or equal to 1",
    )


def test_rate_inf_is_recorded_so_that_the_config_re_runs(tmp_path: Path) -> None:
    out = tmp_path / "r"
    argv = ["simulate", "--num-requests", "6", "--rate", "inf", "--out", str(out)]
    res = runner.invoke(app, argv)
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["workload"]["rate"] == "inf"
    again = run_simulation(load_config(summary["config"])).metrics
    assert again["ttft_p50_s"] == summary["metrics"]["ttft_p50_s"]


@pytest.mark.parametrize(
    ("n", "needle"), [("0", "greater than or equal to 1"), ("2000", "--max-seqs")]
)
def test_ebplus_explain_refuses_a_concurrency_out_of_range(n, needle):
    argv = ["ebplus", "explain", "--gpu", "h200", "--model", "qwen3-8b", "--prompt-len", "512"]
    _fails([*argv, "--output-len", "256", "--concurrency", n], needle)


@pytest.mark.parametrize("name", ["summary.json", "requests.parquet"])
def test_report_on_a_truncated_file_names_it(tmp_path: Path, name: str) -> None:
    out = tmp_path / "r"
    res = runner.invoke(app, [*SIM, "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = (out / name).read_bytes()
    (out / name).write_bytes(data[: len(data) // 3])
    _fails(["report", str(out)], f"{out / name} is damaged")


def test_the_engine_checks_memory_before_it_allocates(monkeypatch) -> None:
    pytest.importorskip("torch")
    import tidal.runtime.memcheck as mc
    from tidal.core.errors import ConfigError
    from tidal.runtime.config import RuntimeConfig, build_engine

    monkeypatch.setattr(mc, "host_available_bytes", lambda: 8 * 10**9)
    with pytest.raises(ConfigError, match=r"model: llama-2-70b .* needs 2\d\d\.\d GB"):
        build_engine(RuntimeConfig(model="llama-2-70b"))
    with pytest.raises(ConfigError, match=r"kv_cache_gb: the KV cache needs 1,000,000\.0 GB"):
        build_engine(RuntimeConfig(model="tiny-llama", kv_cache_gb=1e6))
    from tidal.hardware.models import get_model
    from tidal.runtime.model import LlamaConfig

    eight_b = LlamaConfig.from_spec(get_model("llama-3.1-8b"))
    assert mc.param_count(eight_b) == pytest.approx(8.03e9, rel=0.01)
