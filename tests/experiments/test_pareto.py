"""``tidal plan --pareto`` (experiments/pareto.py): the front, a tiny real plan over the three
deployment modes (pareto.parquet, the figure, resume) and its config errors."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.core.errors import ConfigError
from tidal.experiments.pareto import front_mask, pareto, pareto_options, write_pareto
from tidal.experiments.space import load_plan_spec
from tidal.report.pareto_figure import pareto_figure


def _dominated(i: int, xs: list[float], ys: list[float]) -> bool:
    return any(
        xs[j] >= xs[i] and ys[j] >= ys[i] and (xs[j] > xs[i] or ys[j] > ys[i])
        for j in range(len(xs))
    )


def test_front_of_a_hand_made_set() -> None:
    xs = [10.0, 20.0, 30.0, 15.0, 30.0, 5.0, math.nan]
    ys = [100.0, 80.0, 20.0, 70.0, 10.0, 100.0, 500.0]
    # (10,100) dominates (5,100); (20,80) dominates (15,70); (30,20) dominates (30,10); NaN out
    assert front_mask(xs, ys) == [True, True, True, False, False, False, False]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 6), st.booleans()), min_size=1, max_size=25
    )
)
def test_front_is_the_non_dominated_points(pts: list[tuple[int, int, bool]]) -> None:
    """Brute force over the valid points; a NaN point (a failed run) is never on the front
    and never hides one (NaN keys would break a sort)."""
    xs = [math.nan if bad else float(x) for x, _, bad in pts]
    ys = [float(y) for _, y, _ in pts]
    valid = [i for i in range(len(pts)) if not pts[i][2]]
    vx, vy = [xs[i] for i in valid], [ys[i] for i in valid]
    want = [False] * len(pts)
    for k, i in enumerate(valid):
        want[i] = not _dominated(k, vx, vy)
    assert front_mask(xs, ys) == want


def _spec(**over: Any) -> Any:
    data: dict[str, Any] = {
        "base": {
            "model": "llama-3.1-8b",
            "gpu": "h100",
            "perf_model": "roofline",
            "workload": {"num_requests": 24, "prompt_len": 512, "output_len": 32},
            "seed": 3,
        },
        "slo": {"ttft_p99_s": 1.0},
        "modes": ["mb", "ebplus", "disagg"],
        "speculative": [{"method": "eagle3", "num_speculative_tokens": 3}],
        "pareto": {"gpus": 4, "loads": [1, 8], "pd_ratios": ["1:1", "1:3", "1:2"]},
    }
    data.update(over)
    return load_plan_spec(data)


def test_options_use_exactly_the_gpu_count() -> None:
    opts, skipped = pareto_options(_spec())
    labels = [o.label for o in opts]
    assert "disagg 2P×TP1:2D×TP1" in labels
    assert "disagg 1P×TP1:3D×TP1" in labels
    assert "MB 4×TP1 + eagle3 k=3" in labels
    assert "EB+ 4×TP1" in labels
    assert skipped == ["disagg 1:2 TP1/TP1: 4 GPUs are not k×3"]
    assert len(opts) == 2 * 4  # (mb, ebplus, two ratios) × speculation off / eagle3
    with pytest.raises(ConfigError, match=r"pareto\.gpus"):
        pareto_options(_spec(modes=["disagg"], pareto={"gpus": 5, "pd_ratios": ["1:1"]}))


def test_tiny_plan_writes_the_front_and_resumes(tmp_path: Path) -> None:
    spec = _spec()
    seen: list[dict[str, Any]] = []
    first = pareto(spec, workers=1, out_dir=tmp_path, on_point=seen.append)
    assert first.simulations_run == len(first.rows) == 16 == len(seen)
    path = write_pareto(first, tmp_path)
    df = pl.read_parquet(path)
    assert set(df["mode"]) == {"mb", "ebplus", "disagg"}
    assert df["error"].null_count() == df.height
    assert (df["gpus"] == 4).all()
    on = df.filter(pl.col("on_front"))
    xs, ys = df["tokens_per_s_per_user"].to_list(), df["tokens_per_s_per_gpu"].to_list()
    assert on.height == sum(not _dominated(i, xs, ys) for i in range(df.height)) >= 1
    fast = df.filter(pl.col("ttft_p99_s") <= 1.0)  # the SLO's TTFT target
    fx, fy = fast["tokens_per_s_per_user"].to_list(), fast["tokens_per_s_per_gpu"].to_list()
    on_ttft = [not _dominated(i, fx, fy) for i in range(fast.height)]
    assert fast["on_front_ttft"].to_list() == on_ttft
    assert df.filter(~pl.col("on_front_ttft") & (pl.col("ttft_p99_s") > 1.0)).height == (
        df.filter(pl.col("ttft_p99_s") > 1.0).height
    )
    # more clients: more tokens per GPU for every option
    for opt in set(df["option"]):
        d = df.filter(pl.col("option") == opt).sort("load")
        assert d["tokens_per_s_per_gpu"][1] > d["tokens_per_s_per_gpu"][0]
    best = first.cheapest_at_slo
    assert best is not None
    assert best["meets_slo"]
    assert best["dollars_per_mtok"] == df.filter(pl.col("meets_slo"))["dollars_per_mtok"].min()
    fig = pareto_figure(path, tmp_path / "pareto.png", {"gpus": 4, "cheapest_at_slo": best})
    assert fig is not None
    assert fig.path.stat().st_size > 0
    again = pareto(spec, workers=1, out_dir=tmp_path)
    assert again.simulations_run == 0
    assert again.simulations_reused == 16
    assert again.rows == first.rows
    assert not list(tmp_path.glob("**/*.tmp"))


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"modes": ["xx"]}, "modes"),
        ({"pareto": {"pd_ratios": ["1-1"]}}, "pd_ratios"),
        ({"pareto": {"loads": [0]}}, "loads"),
        ({"speculative": [{"method": "eagle3"}]}, "speculative"),
    ],
)
def test_config_errors_name_the_field(over: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        _spec(**over)


def test_cli_pareto_writes_points_json_and_figure(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tidal.cli import app

    args = [
        "plan", "--pareto", "--modes", "mb,disagg", "--num-requests", "16",
        "--prompt-len", "256", "--output-len", "16", "--slo-ttft-p99", "1",
        "--out", str(tmp_path / "p"),
    ]  # fmt: skip
    cfg = tmp_path / "plan.yaml"
    cfg.write_text(
        "base: {perf_model: roofline}\npareto: {gpus: 2, loads: [2], pd_ratios: ['1:1']}\n"
    )
    res = CliRunner().invoke(app, [*args, "--config", str(cfg)])
    assert res.exit_code == 0, res.output
    assert "Pareto front on 2 GPUs" in res.output
    assert "cheapest meeting" in res.output
    for name in ("pareto.parquet", "pareto.json", "pareto.png"):
        assert (tmp_path / "p" / name).is_file()
    assert set(pl.read_parquet(tmp_path / "p" / "pareto.parquet")["mode"]) == {"mb", "disagg"}
    bad = CliRunner().invoke(app, [*args, "--modes", "mb,xx", "--config", str(cfg)])
    assert bad.exit_code != 0
    assert "modes" in bad.output
    assert "unknown mode 'xx'" in bad.output


def test_workers_give_the_same_points() -> None:
    sweep = {"gpus": 2, "loads": [1, 4], "pd_ratios": ["1:1"]}
    spec = _spec(modes=["mb", "disagg"], speculative=[], pareto=sweep)
    one = pareto(spec, workers=1)
    two = pareto(spec, workers=2)
    assert two.rows == one.rows
    assert len(one.rows) == 4
