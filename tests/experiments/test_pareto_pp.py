"""``pareto.pp``: the agg modes' replicas of tp × pp GPUs (pipeline stages), and ``tidal
plan``'s capacity unit of a replica with pipeline stages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from tidal.experiments.pareto import pareto, pareto_options, write_pareto
from tidal.experiments.space import load_plan_spec
from tidal.hardware.gpus import get_gpu


def _spec(**pareto_over: Any) -> Any:
    return load_plan_spec({
        "base": {
            "model": "llama-3.1-8b", "gpu": "h100", "perf_model": "engine",
            "workload": {"num_requests": 16, "prompt_len": 256, "output_len": 24}, "seed": 5,
        },
        "slo": {"ttft_p99_s": 2.0},
        "modes": ["mb"],
        "pareto": {"gpus": 4, "loads": [2, 8], "tp": [1, 2], "pp": [1, 2], **pareto_over},
    })  # fmt: skip


def test_options_are_replicas_of_tp_times_pp_gpus() -> None:
    opts, skipped = pareto_options(_spec())
    by = {o.label: o for o in opts}
    assert list(by) == ["MB 4×TP1", "MB 2×TP1×PP2", "MB 2×TP2", "MB 1×TP2×PP2"]
    assert "pipeline_parallel_size" not in by["MB 4×TP1"].values  # pp 1: the option of before
    assert by["MB 1×TP2×PP2"].values["pipeline_parallel_size"] == 2
    assert by["MB 1×TP2×PP2"].replicas == 1
    assert skipped == []
    _, skipped = pareto_options(_spec(gpus=2, tp=[2], pp=[1, 2]))
    assert skipped == ["MB TP2×PP2: 2 GPUs are not a multiple of TP 2 × PP 2"]


def test_a_pipeline_option_runs_and_is_charged_all_its_gpus(tmp_path: Path) -> None:
    spec = _spec(tp=[1], pp=[1, 2])
    out = pareto(spec, workers=1, out_dir=tmp_path)
    df = pl.read_parquet(write_pareto(out, tmp_path))
    assert df["error"].null_count() == df.height
    assert sorted(set(df["pp"].to_list())) == [1, 2]
    assert (df["gpus"] == 4).all()
    piped = df.filter(pl.col("pp") == 2).sort("load")
    assert piped["replicas"].to_list() == [2, 2]
    assert (piped["tokens_per_s_per_gpu"] > 0).all()


def test_tidal_plan_s_replica_of_a_pipeline_is_tp_times_pp_gpus() -> None:
    from tidal.experiments.plan_options import build_options

    spec = load_plan_spec({
        "base": {"model": "llama-3.1-8b", "gpu": "h100", "perf_model": "engine",
                 "workload": {"num_requests": 8, "rate": 4.0}},
        "search": {"tp": [1, 2], "pipeline_parallel_size": [1, 2]},
        "slo": {"ttft_p99_s": 1.0},
    })  # fmt: skip
    opts = build_options(spec, 4096)
    units = {(o.config.tp, o.config.pipeline_parallel_size): o.unit_gpus for o in opts
             if o.config is not None}  # fmt: skip
    assert units == {(1, 1): 1, (1, 2): 2, (2, 1): 2, (2, 2): 4}
    price = get_gpu("h100").price_per_hour
    assert all(o.unit_price == o.unit_gpus * price for o in opts)
