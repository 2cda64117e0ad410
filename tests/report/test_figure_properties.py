"""What the report's figures show: one title, the SLO that was set, legends off the data,
labelled axes, readable planner-search labels, and a progress line only on a terminal."""

from __future__ import annotations

import io
import re

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.lines import Line2D
from rich.console import Console
from typer.testing import CliRunner

from tidal.cli import app
from tidal.cli.report import figure_status
from tidal.experiments.sweep import run_sweep
from tidal.report.collect import collect
from tidal.report.figure_base import slo_lines, wrap_title
from tidal.report.figures import all_figures
from tidal.report.render import render_report
from tidal.report.results import write_run
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

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
        out, cfg.model_dump(mode="json"), cfg.seed, res.metrics, res.columns, res.run_info,
        extra_tables=res.extras["tables"],
    )  # fmt: skip
    return cfg


def _words(text):
    return re.sub(r"[\s·]+", " ", text)


def _main_axes(fig):
    """The plotting axes (colorbars are axes too, labelled separately)."""
    return [a for a in fig.axes if not hasattr(a, "_colorbar")]


def _check_figure(f):
    fig = f.figure
    assert fig is not None
    # the title once: the suptitle, and no axes repeats it
    assert _words(fig.get_suptitle()) == _words(f.title)
    assert all(a.get_title() != f.title for a in fig.axes)
    # labelled axes: every plotting axes has a y label, every column a bottom x label
    axes = _main_axes(fig)
    assert all(a.get_ylabel().strip() or a.get_yticklabels() for a in axes), f.path.name
    assert any(a.get_xlabel().strip() for a in axes), f.path.name
    for a in fig.axes:
        if hasattr(a, "_colorbar"):
            assert a.get_ylabel().strip(), f.path.name
    # legends off the data: no legend overlaps any plotting area
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    boxes = [a.get_window_extent(renderer) for a in axes]
    for a in fig.axes:
        leg = a.get_legend()
        if leg is None:
            continue
        lb = leg.get_window_extent(renderer)
        for box in boxes:
            assert not lb.overlaps(box), f"{f.path.name}: legend over the data"


def _slo_x(f, label_part):
    found = {}
    for a in f.figure.axes:
        for line in a.get_lines():
            if isinstance(line, Line2D) and "SLO" in line.get_label():
                found[a.get_xlabel()] = float(line.get_xdata()[0])
    return {k: v for k, v in found.items() if label_part in k}


def test_run_figures_have_one_title_labels_and_legends_off_the_data(tmp_path):
    _write(BASE, tmp_path)
    _, figs = render_report(tmp_path)
    assert len(figs) >= 4
    for f in figs:
        _check_figure(f)
    (cdf,) = [f for f in figs if f.path.name == "latency_cdf.png"]
    assert _slo_x(cdf, "TTFT") == {"TTFT (s)": 0.5}  # the config's SLO, not the default 2 s
    assert _slo_x(cdf, "TPOT") == {"TPOT (s)": 0.05}


def test_sweep_figures_label_the_rate_axis_with_its_unit(tmp_path):
    grid = {"workload.rate": [10, 40], "scheduler.token_budget": [512, 4096]}
    run_sweep(BASE, grid, tmp_path, backend="serial")
    _, figs = render_report(tmp_path)
    rate = figs[0]
    assert rate.path.name == "goodput_vs_rate.png"
    assert {a.get_xlabel() for a in rate.figure.axes} == {"request rate (req/s)"}
    assert "TTFT ≤ 0.5 s" in rate.caption
    for f in figs:
        _check_figure(f)


def test_a_plan_shows_its_own_slo_target_and_readable_search_labels(tmp_path):
    from tests.experiments.test_planner import SPEC
    from tidal.experiments.planner import plan, write_plan
    from tidal.experiments.space import load_plan_spec

    spec = dict(SPEC, slo={"ttft_p99_s": 0.7})
    write_plan(plan(load_plan_spec(spec)), tmp_path)
    _, figs = render_report(tmp_path)
    for f in figs:
        _check_figure(f)
        # titled with the SLO the plan was given, not thresholds derived from it or defaults
        assert "SLO p99 TTFT ≤ 0.7 s" in f.title, f.title
        assert "TPOT" not in f.title
    (cdf,) = [f for f in figs if f.path.name == "latency_cdf.png"]
    assert _slo_x(cdf, "TTFT") == {"TTFT (s)": 0.7}  # the plan's p99 target
    assert _slo_x(cdf, "TPOT") == {}  # no TPOT target was set
    (search,) = [f for f in figs if f.path.name == "plan_search.png"]
    (a,) = search.figure.axes
    ticks = a.get_yticklabels()
    assert ticks
    assert all(t.get_fontsize() >= 7 for t in ticks)
    assert a.get_ylabel()


def test_slo_lines_read_run_thresholds_and_plan_targets():
    assert slo_lines({"ttft_s": 2, "tpot_s": 0.2}) == {
        "ttft_s": (2.0, "SLO 2 s"),
        "tpot_s": (0.2, "SLO 0.2 s"),
    }
    assert slo_lines({"ttft_p99_s": 1.0, "e2e_p50_s": 9}) == {"ttft_s": (1.0, "SLO p99 ≤ 1 s")}
    assert slo_lines({"norm_latency_s": None}) == {}


def test_titles_wrap_between_parts_only():
    title = "llama-3.1-8b on 1× h100 · mb/fcfs N=256 · 1500 req · SLO TTFT 2 s, TPOT 0.1 s"
    lines = wrap_title(title, 40).split("\n")
    assert all(len(x) <= 40 for x in lines)
    assert " · ".join(lines) == title  # every break is at a separator


def test_progress_line_on_a_terminal_names_each_figure(tmp_path):
    _write(BASE, tmp_path)
    buf = io.StringIO()
    term = Console(file=buf, force_terminal=True, width=100)
    seen = []
    with figure_status(term) as progress:
        assert progress is not None

        def both(done, total, name):
            seen.append((done, total, name))
            progress(done, total, name)

        all_figures(collect(tmp_path), tmp_path / "figures", both)
    assert [d for d, _, _ in seen] == list(range(len(seen)))
    assert {t for _, t, _ in seen} == {len(seen)}
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())
    assert "drawing latency CDFs" in screen
    assert f"{len(seen) - 1}/{len(seen)}" in screen


def test_no_progress_line_when_not_a_terminal(tmp_path):
    quiet = Console(file=io.StringIO(), force_terminal=False)
    with figure_status(quiet) as progress:
        assert progress is None
    _write(BASE, tmp_path)
    res = CliRunner().invoke(app, ["report", str(tmp_path)], catch_exceptions=False)
    assert res.exit_code == 0
    assert "drawing" not in res.output
    assert res.output.count("\n") == 1  # the one result line
