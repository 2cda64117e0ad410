"""Disaggregated units in a multi-model cluster (``id:PpDd`` entries, sim/cluster_disagg.py):
entry parsing and per-GPU sizes, a hand-checked transfer on a statically placed unit, and on a
WarmServe cluster: memory never over capacity, requests delivered only to ready units and
served by their decode engines, KV moved for every prompt, and determinism."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest

from tests.conftest import needs_traces
from tidal.cluster.controller import ClusterController
from tidal.cluster.instance import START_KINDS
from tidal.cluster.links import resolve_link
from tidal.cluster.models import served_models
from tidal.core.errors import ConfigError
from tidal.hardware.gpus import get_gpu
from tidal.report.digest import result_digest
from tidal.sim.cluster_disagg import DisaggEngines
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation
from tidal.workload.base import RequestSet

AZURE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"
KV_7B = 2 * 32 * 32 * 128 * 2
"""Llama-2-7B's KV bytes per token (K and V, 32 layers × 32 heads × 128 dims, BF16)."""


def test_entries_give_the_unit_group_and_engine_shards():
    h100 = get_gpu("h100")
    agg, unit, big = served_models(
        ["llama-2-7b", "llama-2-7b:1p1d", "llama-2-13b:2:1p3d"], h100, 8, 2 << 20, 256
    )
    assert (unit.tp, unit.engine_tp, unit.prefill_engines, unit.decode_engines) == (2, 1, 1, 1)
    assert unit.disaggregated
    assert not agg.disaggregated
    assert agg.engine_tp == agg.tp == 1
    # every GPU of the unit holds one engine's shard: the 7B's whole weights, as aggregated
    assert (unit.weight_pages, unit.block_pages) == (agg.weight_pages, agg.block_pages)
    assert (big.tp, big.engine_tp) == (8, 2)
    assert (agg.slots, unit.slots, big.slots) == (1, 1, 3)  # router slots: B per decode engine
    for bad in ("llama-2-7b:1p0d", "llama-2-7b:2p1d", "llama-2-7b:1:2:1p1d", "llama-2-70b:8:1p1d"):
        with pytest.raises(ConfigError, match=r"cluster\.models"):
            served_models([bad], h100, 8, 2 << 20, 256)


def _one_request(prompt: int, output: int, at_s: float) -> RequestSet:
    one = np.array
    return RequestSet(
        one([int(at_s * 1e9)]), one([prompt]), one([output]), "test",
        extra={"model": one([0])},
    )  # fmt: skip


def test_static_unit_moves_the_prompt_kv_over_nvlink():
    """A dedicated 1p1d unit on a 1×2 H100 node, one 2000-token request after warm-up: the
    prompt's KV (2000 × 512 KiB) crosses the unit's NVLink ports in ⌈bytes / rate⌉ + latency."""
    cfg = load_config(
        {
            "workload": {"trace": AZURE},
            "cluster": {
                "spec": "1x2:h100", "perf_model": "roofline", "models": ["llama-2-7b:1p1d"],
                "placement": "dedicated", "warmup_s": 20,
                "mix": {"rate": 1.0, "alpha": 1.0, "replay_s": 60},
            },
        }
    )  # fmt: skip
    res = run_simulation(cfg, _one_request(2000, 16, 30.0))
    assert res.metrics["num_completed"] == 1
    nbytes = 2000 * KV_7B
    assert res.metrics["kv_transfer_bytes"] == nbytes
    disagg: DisaggEngines = res.extras["controller"].backend.disagg
    c = disagg.cols
    link = resolve_link("auto", get_gpu("h100"), get_gpu("h100"), 2)
    took = int(c.kv_transfer_end_ns[0] - c.kv_transfer_start_ns[0])
    assert took == math.ceil(nbytes / link.bytes_per_s * 1e9) + link.latency_ns
    assert c.prefill_start_ns[0] == 30 * 10**9  # an idle prefill engine starts at once
    assert c.kv_transfer_start_ns[0] == c.prefill_end_ns[0]  # an idle decode engine pulls
    first = int(res.columns["first_token_ns"][0])
    assert first > c.kv_transfer_end_ns[0]  # the decode engine's first token follows


def _warmserve(rate: float = 3.0, fast_forward: bool = True, augmented: str | None = None):
    mix = {"rate": rate, "alpha": 1.0, "replay_s": 240, "augmented": augmented}
    return load_config(
        {
            "fast_forward": fast_forward,
            "workload": {"trace": AZURE},
            "cluster": {
                "spec": "1x4:h100", "perf_model": "roofline",
                "models": ["llama-2-7b:1p1d", "llama-2-7b", "llama-2-7b"],
                "placement": "warmserve", "warmup_s": 20, "mix": mix,
            },
        }
    )  # fmt: skip


@needs_traces
def test_warmserve_places_units_and_routes_only_to_ready_ones():
    delivered: list[tuple[int, int]] = []
    deliver = DisaggEngines.deliver

    def spy(self, front, req, now_ns):
        delivered.append((front, now_ns))
        deliver(self, front, req, now_ns)

    with mock.patch.object(DisaggEngines, "deliver", spy):
        res = run_simulation(_warmserve())
    ctl = res.extras["controller"]
    disagg: DisaggEngines = ctl.backend.disagg
    cols = res.columns
    mine = np.asarray(cols["model"]) == 0
    assert (np.asarray(cols["finish_ns"]) >= 0).all()
    assert len(delivered) == int(mine.sum()) > 0
    # every GPU's pages stayed within its capacity (the pool refuses more; peaks recorded)
    assert max(ctl.memory.peak_used) <= ctl.pages_per_gpu
    ctl.memory.check()
    # a unit's engines: two (1p1d), KV caches of the instance's per-GPU size
    table = ctl.instance_table()
    rows = {
        int(e): (int(r), int(s))
        for e, r, s, m in zip(
            table["engine"], table["ready_ns"], table["stopped_ns"], table["model"], strict=True
        )
        if m == 0 and e >= 0
    }
    units = np.asarray(table["model"]) == 0
    assert (np.asarray(table["num_gpus"])[units] == 2).all()  # a prefill GPU and a decode GPU
    # WarmServe prewarmed the unit's weights on both: every start took a replica (hit, partial)
    kinds = np.asarray(table["kind"])[units]
    assert units.any()
    assert set(kinds.tolist()) <= {START_KINDS.index("hit"), START_KINDS.index("partial")}
    for front, t in delivered:  # only to a ready unit, never after it stopped
        ready, stopped = rows[front]
        assert ready <= t
        assert stopped < 0 or t <= stopped
    decode = {i for w in disagg.wirings for i in w.d_idx}
    assert set(np.asarray(cols["instance"])[mine].tolist()) <= decode
    prompts = int(np.asarray(cols["prompt_len"])[mine].sum())
    assert res.metrics["kv_transfer_bytes"] == prompts * KV_7B
    assert res.extras["summary"]["per_model"]["llama-2-7b#0"]["deployment"] == "1p1d"


@needs_traces
def test_cluster_with_units_is_deterministic():
    a, b = run_simulation(_warmserve(2.0)), run_simulation(_warmserve(2.0))
    assert result_digest(a) == result_digest(b)


@needs_traces
@pytest.mark.parametrize("augmented", [None, "infercept-mix"])
def test_fast_forward_changes_nothing_with_units(augmented):
    """With augmented requests the unit's decode engine pauses them (the prefill engine never
    sees a call)."""
    a = run_simulation(_warmserve(2.0, True, augmented))
    b = run_simulation(_warmserve(2.0, False, augmented))
    assert result_digest(a) == result_digest(b)
    if augmented:
        pm = a.extras["summary"]["per_model"]["llama-2-7b#0"]
        assert pm["num_intercepts"] > 0


@needs_traces
def test_muxserve_refuses_units():
    cfg = load_config(
        {
            "workload": {"trace": AZURE},
            "cluster": {
                "spec": "1x4:h100", "perf_model": "roofline",
                "models": ["llama-2-7b:1p1d", "llama-2-7b"], "placement": "muxserve",
                "mix": {"rate": 1.0, "alpha": 1.0, "replay_s": 30},
            },
        }
    )  # fmt: skip
    with pytest.raises(ConfigError, match="disaggregated units"):
        run_simulation(cfg)


def test_unit_router_cap_is_b_per_decode_engine():
    """A dedicated 1p3d unit on 1×4 H100: its instance accepts 3·B requests, served by three
    decode engines (least-loaded among them)."""
    cfg = load_config(
        {
            "workload": {"trace": AZURE},
            "cluster": {
                "spec": "1x4:h100", "perf_model": "roofline", "models": ["llama-2-7b:1p3d"],
                "placement": "dedicated", "warmup_s": 20, "batch": 4,
                "mix": {"rate": 1.0, "alpha": 1.0, "replay_s": 60},
            },
        }
    )  # fmt: skip
    n = 6
    rs = RequestSet(
        np.full(n, 30 * 10**9), np.full(n, 500), np.full(n, 64), "test",
        extra={"model": np.zeros(n, dtype=np.int64)},
    )  # fmt: skip
    launched = []
    launch = ClusterController.launch

    def spy(self, *a, **k):
        launched.append(launch(self, *a, **k))
        return launched[-1]

    with mock.patch.object(ClusterController, "launch", spy):
        res = run_simulation(cfg, rs)
    ctl = res.extras["controller"]
    assert [i.cap for i in launched] == [3 * 4]
    assert res.metrics["num_completed"] == n
    (wiring,) = ctl.backend.disagg.wirings
    served = np.asarray(res.columns["instance"]).tolist()
    assert set(served) == set(wiring.d_idx)  # 6 coincident requests spread over 3 engines
