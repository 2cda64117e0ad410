"""``bench/prefill_ops.py``: a silicon row's single-prompt prefill, operator by operator."""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import prefill_ops as po
import silicon_rows as sr

ROW = sr.Row(
    "x", "src", "vllm", "", "meta-llama/Llama-3.1-70B", "b200_sxm", "fp8", "fp8", "",
    8192, 1024, 4, 8, 1, 1, 8, 1, 300.0, 8.0,
)  # fmt: skip


def _parts(budget: int | None = None) -> tuple[object, object, list[dict[str, float]]]:
    plan = po.plan_of(ROW)
    if budget is not None:
        plan.config["scheduler"]["token_budget"] = budget
    return po.tidal_parts(ROW, plan)


def test_the_parts_sum_to_the_step() -> None:
    _, _, chunks = _parts()
    assert [c["tokens"] for c in chunks] == [8192.0]
    (c,) = chunks
    assert c["all_reduce"] > 0
    assert c["attention_prefill"] > 0
    assert sum(c[k] for k in po.OPS) == pytest.approx(c["step"], rel=1e-9)


def test_gemm_rate_is_below_the_gpus_peak_and_all_reduce_below_nvlink() -> None:
    cfg, base, (c,) = _parts()
    m, g = cfg.model_spec(), base.gpu  # type: ignore[attr-defined]
    # hand-derived: Llama-3.1-70B at TP 8, per token and layer 2·H·((q+2kv)·d + q·d + 3·I/8)
    per_tok = 2 * 8192 * ((8 + 2) * 128 + 8 * 128 + 3 * 28672 // 8)
    assert m.num_layers == 80
    flops = 8192 * 80 * per_tok
    rate = flops / ((c["attention_proj"] + c["mlp"]) * 1e-3)
    assert 0.2 * g.fp8_tflops * 1e12 < rate < g.fp8_tflops * 1e12
    one = c["all_reduce"] * 1e-3 / (2 * 80)  # s per all-reduce of 8192·8192·2 bytes
    bus = 2 * 7 / 8 * 8192 * 8192 * 2 / one
    assert bus < 2 * g.nvlink_gbs * 1e9  # an NVLink 5 switch moves ≤ 900 GB/s each way
    assert any("TFLOP/s" in x for x in po.bounds(cfg, base, c))


def test_a_prompt_longer_than_the_budget_is_chunked_and_later_chunks_attend_further() -> None:
    _, _, chunks = _parts(budget=2048)
    assert [c["tokens"] for c in chunks] == [2048.0] * 4
    assert [c["cached"] for c in chunks] == [0.0, 2048.0, 4096.0, 6144.0]
    att = [c["attention_prefill"] for c in chunks]
    assert all(b > a for a, b in itertools.pairwise(att))
    assert not any(math.isnan(c["step"]) for c in chunks)
