"""Sweeps: the same results whichever executor ran them; resumable after a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import polars as pl
import pytest
import yaml
from typer.testing import CliRunner

from tidal.cli import app
from tidal.core.errors import ConfigError
from tidal.experiments.executors import run_cells
from tidal.experiments.grid import parse_grid
from tidal.experiments.sweep import CELLS_DIR, run_sweep

BASE = {
    "model": "llama-3.1-8b",
    "gpu": "h100",
    "workload": {
        "num_requests": 300,
        "rate": 20,
        "prompt_len": 400,
        "output_len": 100,
        "length_dist": "uniform",
    },
    "slo": {"ttft_s": 0.5, "tpot_s": 0.05},
}
GRID = {"workload.rate": [10, 40], "scheduler.token_budget": [512, 4096]}


def _cell_files(out):
    """{cell/file: bytes} for every file of every cell."""
    files = {}
    for d in sorted((out / CELLS_DIR).iterdir()):
        for f in sorted(d.iterdir()):
            if f.name != "run.json":  # wall-clock times
                files[f"{d.name}/{f.name}"] = f.read_bytes()
    return files


def _stats(out, ids):
    return {
        cid: (os.stat(p).st_ino, os.stat(p).st_mtime_ns)
        for cid in ids
        for p in [out / CELLS_DIR / cid / "summary.json"]
    }


def test_process_pool_and_serial_runs_give_identical_results(tmp_path):
    serial = run_sweep(BASE, GRID, tmp_path / "serial", backend="serial")
    pool = run_sweep(BASE, GRID, tmp_path / "pool", backend="process", workers=2)
    assert len(serial.ran) == len(pool.ran) == 4
    a = (tmp_path / "serial" / "results.parquet").read_bytes()
    b = (tmp_path / "pool" / "results.parquet").read_bytes()
    assert a == b
    assert _cell_files(tmp_path / "serial") == _cell_files(tmp_path / "pool")
    df = pl.read_parquet(tmp_path / "serial" / "results.parquet")
    assert df.height == 4
    assert df["workload.rate"].to_list() == [10, 10, 40, 40]
    assert df["scheduler.token_budget"].to_list() == [512, 4096, 512, 4096]
    assert (df["num_completed"] == 300).all()
    # a cell's row holds its own run's metrics
    cid = df["cell_id"][3]
    summary = json.loads((tmp_path / "serial" / CELLS_DIR / cid / "summary.json").read_text())
    assert df["ttft_p99_s"][3] == summary["metrics"]["ttft_p99_s"]
    assert summary["config"]["scheduler"]["token_budget"] == 4096
    # workload seeds: cells at the same rate replay the same sample, different rates do not
    seeds = df["seed"].to_list()
    assert seeds[0] == seeds[1] != seeds[2] == seeds[3]
    # the higher rate queues more
    assert df["ttft_p99_s"][2] > df["ttft_p99_s"][0]


def test_an_interrupted_pool_sweep_resumes_without_redoing_finished_cells(tmp_path):
    grid = {"workload.rate": [10, 20, 40], "scheduler.token_budget": [512, 4096]}
    seen = []

    def stop_after_two(cell, output):
        seen.append(cell.cell_id)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(BASE, grid, tmp_path, backend="process", workers=2, on_cell_done=stop_after_two)
    done = sorted(p.name for p in (tmp_path / CELLS_DIR).iterdir())
    assert done == sorted(seen)  # finished cells are on disk, nothing half-written
    partial = pl.read_parquet(tmp_path / "results.parquet")
    assert sorted(partial["cell_id"].to_list()) == done
    before = _stats(tmp_path, done)
    again = run_sweep(BASE, grid, tmp_path, backend="process", workers=2)
    assert sorted(again.reused) == done
    assert len(again.ran) == 4
    assert not set(again.ran) & set(done)
    assert _stats(tmp_path, done) == before
    assert pl.read_parquet(tmp_path / "results.parquet").height == 6
    # a full re-run runs nothing
    third = run_sweep(BASE, grid, tmp_path, backend="serial")
    assert third.ran == []
    assert len(third.reused) == 6


def test_a_killed_sweep_process_resumes(tmp_path):
    cfg = dict(
        BASE,
        workload=dict(BASE["workload"], num_requests=3000),
        grid={
            "workload.rate": [10, 20, 30, 40],
            "scheduler.token_budget": [512, 1024, 4096],
        },
    )
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    code = "import sys; from tidal.cli import app; sys.argv[0] = 'tidal'; app()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "sweep", str(path), "--out", str(out), "--workers", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    cells_dir = out / CELLS_DIR
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if (
                cells_dir.is_dir()
                and sum(not p.name.startswith(".") for p in cells_dir.iterdir()) >= 2
            ):
                break
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = sorted(p.name for p in cells_dir.iterdir() if not p.name.startswith("."))
    assert 2 <= len(done) < 12, "the sweep was not killed midway"
    before = _stats(out, done)
    base, grid = dict(cfg), parse_grid([], cfg["grid"])
    base.pop("grid")
    again = run_sweep(base, grid, out, backend="serial")
    assert sorted(again.reused) == done
    assert len(again.ran) == 12 - len(done)
    assert _stats(out, done) == before
    assert not [p for p in cells_dir.iterdir() if p.name.startswith(".")]


def test_a_cell_whose_config_changed_is_recomputed(tmp_path):
    grid = {"workload.rate": [10]}
    run_sweep(BASE, grid, tmp_path, backend="serial")
    changed = dict(BASE, slo={"ttft_s": 0.1, "tpot_s": 0.05})
    again = run_sweep(changed, grid, tmp_path, backend="serial")
    assert len(again.ran) == 1
    assert again.reused == []
    summary = json.loads(
        next((tmp_path / CELLS_DIR).iterdir()).joinpath("summary.json").read_text()
    )
    assert summary["config"]["slo"]["ttft_s"] == 0.1


def test_bad_cells_fail_before_running_and_runtime_failures_are_reported(tmp_path):
    with pytest.raises(ConfigError, match=r"grid cell token_budget=8-\w+: scheduler: token_budget"):
        run_sweep(BASE, {"scheduler.token_budget": [8, 512]}, tmp_path, backend="serial")
    # llama-3.1-70b does not fit one L40S: the cell fails at run time, the other succeeds
    out = run_sweep(
        dict(BASE, model="llama-3.1-70b"),
        {"gpu": ["h200", "l40s"], "tp": [2]},
        tmp_path / "f",
        backend="serial",
    )
    assert len(out.ran) == 1
    assert len(out.failed) == 1
    (failed,) = out.failed
    assert failed.startswith("gpu=l40s")
    assert "does not fit" in out.failed[failed]
    assert pl.read_parquet(tmp_path / "f" / "results.parquet")["gpu"].to_list() == ["h200"]


def test_ray_backend_without_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r"tidal\[ray\]"):
        list(run_cells(abs, [1, -2], backend="ray"))
    with pytest.raises(ConfigError, match="backend"):
        list(run_cells(abs, [1], backend="dask"))


def test_cli_sweep_writes_one_row_per_cell_and_reuses_on_rerun(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(dict(BASE, grid={"workload.rate": [10, 40]})))
    args = ["sweep", str(path), "--grid", "gpu=h100,h200", "--out", str(tmp_path / "o")]
    res = CliRunner().invoke(app, [*args, "--workers", "1"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    df = pl.read_parquet(tmp_path / "o" / "results.parquet")
    assert df.select("workload.rate", "gpu").rows() == [
        (10, "h100"),
        (10, "h200"),
        (40, "h100"),
        (40, "h200"),
    ]
    # H200's higher bandwidth serves the same sample faster
    assert df["tpot_p50_s"][1] < df["tpot_p50_s"][0]
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert "0 run, 4 reused" in res.output
    bad = CliRunner().invoke(app, [*args, "--grid", "scheduler.batching=nope"])
    assert bad.exit_code == 2
    assert "valid: " in bad.output
    assert "mb" in bad.output.split("valid: ")[1]


@pytest.mark.slow
def test_ray_backend_gives_the_serial_results(tmp_path):
    ray = pytest.importorskip("ray")
    try:
        serial = run_sweep(BASE, GRID, tmp_path / "serial", backend="serial")
        remote = run_sweep(BASE, GRID, tmp_path / "ray", backend="ray", workers=2)
    finally:
        ray.shutdown()
    assert sorted(remote.ran) == sorted(serial.ran)
    a = (tmp_path / "serial" / "results.parquet").read_bytes()
    assert a == (tmp_path / "ray" / "results.parquet").read_bytes()
    assert _cell_files(tmp_path / "serial") == _cell_files(tmp_path / "ray")
