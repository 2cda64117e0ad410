"""``bench/silicon_checks.py``: Little's-law throughput, in-flight count and GEMM load of a row."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import silicon_checks as sc
import silicon_rows as sr

BASE = sr.Row(
    "x", "src", "vllm", "0.12.0", "meta-llama/Llama-3.1-70B", "h100_sxm", "bf16", "", "",
    1000, 101, 16, 4, 1, 1, 4, 1, 100.0, 10.0,
)  # fmt: skip


def test_throughput_and_in_flight_follow_littles_law() -> None:
    # cycle 100 ms + (0.9·101 − 1)·10 ms = 999 ms: 16 clients → 16.02 requests a second
    assert sc.throughput(BASE) == pytest.approx(16 / 0.999)
    # nominal lengths: 1000 ms running of 1100 ms a cycle → 16·10/11 in flight
    assert sc.in_flight(BASE) == pytest.approx(16 * 1000 / 1100)
    queued = dataclasses.replace(BASE, ttft_ms=9000.0)  # a TTFT that holds a queue's wait
    assert sc.in_flight(queued) == pytest.approx(16 * 1000 / 10000)


def test_gemm_load_grows_with_the_reported_throughput() -> None:
    plan = sr.plan_row(BASE, sr.config_fields())
    assert isinstance(plan, sr.Plan)
    slow = sc.check_plan(plan)["gemm_load"]
    fast = dataclasses.replace(BASE, tpot_ms=5.0)  # twice the requests a second, nearly
    plan2 = sr.plan_row(fast, sr.config_fields())
    assert isinstance(plan2, sr.Plan)
    quick = sc.check_plan(plan2)["gemm_load"]
    assert 0 < slow < quick
    assert quick / slow == pytest.approx(sc.throughput(fast) / sc.throughput(BASE), rel=0.01)
