"""A failing cell is recorded and the sweep goes on; a stopped sweep leaves no worker behind.

Before these fixes: one cell's ZeroDivisionError aborted the whole sweep and ``sweep_run.json``
said no cell failed; SIGTERM to ``tidal sweep`` left its pool's workers running (orphans);
a plan whose search space named an unknown GPU next to a known one went on silently, and a
plan without SLO targets ended in StopIteration.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tidal.cli import app
from tidal.core.errors import ConfigError
from tidal.experiments.space import load_plan_spec
from tidal.experiments.sweep import run_sweep

BASE = {
    "workload": {"num_requests": 20, "rate": 20.0, "prompt_len": 64, "output_len": 8},
}


def _boom_on_budget(budget: int) -> Any:
    import tidal.sim.run as run

    real = run.run_simulation

    def fake(cfg: Any, *a: Any, **k: Any) -> Any:
        if cfg.scheduler.token_budget == budget:
            return 1 // 0
        return real(cfg, *a, **k)

    return fake


def test_a_cell_raising_zero_division_is_recorded_and_the_sweep_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tidal.experiments.sweep.run_simulation", _boom_on_budget(1024))
    grid = {"scheduler.token_budget": [512, 1024, 2048]}
    out = run_sweep(BASE, grid, tmp_path, backend="serial")
    assert len(out.ran) == 2
    assert len(out.failed) == 1
    (cid,) = out.failed
    assert cid.startswith("token_budget=1024")
    assert out.failed[cid].startswith("ZeroDivisionError")
    assert "test_sweep_failures.py" in out.failed[cid]  # where it arose (a bug, not bad input)
    record = json.loads((tmp_path / "sweep_run.json").read_text())
    assert record["status"] == "complete"
    assert (record["cells"], record["ran"], record["num_failed"], record["not_run"]) == (3, 2, 1, 0)
    assert record["failed"] == out.failed


def test_cli_sweep_with_a_failed_cell_exits_non_zero_after_running_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tidal.experiments.sweep.run_simulation", _boom_on_budget(512))
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, "grid": {"scheduler.token_budget": [512, 2048]}}))
    res = CliRunner().invoke(
        app, ["sweep", str(path), "--out", str(tmp_path / "o"), "--backend", "serial"]
    )
    assert res.exit_code == 1
    text = " ".join(res.output.split())
    assert "1 run" in text
    assert "1 failed" in text
    assert "ZeroDivisionError" in text


def _descendants(pid: int) -> set[int]:
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for k in map(int, kids):
                if k not in out:
                    out.add(k)
                    todo.append(k)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_pool_sweep_leaves_no_worker_processes(tmp_path: Path, sig: int) -> None:
    cfg = {
        "workload": {"num_requests": 40_000, "rate": 200.0, "prompt_len": 400, "output_len": 100},
        "grid": {"scheduler.token_budget": [512, 1024, 2048, 4096]},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    code = "import sys; from tidal.cli import app; sys.argv[0] = 'tidal'; app()"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "sweep", str(path), "--out", str(out), "--workers", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    workers: set[int] = set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(workers) < 2 and proc.poll() is None:
        workers = (
            {
                p
                for p in _descendants(proc.pid)
                if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()
            }
            if Path(f"/proc/{proc.pid}").exists()
            else set()
        )
        time.sleep(0.05)
    assert len(workers) == 2, "the pool did not start"
    time.sleep(0.5)  # the workers are now inside their cells
    proc.send_signal(sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # pragma: no cover - the failure being tested
        proc.kill()
        raise
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.05)
    assert not [p for p in workers if _alive(p)], "orphan worker processes"
    assert proc.returncode != 0
    record = json.loads((out / "sweep_run.json").read_text())
    assert record["status"].startswith("interrupted")
    assert record["ran"] + record["reused"] + record["num_failed"] + record["not_run"] == 4
    assert not list(out.glob("cells/.*")), "temporary cell directories left behind"


def test_plan_with_an_unknown_gpu_in_the_search_is_a_named_error() -> None:
    spec = {
        "base": {"workload": {"num_requests": 10, "rate": 1.0}},
        "search": {"gpu": ["h100", "h999"]},
        "slo": {"ttft_p99_s": 1.0},
    }
    with pytest.raises(ConfigError, match=r"search\.gpu.*h999"):
        load_plan_spec(spec).axes()


def test_plan_without_slo_targets_is_a_named_error() -> None:
    with pytest.raises(ConfigError, match="at least one target"):
        load_plan_spec({"base": {"workload": {"num_requests": 10, "rate": 1.0}}})


def test_cli_plan_with_an_unknown_gpu_exits_2(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        [
            "plan",
            "--out",
            str(tmp_path / "p"),
            "--config",
            str(_plan_yaml(tmp_path)),
            "--gpus",
            "h100,h999",
            "--slo-ttft-p99",
            "1",
        ],
    )
    assert res.exit_code == 2
    assert "h999" in res.output


def _plan_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"base": {"workload": {"num_requests": 10, "rate": 1.0}}}))
    return path
