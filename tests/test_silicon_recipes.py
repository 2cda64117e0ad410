"""``bench/silicon_recipes.py``: the InferenceX launch flags per silicon row —
``--scheduler-recv-interval`` (B200/B300 SGLang scripts: 10, or 30 from 16 clients; none on
H200 or vLLM) and ``--kv-cache-dtype fp8_e4m3`` — carried into the row's config and accepted
by the simulator."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import silicon_rows as sr
from silicon_recipes import kv_cache_dtype, scheduler_recv_interval

from tidal.sim.config import load_config

DSR1 = sr.Row(
    "dsr1_b200_sglang_fp8_agg_1024x1024_c4_cfg87", "src", "sglang", "0.5.9",
    "deepseek-ai/DeepSeek-V3", "b200_sxm", "fp8", "fp8", "fp8_block",
    1024, 1024, 4, 8, 1, 1, 8, 1, 183.2, 8.76,
)  # fmt: skip


def row(**kw: object) -> sr.Row:
    return dataclasses.replace(DSR1, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "want"),
    [
        ({}, 10),
        ({"concurrency": 15}, 10),
        ({"concurrency": 16}, 30),  # "if CONC ≥ 16, relax to ~30"
        ({"concurrency": 128, "system": "b300_sxm"}, 30),
        ({"tp": 4, "concurrency": 64}, 10),  # dsr1_fp8_b200.sh's TP 4 branch
        ({"system": "h200_sxm"}, None),  # dsr1_fp8_h200.sh: no flag
        ({"engine": "vllm"}, None),
        ({"attention_dp": 8}, None),  # SGLang refuses it with DP attention
        ({"model": "Qwen/Qwen3.5-397B-A17B", "precision": "fp8", "system": "b300_sxm",
          "concurrency": 64}, 10),  # qwen3.5_fp8_b300.sh: 10 always
        ({"model": "zhipuai/GLM-5", "concurrency": 64}, None),  # glm5_fp8_b200.sh: no flag
    ],
)  # fmt: skip
def test_the_recipes_flag_per_row(change: dict, want: int | None) -> None:
    assert scheduler_recv_interval(row(**change)) == want


@pytest.mark.parametrize(
    ("change", "want"),
    [
        ({}, "fp8"),  # dsr1_fp8_b200.sh: --kv-cache-dtype fp8_e4m3
        ({"system": "b300_sxm", "precision": "fp4"}, "fp8"),
        ({"system": "h200_sxm"}, None),  # dsr1_fp8_h200.sh: the model dtype
        ({"model": "Qwen/Qwen3.5-397B-A17B", "system": "h200_sxm"}, "fp8"),  # qwen3.5_fp8_h200
        ({"model": "Qwen/Qwen3.5-397B-A17B", "precision": "bf16"}, None),
        ({"engine": "vllm"}, None),
    ],
)
def test_the_recipes_kv_cache_dtype_per_row(change: dict, want: str | None) -> None:
    assert kv_cache_dtype(row(**change)) == want


def test_the_flag_reaches_a_loadable_config_with_a_note() -> None:
    p = sr.plan_row(row(concurrency=16), sr.config_fields(), engine="row", version="default")
    assert isinstance(p, sr.Plan)
    assert p.config["scheduler"]["scheduler_recv_interval"] == 30
    assert any("scheduler-recv-interval 30" in n for n in p.notes)
    assert p.config["kv_cache_dtype"] == "fp8"
    cfg = load_config(p.config)
    assert cfg.scheduler.options["scheduler_recv_interval"] == 30
    assert cfg.kv_cache_dtype == "fp8"
    h200 = sr.plan_row(row(system="h200_sxm"), sr.config_fields(), engine="row",
                       version="default")  # fmt: skip
    assert isinstance(h200, sr.Plan)
    assert "scheduler_recv_interval" not in h200.config["scheduler"]
    assert "kv_cache_dtype" not in h200.config
