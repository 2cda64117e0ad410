"""Replaying a measured run in the simulator (``simulate --trace DIR/requests.parquet``) and
comparing the two request by request (``fidelity --measured DIR``), end to end on ``tidal
serve``."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from tidal.core.errors import ConfigError
from tidal.workload.measured import load_measured, measured_columns
from tidal.workload.traces import detect_format


def _write(path, **cols):
    pl.DataFrame(cols).write_parquet(path)


def test_measured_parquet_replays_completed_requests_in_arrival_order(tmp_path):
    p = tmp_path / "requests.parquet"
    # row 1 failed (HTTP 429); rows 2 and 0 were sent in that order; row 3 stopped early
    _write(
        p,
        request_id=[0, 1, 2, 3],
        arrival_ns=[5_000, 1_000, 2_000, 9_000],
        prompt_len=[10, 11, 12, 13],
        output_len=[8, 8, 8, 8],
        first_scheduled_ns=[-1, -1, -1, -1],
        first_token_ns=[6_000, -1, 3_000, 9_500],
        finish_ns=[7_000, -1, 4_000, 9_900],
        output_tokens=[8, 0, 8, 3],
        num_preemptions=[0, 0, 0, 0],
        success=[True, False, True, True],
    )
    assert detect_format(p) == "measured"
    rs = load_measured(p)
    assert rs.extra["source_row"].tolist() == [2, 0, 3]
    assert rs.arrival_ns.tolist() == [0, 3_000, 7_000]  # from the first kept send
    assert rs.prompt_len.tolist() == [12, 10, 13]
    assert rs.output_len.tolist() == [8, 8, 3]  # what was produced, not max_tokens
    cols = measured_columns(p)
    assert cols["first_token_ns"].tolist() == [1_000, 4_000, 7_500]
    assert cols["finish_ns"].tolist() == [2_000, 5_000, 7_900]


def test_measured_parquet_without_the_columns_names_them(tmp_path):
    p = tmp_path / "x.parquet"
    _write(p, arrival_ns=[0], prompt_len=[3])
    with pytest.raises(ConfigError, match="finish_ns, output_tokens"):
        load_measured(p)


@pytest.mark.engine
def test_bench_then_replay_then_fidelity_on_tidal_serve(tmp_path):
    pytest.importorskip("httpx2")
    from typer.testing import CliRunner

    from tests.api.conftest import start_server, stop_server
    from tests.measure.test_bench_serve import warm
    from tidal.cli import app
    from tidal.cli.bench import run_bench
    from tidal.measure.dataset import build_requests
    from tidal.measure.runner import BenchSettings

    measured = tmp_path / "measured"
    live, thread = start_server(num_kv_blocks=512, max_seqs=16, token_budget=256)
    try:
        warm(live.url)
        reqs = build_requests(
            "random", 30, 1, dataset_path=None, input_len=40, output_len=10, range_ratio=0.5,
            sharegpt_output_len=None, chat=False,
        )  # fmt: skip
        s = BenchSettings(live.url, "/v1/completions", "tiny-llama", 15.0, 1.0, 8, 1, True)
        run_bench(s, reqs, {}, measured, progress=False)
    finally:
        stop_server(live, thread)
    runner = CliRunner()
    prof = tmp_path / "cpu.json"
    res = runner.invoke(
        app,
        ["calibrate", "--out", str(prof), "--repeats", "1", "--max-batch", "4", "--max-ctx",
         "64", "--max-prompt", "64", "--no-serving"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    # replay: the simulator sees the measured sends and lengths
    sim_dir = tmp_path / "sim"
    res = runner.invoke(
        app,
        ["simulate", "--trace", str(measured / "requests.parquet"), "--model", "tiny-llama",
         "--perf-model", f"profile:{prof}", "--max-num-seqs", "16",
         "--max-num-batched-tokens", "256", "--out", str(sim_dir)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    real = pl.read_parquet(measured / "requests.parquet")
    sim = pl.read_parquet(sim_dir / "requests.parquet")
    done = real.filter(pl.col("success"))
    assert len(sim) == len(done) == 30
    order = np.argsort(done["arrival_ns"].to_numpy(), kind="stable")
    sent = done["arrival_ns"].to_numpy()[order]
    assert sim["arrival_ns"].to_list() == (sent - sent[0]).tolist()
    assert sim["output_tokens"].to_list() == done["output_tokens"].to_numpy()[order].tolist()
    # compare, request by request
    fid = tmp_path / "fid"
    res = runner.invoke(
        app,
        ["fidelity", "--measured", str(measured), "--model", "tiny-llama", "--profile",
         str(prof), "--max-seqs", "16", "--token-budget", "256", "--out", str(fid)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "simulator vs measured run" in res.output
    data = json.loads((fid / "fidelity.json").read_text())
    assert data["e2e_num_requests"] == 30
    sim_fid = pl.read_parquet(fid / "sim_requests.parquet")
    x = (done["finish_ns"] - done["arrival_ns"]).to_numpy()[order]
    y = (sim_fid["finish_ns"] - sim_fid["arrival_ns"]).to_numpy()
    assert data["e2e_median_rel_error"] == pytest.approx(float(np.median(np.abs((y - x) / x))))
    assert data["real_metrics"][0]["num_completed"] == 30
    # the same measured run against a GPU profile of the catalog
    res = runner.invoke(
        app,
        ["fidelity", "--measured", str(measured / "requests.parquet"), "--model", "tiny-llama",
         "--gpu", "h100", "--out", str(tmp_path / "fid_gpu")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    gpu = json.loads((tmp_path / "fid_gpu" / "fidelity.json").read_text())
    assert gpu["sim_config"]["gpu"] == "h100"
    assert gpu["sim_metrics"]["e2e_p50_s"] < data["sim_metrics"]["e2e_p50_s"]  # H100 ≫ 1 CPU core
