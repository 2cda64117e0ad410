"""`tidal report` on a tiny run, a tiny sweep and a set of runs; figures only where data is."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from tidal.cli import app
from tidal.core.errors import ConfigError
from tidal.core.io import write_parquet
from tidal.experiments.results import write_run
from tidal.experiments.sweep import run_sweep
from tidal.report.collect import collect
from tidal.report.describe import describe, differences
from tidal.report.render import render_report
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

PNG = b"\x89PNG\r\n\x1a\n"
BASE = {
    "model": "qwen3-8b",
    "gpu": "h100",
    "workload": {"num_requests": 200, "rate": 30, "prompt_len": 300, "output_len": 60},
    "slo": {"ttft_s": 0.5, "tpot_s": 0.05},
}


def _write(cfg_dict, out):
    cfg = load_config(cfg_dict)
    res = run_simulation(cfg)
    write_run(
        out,
        cfg.model_dump(mode="json"),
        cfg.seed,
        res.metrics,
        res.columns,
        res.run_info,
        extra_tables=res.extras["tables"],
    )
    return cfg


def _pngs(figs):
    for f in figs:
        data = f.path.read_bytes()
        assert data.startswith(PNG)
        assert len(data) > 5000


def test_report_of_one_run_is_self_contained_html(tmp_path):
    cfg = _write(BASE, tmp_path)
    target, figs = render_report(tmp_path)
    names = {f.path.name for f in figs}
    assert names == {"latency_cdf.png", "queue.png", "gpu_timeline.png", "roofline.png"}
    _pngs(figs)
    text = target.read_text()
    assert target.name == "report.html"
    assert text.count("data:image/png;base64,") == len(figs)
    # every figure is titled (on the PNG) with the config that made it; the page states it
    # once and heads each figure with its name, not the title again
    title = describe(cfg.model_dump(mode="json"))
    assert "qwen3-8b on 1× h100" in title
    assert "B=8192" in title
    assert text.count(title.replace("&", "&amp;")) == 1
    assert all(f.title == title for f in figs)
    for f in figs:
        assert text.count(f"<h3>{f.name}</h3>") == 1


def test_report_of_a_sweep_draws_rate_curves_and_links_figures_in_markdown(tmp_path):
    grid = {"workload.rate": [10, 40], "scheduler.token_budget": [512, 4096]}
    run_sweep(BASE, grid, tmp_path, backend="serial")
    target, figs = render_report(tmp_path, "md")
    names = [f.path.name for f in figs]
    assert names[0] == "goodput_vs_rate.png"
    assert {"latency_cdf.png", "queue.png", "roofline.png"} <= set(names)
    _pngs(figs)
    text = target.read_text()
    for f in figs:
        assert f"](figures/{f.path.name})" in text
    # the title leaves out what varies; the legend names it
    rate_fig = figs[0]
    assert "B=" not in rate_fig.title
    assert "req/s" not in rate_fig.title
    assert "| 512 | 10 |" in text  # one table row per cell


def test_cli_report_on_a_demo_style_directory_of_runs(tmp_path):
    _write(BASE, tmp_path / "a")
    _write(dict(BASE, gpu="h200"), tmp_path / "b")
    res = CliRunner().invoke(app, ["report", str(tmp_path)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert collect(tmp_path).kind == "runs"
    assert (tmp_path / "report.html").stat().st_size > 10_000
    bad = CliRunner().invoke(app, ["report", str(tmp_path / "a" / "figures")])
    assert bad.exit_code == 2
    assert "results" in bad.output


def test_differences_label_what_varies_and_titles_skip_it():
    a = load_config(BASE).model_dump(mode="json")
    b = load_config(dict(BASE, gpu="h200", scheduler={"token_budget": 512})).model_dump(mode="json")
    varying, labels = differences([a, b])
    assert varying == ["gpu", "scheduler.token_budget"]
    assert labels == ["gpu=h100, token_budget=8192", "gpu=h200, token_budget=512"]
    title = describe(a, skip=varying)
    assert "h100" not in title
    assert "B=" not in title
    assert title.startswith("qwen3-8b")


def test_ebplus_mode_figure_appears_only_when_its_table_exists(tmp_path):
    _write(BASE, tmp_path)
    _, figs = render_report(tmp_path)
    assert "ebplus_modes.png" not in {f.path.name for f in figs}
    t = np.arange(0, 20_000_000_000, 1_000_000_000, dtype=np.int64)
    modes = np.where((t // 5_000_000_000) % 2 == 0, "mb", "eb")
    table = {
        "time_ns": t,
        "mode": modes,
        "event": np.where(t % 2 == 0, "evaluate", "step"),
        "demand": (t // 1_000_000_000) * 3,
        "n_obs": t / t.max() * 50,
        "theta": np.full(len(t), 0.01),
    }
    write_parquet(tmp_path / "ebplus.parquet", table)
    _, figs = render_report(tmp_path)
    (fig,) = [f for f in figs if f.path.name == "ebplus_modes.png"]
    _pngs([fig])


def test_per_gpu_timeline_has_one_row_per_instance(tmp_path):
    _write(BASE, tmp_path)
    tl = pl.read_parquet(tmp_path / "timeline.parquet")
    two = pl.concat([tl, tl.with_columns(pl.lit(1, dtype=pl.Int64).alias("instance"))])
    write_parquet(tmp_path / "timeline.parquet", two.to_dict(as_series=False))
    _, figs = render_report(tmp_path)
    (fig,) = [f for f in figs if f.path.name == "gpu_timeline.png"]
    assert "instance" in fig.caption
    _pngs([fig])


def test_report_refuses_a_directory_without_results(tmp_path):
    with pytest.raises(ConfigError, match=r"no summary\.json"):
        collect(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"config": {}, "metrics": {}}))
    with pytest.raises(ConfigError, match="format"):
        render_report(tmp_path, "pdf")


def test_a_cluster_memory_log_gives_the_per_gpu_timeline_by_model(tmp_path):
    _write(BASE, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    summary["models"] = ["llama-2-7b", "llama-2-13b"]
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    ns = 1_000_000_000
    log = {
        "time_ns": [0, 0, 2 * ns, 5 * ns, 7 * ns],
        "gpu": [0, 1, 0, 1, 0],
        "model": [0, 1, 0, 1, 1],
        "kind": [1, 1, 2, 2, 0],
        "pages": [6000, 12000, 20000, 9000, 3000],
    }
    write_parquet(tmp_path / "gpu_memory.parquet", log)
    _, figs = render_report(tmp_path)
    (fig,) = [f for f in figs if f.path.name == "gpu_timeline.png"]
    assert "memory log" in fig.caption
    _pngs([fig])


def test_cluster_configs_are_described_by_placement_and_spec():
    cfg = load_config(BASE).model_dump(mode="json")
    cfg["cluster"] = {"spec": "2x8:h100", "placement": "warmserve", "models": ["a", "b"]}
    title = describe(cfg)
    assert title.startswith("warmserve on 2x8:h100 (a, b)")
    assert "qwen3-8b" not in title
    assert "B=" not in title  # the engines' budget and cap are the cluster's, not scheduler.*
    # a composed run names its batching policy, serving policy and augmented workload
    cfg["scheduler"]["batching"] = "ebplus"
    cfg["augment"] = {"serving_policy": "augserve"}
    cfg["cluster"]["mix"] = {"augmented": "infercept-mix"}
    title = describe(cfg)
    assert "ebplus + augserve on infercept-mix" in title
