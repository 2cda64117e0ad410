"""The planner's choice of unit shapes for one cluster model (experiments/unit_shapes.py): the
model's slice is exactly its requests of the cluster's mix, the default shapes are placeable,
unplaceable shapes are skipped, each shape's GPU count is the fewest on which it meets the SLO
(one size smaller does not), and the choice is the fewest GPUs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import needs_traces
from tidal.cluster.models import served_models
from tidal.experiments.unit_shapes import (
    _run,
    _shape_config,
    best_shape,
    compare_shapes,
    default_shapes,
    model_slice,
    shape_entry,
)
from tidal.hardware.gpus import get_gpu
from tidal.sim.cluster_run import cluster_workload
from tidal.sim.config import load_config

AZURE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"


@pytest.mark.parametrize("tp", [1, 2])
def test_default_shapes_fit_four_tp_gpus(tp):
    h100 = get_gpu("h100")
    entries = [shape_entry("llama-2-13b", tp, s) for s in default_shapes(tp)]
    models = served_models(entries, h100, 4 * tp, 2 << 20, 256)
    assert [m.tp for m in models] == [tp, 2 * tp, 4 * tp, 4 * tp, 4 * tp]
    assert [m.disaggregated for m in models] == [False, True, True, True, True]


def _cfg(rate: float = 6.0):
    return load_config(
        {
            "workload": {"trace": AZURE},
            "slo": {"ttft_s": 0.3, "tpot_s": 0.015},
            "cluster": {
                "spec": "1x8:h100", "models": ["llama-2-7b", "llama-2-13b"],
                "placement": "warmserve", "warmup_s": 20,
                "mix": {"rate": rate, "alpha": 1.0, "replay_s": 120},
            },
        }
    )  # fmt: skip


@needs_traces
def test_model_slice_is_the_models_requests():
    cfg = _cfg()
    whole = cluster_workload(cfg).requests
    mine = np.asarray(whole.extra["model"]) == 1
    part = model_slice(cfg, "llama-2-13b")
    assert len(part) == int(mine.sum()) > 0
    assert (part.arrival_ns == whole.arrival_ns[mine]).all()
    assert (part.output_len == whole.output_len[mine]).all()
    assert (part.extra["model"] == 0).all()


@needs_traces
def test_each_shape_gets_the_fewest_gpus_meeting_the_slo():
    cfg = _cfg(12.0)
    shapes = ["agg", "1p1d", "1/2:1p1d", "1/2:2p1d"]
    res = compare_shapes(cfg, "llama-2-7b", 4, shapes, attainment=0.95)
    assert [r.shape for r in res] == shapes
    skipped = res[2]
    assert "cluster.models" in skipped.skipped
    assert skipped.gpus == 0
    reqs = model_slice(cfg, "llama-2-7b")
    checked = 0
    for r in (x for x in res if not x.skipped):
        assert r.metrics["num_requests"] == len(reqs)
        group = served_models([r.entry], get_gpu("h100"), 8, 2 << 20, 256)[0].tp
        if r.meets and r.gpus // 2 >= group:  # one size smaller misses the SLO
            m = _run((_shape_config(cfg, "llama-2-7b", r.entry, r.gpus // 2), reqs))
            assert m["num_completed"] < m["num_requests"] or m["slo_attainment"] < 0.95
            checked += 1
    assert checked > 0  # (the 7B aggregated needs 2 GPUs at 12 req/s)
    best = best_shape(res)
    assert best is not None
    assert best.meets
    assert best.gpus == min(r.gpus for r in res if r.meets)


@needs_traces
def test_speculation_options_per_shape():
    """With the run's ``speculative`` set, the ``None`` option really turns it off; the n-gram
    option speculates (counters, lower TPOT p50)."""
    cfg = load_config(
        {**_cfg(6.0).model_dump(mode="json"),
         "speculative": {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.7}}
    )  # fmt: skip
    ngram = {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.7}
    off, on = compare_shapes(cfg, "llama-2-7b", 2, ["1p1d"], 0.9, speculative=[None, ngram])
    assert (off.speculative, on.speculative) == ("off", "ngram k=3")
    assert off.metrics["spec_decode_mean_acceptance_length"] is None
    assert on.metrics["spec_decode_mean_acceptance_length"] > 1
    assert on.metrics["tpot_p50_s"] < off.metrics["tpot_p50_s"]


@needs_traces
def test_choose_unit_shapes_rewrites_each_entry_to_its_choice():
    """``--unit-shapes auto``'s planner: each model's entry becomes :func:`best_shape` of its
    own :func:`compare_shapes` (here over aggregated and 1p1d), the names in results, the
    per-model speculation and the workload stay, and the planned config runs with the
    chosen shapes (a 1p1d choice runs as a unit)."""
    from tidal.experiments.unit_shapes import choose_unit_shapes
    from tidal.sim.run import run_simulation

    ngram = {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.7}
    data = _cfg(6.0).model_dump(mode="json")
    data["cluster"]["speculative"] = {"llama-2-7b": ngram}
    cfg = load_config(data)
    planned, choices = choose_unit_shapes(cfg, 0.95, 4, ["1p1d", "agg"])
    assert [ch.name for ch in choices] == ["llama-2-7b", "llama-2-13b"]
    for ch in choices:
        want = best_shape(compare_shapes(cfg, ch.name, 4, ["1p1d", "agg"], 0.95))
        assert want is not None
        assert ch.chosen == want
        assert ch.entry == want.entry
        assert ch.summary()["entry"] == want.entry
        assert [r["shape"] for r in ch.summary()["shapes"]] == ["1p1d", "agg"]
    c = planned.cluster
    assert c.models == [ch.entry for ch in choices]
    assert c.speculative["llama-2-7b"].num_speculative_tokens == 3
    p, q = cluster_workload(cfg).requests, cluster_workload(planned).requests
    assert np.array_equal(p.arrival_ns, q.arrival_ns)
    assert np.array_equal(p.extra["model"], q.extra["model"])
    res = run_simulation(planned)
    per_model = res.extras["summary"]["per_model"]
    assert set(per_model) == {"llama-2-7b", "llama-2-13b"}
    for ch in choices:
        unit = ch.entry.endswith("1p1d")
        assert (per_model[ch.name].get("deployment") == "1p1d") == unit
    # forcing units: every entry becomes a 1p1d unit, and the run serves every request
    forced, _ = choose_unit_shapes(cfg, 0.95, 4, ["1p1d"])
    assert [e.split(":")[-1] for e in forced.cluster.models] == ["1p1d", "1p1d"]
    assert run_simulation(forced).metrics["num_completed"] == len(p)
