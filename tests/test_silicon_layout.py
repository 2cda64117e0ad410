"""``bench/silicon_layout.py``: the silicon sample's attention-DP rows run at their total
concurrency, and vLLM's recorded ``tp T × dp T, moe_ep T²`` runs as TP T with EP T on T GPUs."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import silicon_layout as sl
import silicon_rows as sr

MINIMAX = sr.Row(
    "x", "src", "vllm", "0.18.0", "MiniMaxAI/MiniMax-M2.5", "h100_sxm", "fp8", "fp8", "fp8",
    1024, 1024, 64, 4, 1, 4, 1, 16, 100.0, 10.0,
)  # fmt: skip
TODAY = sr.config_fields()


@pytest.fixture(scope="module")
def rows() -> list[sr.Row]:
    return sr.read_rows(sr.sample_path())


def test_the_concurrency_is_the_batch_times_the_attention_dp_ranks() -> None:
    assert sl.total_concurrency(16, 4) == 64
    assert sl.total_concurrency(16, 1) == 16
    assert sl.total_concurrency(16, 0) == 16  # an unrecorded DP size is one rank


def test_every_attention_dp_row_replays_its_recorded_client_concurrency(
    rows: list[sr.Row],
) -> None:
    """The source's ``silicon_concurrency=`` is the client's; ``batch_size`` is per DP rank."""
    dp = [r for r in rows if r.attention_dp > 1]
    assert len(dp) >= 90
    for r in dp:
        m = re.search(r"silicon_concurrency=(\d+)", r.source)
        assert m is not None, r.id
        assert r.concurrency == int(m.group(1)), r.id


def test_the_vllm_ep_encoding_runs_as_tp_with_ep_on_tp_gpus() -> None:
    served, note = sl.served_layout(MINIMAX)
    assert (served.tp, served.attention_dp, served.moe_tp, served.moe_ep) == (4, 1, 1, 4)
    assert served.concurrency == MINIMAX.concurrency
    assert "recorded tp 4 x dp 4, moe_ep 16" in note
    plan = sr.plan_row(MINIMAX, TODAY)
    assert isinstance(plan, sr.Plan)
    c = plan.config
    assert (c["tp"], c.get("data_parallel_size", 1), c["enable_expert_parallel"]) == (4, 1, True)
    assert c["workload"]["concurrency"] == 64
    assert note in plan.notes
    literal = sr.plan_row(MINIMAX, TODAY, recorded_layout=True)
    assert isinstance(literal, sr.Plan)
    assert (literal.config["tp"], literal.config["data_parallel_size"]) == (4, 4)
    assert not literal.notes


@pytest.mark.parametrize(
    "change",
    [
        {"engine": "sglang"},  # SGLang records DP attention its own way
        {"attention_dp": 2},  # not T × T
        {"moe_ep": 4},  # EP T, not T²
        {"tp": 1, "attention_dp": 1, "moe_ep": 1},  # nothing to read
    ],
)
def test_other_layouts_run_as_recorded(change: dict) -> None:
    row = dataclasses.replace(MINIMAX, **change)
    assert sl.served_layout(row) == (row, "")


def test_the_recorded_dp_rows_measure_what_the_tp_ep_rows_measure(rows: list[sr.Row]) -> None:
    """The evidence, from the sample alone: at the same GPU, precision, version, lengths and total
    concurrency, the rows recorded ``tp T × dp T, moe_ep T²`` and those recorded ``tp T, moe_ep
    T`` (no DP) measure the same TPOT (median within 1 %, 9 in 10 pairs within 3 %; two H100
    ISL-8192 pairs, whose TTFTs show heavy queueing, differ by 20–60 %): the same T GPUs ran
    both."""
    def key(r: sr.Row) -> tuple:
        return (r.system, r.precision, r.version, r.isl, r.osl, r.concurrency, r.tp)

    tp_ep = {key(r): r for r in rows
             if r.engine == "vllm" and r.attention_dp == 1 and r.moe_ep == r.tp > 1}  # fmt: skip
    pairs = [(r, tp_ep[key(r)]) for r in rows if sl.is_vllm_ep_encoding(r) and key(r) in tp_ep]
    assert len(pairs) >= 20
    assert {r.system for r, _ in pairs} >= {"h100_sxm", "b200_sxm"}
    off = sorted(abs(enc.tpot_ms / plain.tpot_ms - 1) for enc, plain in pairs)
    assert off[len(off) // 2] < 0.01
    assert sum(o < 0.03 for o in off) >= 0.9 * len(off)
    flags = [(r.tp, re.search(r"_tp(\d+)_ep(\d+)_", r.id)) for r, _ in pairs]
    named = [(t, int(m.group(1)), int(m.group(2))) for t, m in flags if m]
    assert named  # where the id carries the launch flags they read TP T, EP T
    assert all(t == tp == ep for t, tp, ep in named)
