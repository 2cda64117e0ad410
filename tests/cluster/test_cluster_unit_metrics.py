"""What a cluster run reports of its disaggregated units (``sim/cluster_units.py``): the
per-request transfer columns, per model the KV bytes, the transfer stall, the TTFT breakdown
and each pool's busy share — checked by hand on a static unit and against the controller's
instance table on a WarmServe cluster; aggregated models and runs gain nothing."""

from __future__ import annotations

import json
import math

import numpy as np
from typer.testing import CliRunner

from tests.conftest import needs_traces
from tidal.cli import app
from tidal.sim.cluster_units import UNIT_COLUMNS
from tidal.sim.config import load_config
from tidal.sim.disagg_metrics import PARTS, ttft_breakdown
from tidal.sim.run import run_simulation
from tidal.workload.base import RequestSet

AZURE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"
KV_7B = 2 * 32 * 32 * 128 * 2
"""Llama-2-7B's KV bytes per token (K and V, 32 layers × 32 heads × 128 dims, BF16)."""


def _static(models: list[str], spec: str = "1x2:h100") -> dict:
    return load_config(
        {
            "workload": {"trace": AZURE},
            "cluster": {
                "spec": spec, "perf_model": "roofline", "models": models,
                "placement": "dedicated", "warmup_s": 20,
                "mix": {"rate": 1.0, "alpha": 1.0, "replay_s": 60},
            },
        }
    )  # fmt: skip


def _requests(prompts: list[int], output: int, at_s: float) -> RequestSet:
    n = len(prompts)
    return RequestSet(
        np.full(n, int(at_s * 1e9)), np.array(prompts), np.full(n, output), "test",
        extra={"model": np.zeros(n, dtype=np.int64)},
    )  # fmt: skip


def _run(models: list[str], rs: RequestSet, spec: str = "1x2:h100"):
    res = run_simulation(_static(models, spec), rs)
    ctl = res.extras["controller"]
    ((unit,),) = [ctl.backend.disagg.every]
    return res, ctl, unit


def test_one_request_idle_link_no_stall_and_pool_busy_by_hand():
    """One 2000-token request on a dedicated 1p1d unit: the columns hold its transfer
    (⌈bytes/rate⌉ + latency on the idle link, so no stall), the breakdown telescopes to its TTFT,
    the prefill engine's busy time is its one prefill step, and each pool's engine-seconds are
    the instance's READY → stop span of the controller's own instance table."""
    res, ctl, unit = _run(["llama-2-7b:1p1d"], _requests([2000], 16, 30.0))
    cols = res.columns
    for name in UNIT_COLUMNS:
        assert name in cols
    nbytes = 2000 * KV_7B
    start, end = int(cols["kv_transfer_start_ns"][0]), int(cols["kv_transfer_end_ns"][0])
    rate, latency = unit.wiring.ideal_rate, unit.wiring.link.latency_ns
    assert end - start == math.ceil(nbytes / rate * 1e9) + latency
    assert int(cols["kv_transfer_bytes"][0]) == nbytes
    parts = ttft_breakdown(cols)
    ttft = int(cols["first_token_ns"][0] - cols["arrival_ns"][0])
    assert sum(int(parts[k][0]) for k in PARTS) == ttft
    pm = res.extras["summary"]["per_model"]["llama-2-7b"]
    assert pm["kv_transfer_bytes"] == res.metrics["kv_transfer_bytes"] == nbytes
    assert pm["kv_transfer_stall_s"] == res.metrics["kv_transfer_stall_s"] == 0.0
    table = ctl.instance_table()
    ready, stopped = int(table["ready_ns"][0]), int(table["stopped_ns"][0])
    pre, dec = pm["pools"]["prefill"], pm["pools"]["decode"]
    assert (pre["engines"], pre["tp"], dec["engines"], dec["tp"]) == (1, 1, 1, 1)
    assert pre["engine_seconds"] == dec["engine_seconds"] == (stopped - ready) / 1e9
    prefill_ns = int(cols["prefill_end_ns"][0] - cols["prefill_start_ns"][0])
    assert pre["busy_s"] == prefill_ns / 1e9  # one step of 2000 tokens
    assert pre["utilization"] == prefill_ns / (stopped - ready)
    # the decode engine: the 1-token recompute step and 15 decode steps, all after the transfer
    assert 0 < dec["busy_s"] * 1e9 <= int(cols["finish_ns"][0]) - end
    assert pm["deployment"] == "1p1d"


def test_two_transfers_sharing_the_ports_stall_by_hand():
    """Two 1000-token prompts at once on a ``3p1d`` TP1 unit (1×4 H100): two prefill engines
    finish together, then both transfers start together and share the decode engine's one
    NVLink port max-min, each at rate/2 — so each takes 2·bytes/rate + latency, and the stall
    is Σ (transfer − idle-link time) = 2 · bytes/rate, to a few ns of rounding."""
    res, _, unit = _run(["llama-2-7b:1/1:3p1d"], _requests([1000, 1000], 8, 30.0), "1x4:h100")
    assert np.array_equal(res.columns["prefill_start_ns"], [30 * 10**9] * 2)
    cols = res.columns
    start = np.asarray(cols["kv_transfer_start_ns"])
    assert start[0] == start[1] == cols["prefill_end_ns"][0]
    nbytes = 1000 * KV_7B
    rate, latency = unit.wiring.ideal_rate, unit.wiring.link.latency_ns
    took = np.asarray(cols["kv_transfer_end_ns"]) - start
    alone = nbytes / rate * 1e9
    assert np.all(np.abs(took - (2 * alone + latency)) <= 2)
    pm = res.extras["summary"]["per_model"]["llama-2-7b"]
    assert abs(pm["kv_transfer_stall_s"] * 1e9 - 2 * alone) <= 4
    assert pm["kv_transfer_time_p50_s"] * 1e9 >= 2 * alone


def _warmserve() -> dict:
    return load_config(
        {
            "workload": {"trace": AZURE},
            "cluster": {
                "spec": "1x8:h100", "perf_model": "roofline",
                "models": ["llama-2-7b:1/2:2p1d", "llama-2-7b", "llama-2-7b"],
                "placement": "warmserve", "warmup_s": 20,
                "mix": {"rate": 3.0, "alpha": 1.0, "replay_s": 240},
            },
        }
    )  # fmt: skip


@needs_traces
def test_warmserve_unit_metrics_match_the_instance_table():
    """Every request of the unit model has its transfer in order (arrival ≤ prefill start ≤
    prefill end ≤ transfer start < transfer end < first token) and the breakdown telescopes;
    the others have none (−1, 0 bytes); the pools count P and D engines per started unit with
    the instances' READY → stop spans; busy shares lie in [0, 1]; aggregated models gain no
    unit keys."""
    res = run_simulation(_warmserve())
    cols = {k: np.asarray(res.columns[k]) for k in res.columns}
    mine = cols["model"] == 0
    assert mine.any()
    assert (~mine).any()
    arr, p0, p1 = cols["arrival_ns"], cols["prefill_start_ns"], cols["prefill_end_ns"]
    t0, t1 = cols["kv_transfer_start_ns"], cols["kv_transfer_end_ns"]
    first = cols["first_token_ns"]
    m = mine
    assert np.all((arr[m] <= p0[m]) & (p0[m] < p1[m]) & (p1[m] <= t0[m]) & (t0[m] < t1[m]))
    assert np.all(t1[m] < first[m])
    for name in UNIT_COLUMNS:
        assert np.all(cols[name][~mine] == (0 if name == "kv_transfer_bytes" else -1))
    parts = ttft_breakdown(cols)
    assert np.array_equal(sum(parts[k] for k in PARTS), first - arr)
    per_model = res.extras["summary"]["per_model"]
    pm = per_model["llama-2-7b#0"]
    assert pm["kv_transfer_bytes"] == int(cols["kv_transfer_bytes"].sum())
    assert pm["kv_transfer_bytes"] == int(cols["prompt_len"][mine].sum()) * KV_7B
    assert pm["kv_transfer_stall_s"] == res.metrics["kv_transfer_stall_s"] >= 0
    table = res.extras["controller"].instance_table()
    sel = (np.asarray(table["model"]) == 0) & (np.asarray(table["engine"]) >= 0)
    span = np.asarray(table["stopped_ns"])[sel] - np.asarray(table["ready_ns"])[sel]
    for role, per_unit in (("prefill", 2), ("decode", 1)):
        pool = pm["pools"][role]
        assert pool["engines"] == per_unit * int(sel.sum())
        assert math.isclose(pool["engine_seconds"], per_unit * int(span.sum()) / 1e9)
        assert 0 < pool["utilization"] <= 1
    assert (pm["pools"]["prefill"]["tp"], pm["pools"]["decode"]["tp"]) == (1, 2)
    # units.parquet: one row per started unit, its life the instance's, its sums the model's
    units = res.extras["tables"]["units"]
    assert len(units["unit"]) == int(sel.sum())
    life = dict(zip(np.asarray(table["engine"])[sel].tolist(),
                    zip(np.asarray(table["ready_ns"])[sel].tolist(),
                        np.asarray(table["stopped_ns"])[sel].tolist(), strict=True),
                    strict=True))  # fmt: skip
    for e, a, b in zip(units["engine"], units["start_ns"], units["stop_ns"], strict=True):
        assert life[int(e)] == (int(a), int(b))
    assert (units["model"] == 0).all()
    assert (units["prefill_engines"] == 2).all()
    assert (units["decode_engines"] == 1).all()
    assert int(units["requests"].sum()) == int(mine.sum())
    assert int(units["kv_transfer_bytes"].sum()) == pm["kv_transfer_bytes"]
    assert int(units["kv_transfer_stall_ns"].sum()) / 1e9 == pm["kv_transfer_stall_s"]
    assert int(units["prefill_busy_ns"].sum()) / 1e9 == pm["pools"]["prefill"]["busy_s"]
    assert int(units["decode_busy_ns"].sum()) / 1e9 == pm["pools"]["decode"]["busy_s"]
    for name in ("llama-2-7b#1", "llama-2-7b#2"):
        assert not {"pools", "kv_transfer_bytes", "kv_transfer_stall_s"} & set(per_model[name])


@needs_traces
def test_cli_writes_unit_columns_and_pools(tmp_path):
    """``tidal simulate --cluster`` with a unit: requests.parquet has the transfer columns,
    summary.json the per-model pools, and the terminal a line per unit model; an aggregated
    cluster's files have none of them."""
    import pyarrow.parquet as pq

    yaml = tmp_path / "short.yaml"
    yaml.write_text("cluster:\n  warmup_s: 5\n  mix: {replay_s: 60}\n")

    def run(models: str, out):
        res = CliRunner().invoke(app, [
            "simulate", "--config", str(yaml), "--cluster", "1x4:h100", "--models", models,
            "--placement", "dedicated", "--trace", AZURE, "--alpha", "1", "--rate", "1",
            "--no-plot", "--out", str(out),
        ])  # fmt: skip
        assert res.exit_code == 0, res.output
        names = pq.read_schema(out / "requests.parquet").names
        return res.output, names, json.loads((out / "summary.json").read_text())

    text, names, s = run("llama-2-7b:1p1d,llama-2-7b", tmp_path / "unit")
    assert set(UNIT_COLUMNS) <= set(names)
    assert (tmp_path / "unit" / "units.parquet").exists()
    pools = s["per_model"]["llama-2-7b#0"]["pools"]
    assert set(pools) == {"prefill", "decode"}
    assert "llama-2-7b#0 (1p1d): prefill 1 engine" in text
    assert "transfer stalls" in text
    text, names, s = run("llama-2-7b,llama-2-7b", tmp_path / "agg")
    assert not set(UNIT_COLUMNS) & set(names)
    assert not (tmp_path / "agg" / "units.parquet").exists()
    assert "kv_transfer_bytes" not in s["metrics"]
    assert "transfer stalls" not in text
