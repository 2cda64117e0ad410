"""The streamed metrics (:func:`summarize`, :func:`latency_p95`) equal the whole-array
computation for any row chunking: random columns (unfinished rows, unscheduled rows, one-token
outputs, a model column), chunk sizes from 1 row up, full and per-model selections."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.core.metrics import PCTS, summarize
from tidal.core.spool import ColumnSet
from tidal.sim.cluster_metrics import Selected, latency_p95, model_rows


def _pcts(name: str, x: np.ndarray, out: dict[str, Any]) -> None:
    if len(x) == 0:
        out.update({f"{name}_p{p}_s": None for p in PCTS})
        out[f"{name}_mean_s"] = None
        return
    out[f"{name}_mean_s"] = float(np.mean(x))
    for p, v in zip(PCTS, np.percentile(x, PCTS), strict=True):
        out[f"{name}_p{p}_s"] = float(v)


def reference(cols: dict[str, np.ndarray], slo_ttft: float, slo_tpot: float) -> dict[str, Any]:
    """The definitions over whole arrays (core.metrics' module docstring)."""
    done = cols["finish_ns"] >= 0
    n, n_done = len(done), int(done.sum())
    a, f = cols["arrival_ns"][done], cols["finish_ns"][done]
    first, sched, out = (
        cols["first_token_ns"][done],
        cols["first_scheduled_ns"][done],
        cols["output_tokens"][done],
    )
    m: dict[str, Any] = {"num_requests": n, "num_completed": n_done}
    ttft = (first - a) / 1e9
    tpot = (f - first) / 1e9
    tpot /= np.maximum(out - 1, 1)
    tpot[out <= 1] = np.nan
    n_met = int(((ttft <= slo_ttft) & (np.nan_to_num(tpot, nan=0.0) <= slo_tpot)).sum())
    queue = (sched - a) / 1e9
    queue[sched < 0] = np.nan
    for name, x in (
        ("ttft", ttft),
        ("tpot", tpot[out > 1]),
        ("e2e", (f - a) / 1e9),
        ("queue", queue),
    ):
        _pcts(name, x, m)
    span = max(int(f.max()) - int(cols["arrival_ns"].min()), 1) / 1e9 if n_done else 0.0
    tokens = int(out.sum()) + int(cols["prompt_len"][done].sum())
    m["duration_s"] = span
    m["request_throughput"] = n_done / span if span else 0.0
    m["token_throughput"] = tokens / span if span else 0.0
    m["output_token_throughput"] = int(out.sum()) / span if span else 0.0
    m["goodput"] = n_met / span if span else 0.0
    m["slo_attainment"] = n_met / n if n else 0.0
    m["num_preemptions"] = int(cols["num_preemptions"].sum())
    m.update({f"itl_p{p}_s": None for p in PCTS})
    return m


@st.composite
def columns(draw: st.DrawFn) -> dict[str, np.ndarray]:
    n = draw(st.integers(0, 300))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    arrival = rng.integers(0, 10**12, n)
    sched = np.where(rng.random(n) < 0.1, -1, arrival + rng.integers(0, 10**9, n))
    first = arrival + rng.integers(0, 10**10, n)
    finish = np.where(rng.random(n) < draw(st.floats(0, 1)), -1, first + rng.integers(0, 10**11, n))
    return {
        "arrival_ns": arrival,
        "first_scheduled_ns": sched,
        "first_token_ns": first,
        "finish_ns": finish,
        "output_tokens": rng.integers(0, 5, n),
        "prompt_len": rng.integers(1, 1000, n),
        "num_preemptions": rng.integers(0, 3, n),
        "model": rng.integers(0, 3, n),
    }


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for k in a:  # bit-identical floats (NaN where the reference has NaN)
        assert repr(a[k]) == repr(b[k]), k


@settings(max_examples=60, deadline=None)
@given(columns(), st.integers(1, 400), st.sampled_from([0.5, 5.0]), st.sampled_from([0.01, 1.0]))
def test_streamed_metrics_equal_whole_arrays(cols, rows, slo_ttft, slo_tpot):
    _same(summarize(cols, slo_ttft, slo_tpot, rows=rows), reference(cols, slo_ttft, slo_tpot))
    spooled = ColumnSet.of_arrays(cols)
    _same(summarize(spooled, slo_ttft, slo_tpot, rows=rows), reference(cols, slo_ttft, slo_tpot))
    for index in range(3):
        sel = model_rows(spooled, index)
        assert np.array_equal(sel, cols["model"] == index)
        sub = {k: v[sel] for k, v in cols.items()}
        got = summarize(Selected(spooled, sel), slo_ttft, slo_tpot, rows=rows)
        _same(got, reference(sub, slo_ttft, slo_tpot))
        p95 = latency_p95(Selected(spooled, sel), rows=rows)
        whole = latency_p95(sub, rows=len(sel) + 1)
        _same(p95, whole)
        ref = reference(sub, slo_ttft, slo_tpot)
        if ref["num_completed"]:
            done = sub["finish_ns"] >= 0
            ttft = (sub["first_token_ns"][done] - sub["arrival_ns"][done]) / 1e9
            assert p95["ttft_p95_s"] == float(np.percentile(ttft, 95))
