"""Units whose pools have their own TP (``id:TPp/TPd:PpDd``, docs/design/
disagg-cluster-composition.md §B): entry parsing and the YAML mapping form, a hand-derived
static unit on 1×4 H100 (weights, KV pages and blocks per GPU of each pool, the weight loads,
the KV transfer over the prefill engine's one port), and on a WarmServe cluster: memory within
capacity, KV conserved on every engine of a unit, KV bytes of every prompt, fast-forward
exactness."""

from __future__ import annotations

import math
from dataclasses import replace
from unittest import mock

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.conftest import needs_traces
from tidal.cluster.config import ClusterConfig
from tidal.cluster.controller import ClusterController
from tidal.cluster.links import resolve_link
from tidal.cluster.memory import ClusterMemory, OutOfPagesError
from tidal.cluster.models import served_models
from tidal.cluster.transfer import TransferEngine
from tidal.cluster.unit import plan_kv
from tidal.core.errors import ConfigError
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.report.digest import result_digest
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation
from tidal.workload.base import RequestSet

AZURE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"
PAGE = 2 << 20
KV_13B = 2 * 40 * 40 * 128 * 2
"""Llama-2-13B's KV bytes per token (K and V, 40 layers × 40 heads × 128 dims, BF16)."""
KV_7B = 2 * 32 * 32 * 128 * 2


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def test_per_pool_tp_entries():
    h100 = get_gpu("h100")
    w = get_model("llama-2-13b").weight_bytes
    entries = ["llama-2-13b:1/2:2p1d", "llama-2-13b:2/2:1p1d", "llama-2-13b:2:1p1d"]
    (m, same, uni) = served_models(entries, h100, 8, PAGE, 256)
    assert (m.tp, m.prefill_engine_tp, m.engine_tp, m.mixed_tp) == (4, 1, 2, True)
    assert (m.min_tp, m.slots) == (1, 1)
    # placement asks every GPU of the group for the larger (TP1) shard; each pool holds its own
    assert m.weight_pages == cdiv(w, PAGE)
    whole, half = cdiv(w, PAGE), cdiv(cdiv(w, 2), PAGE)
    assert m.weight_split((4, 5, 6, 7)) == [((4, 5), whole), ((6, 7), half)]
    assert [m.shard_bytes_on(i) for i in range(4)] == [whole * PAGE] * 2 + [half * PAGE] * 2
    # a KV block of 256 tokens: 100 MiB on a TP1 GPU, 50 MiB on each GPU of a TP2 engine
    blocks = (256 * KV_13B // PAGE, 256 * KV_13B // 2 // PAGE)
    assert (m.prefill_block_pages, m.block_pages) == blocks
    # equal pool TPs are the plain unit, field for field
    assert replace(same, index=uni.index, name=uni.name) == uni
    assert not same.mixed_tp
    bad_entries = ("1/2", "2/4:1p1d", "x/2:2p1d", "1/2/2:2p1d")
    for bad in (f"llama-2-13b:{b}" for b in bad_entries):
        with pytest.raises(ConfigError, match=r"cluster\.models"):
            served_models([bad], h100, 8, PAGE, 256)
    with pytest.raises(ConfigError, match=r"per-pool TP \(TPp/TPd\) needs a unit shape"):
        served_models(["llama-2-13b:1/2"], h100, 8, PAGE, 256)


def test_yaml_mapping_entries_are_the_compact_form():
    spec = {"method": "ngram", "num_speculative_tokens": 3}
    c = ClusterConfig(
        spec="1x8:h100",
        models=[
            {"model": "llama-2-7b", "prefill": 2, "decode": 1, "prefill_tp": 1, "decode_tp": 2},
            {"model": "llama-2-7b", "tp": 2, "speculative_config": spec},
            "llama-2-13b",
        ],
    )
    assert c.models == ["llama-2-7b:1/2:2p1d", "llama-2-7b:2", "llama-2-13b"]
    assert list(c.speculative) == ["llama-2-7b#1"]
    assert c.speculative["llama-2-7b#1"].num_speculative_tokens == 3
    with pytest.raises(ValueError, match=r"cluster\.models"):
        ClusterConfig(models=[{"model": "llama-2-7b", "prefill_tp": 2}])
    with pytest.raises(ValueError, match=r"cluster\.speculative"):
        ClusterConfig(models=["llama-2-7b"], speculative={"llama-2-13b": spec})


def _static(models: list[str], spec: str = "1x4:h100", **cluster):
    return load_config(
        {
            "workload": {"trace": AZURE},
            "cluster": {
                "spec": spec, "perf_model": "roofline", "models": models,
                "placement": "dedicated", "warmup_s": 20,
                "mix": {"rate": 1.0, "alpha": 1.0, "replay_s": 60}, **cluster,
            },
        }
    )  # fmt: skip


def test_static_mixed_unit_gpu_accounting_by_hand():
    """``llama-2-13b:1/2:2p1d`` on 1×4 H100: GPUs 0–1 hold one TP1 prefill engine each (the
    whole weights), GPUs 2–3 one TP2 decode engine (half each). Each pool's KV is what its
    own GPUs have left, in its own block size; the weight loads move each GPU's own shard; a
    prompt's KV leaves its prefill engine through one NVLink port."""
    w = get_model("llama-2-13b").weight_bytes
    w1, w2 = cdiv(w, PAGE), cdiv(cdiv(w, 2), PAGE)
    bp1, bp2 = 256 * KV_13B // PAGE, 256 * KV_13B // 2 // PAGE
    launched, loads = [], []
    launch, start = ClusterController.launch, TransferEngine.start

    def spy_launch(self, *a, **k):
        inst = launch(self, *a, **k)
        held = [(self.memory.holds(g, ("w", inst.iid)), self.memory.holds(g, ("kv", inst.iid)))
                for g in inst.gpus]  # fmt: skip
        launched.append((inst, held, self.pages_per_gpu))
        return inst

    def spy_start(self, now_ns, nbytes, links, *a, **k):
        if links[-1].startswith("pcie:"):
            loads.append((links[-1], nbytes))
        return start(self, now_ns, nbytes, links, *a, **k)

    rs = RequestSet(np.array([30 * 10**9]), np.array([2000]), np.array([16]), "test",
                    extra={"model": np.array([0])})  # fmt: skip
    with (
        mock.patch.object(ClusterController, "launch", spy_launch),
        mock.patch.object(TransferEngine, "start", spy_start),
    ):
        res = run_simulation(_static(["llama-2-13b:1/2:2p1d"]), rs)
    ((inst, held, total),) = launched
    assert inst.gpus == (0, 1, 2, 3)
    kv1, kv2 = (total - w1) // bp1 * bp1, (total - w2) // bp2 * bp2
    assert held == [(w1, kv1), (w1, kv1), (w2, kv2), (w2, kv2)]
    assert sorted(loads) == [("pcie:0", w1 * PAGE), ("pcie:1", w1 * PAGE),
                             ("pcie:2", w2 * PAGE), ("pcie:3", w2 * PAGE)]  # fmt: skip
    ctl = res.extras["controller"]
    (wiring,) = ctl.backend.disagg.wirings
    sim = ctl.backend.sim
    assert [sim.instances[i].scheduler.kv.num_blocks for i in wiring.p_idx] == [kv1 // bp1] * 2
    assert [sim.instances[i].scheduler.kv.num_blocks for i in wiring.d_idx] == [kv2 // bp2]
    # each pool's own step model: the prefill engines' is the TP1 engine's
    assert sim.instances[wiring.p_idx[0]].perf is ctl.perf_for(inst, 1)
    assert sim.instances[wiring.d_idx[0]].perf is ctl.perf_for(inst, 2)
    assert res.metrics["num_completed"] == 1
    nbytes = 2000 * KV_13B  # the prompt's KV: half of it on each decode GPU
    assert res.metrics["kv_transfer_bytes"] == nbytes
    link = resolve_link("auto", get_gpu("h100"), get_gpu("h100"), 4)
    c = ctl.backend.disagg.cols
    took = int(c.kv_transfer_end_ns[0] - c.kv_transfer_start_ns[0])
    assert took == math.ceil(nbytes / link.bytes_per_s * 1e9) + link.latency_ns  # one tx port
    pm = res.extras["summary"]["per_model"]["llama-2-13b"]
    assert (pm["tp"], pm["prefill_tp"], pm["deployment"]) == (2, 1, "2p1d")


def _warmserve(fast_forward: bool = True, augmented: str | None = None, **cluster):
    mix = {"rate": 3.0, "alpha": 1.0, "replay_s": 240, "augmented": augmented}
    return load_config(
        {
            "fast_forward": fast_forward,
            "workload": {"trace": AZURE},
            "cluster": {
                "spec": "1x8:h100", "perf_model": "roofline",
                "models": ["llama-2-7b:1/2:2p1d", "llama-2-7b", "llama-2-7b"],
                "placement": "warmserve", "warmup_s": 20, "mix": mix, **cluster,
            },
        }
    )  # fmt: skip


@needs_traces
def test_warmserve_mixed_unit_memory_and_kv_conservation():
    res = run_simulation(_warmserve())
    ctl = res.extras["controller"]
    cols = res.columns
    assert (np.asarray(cols["finish_ns"]) >= 0).all()
    assert max(ctl.memory.peak_used) <= ctl.pages_per_gpu
    ctl.memory.check()
    assert ctl.memory.is_empty()
    mine = np.asarray(cols["model"]) == 0
    prompts = int(np.asarray(cols["prompt_len"])[mine].sum())
    assert res.metrics["kv_transfer_bytes"] == prompts * KV_7B
    sim = ctl.backend.sim
    for w in ctl.backend.disagg.wirings:  # every block of every engine of every unit back
        for i in w.p_idx + w.d_idx:
            kv = sim.instances[i].scheduler.kv
            assert kv.num_free_blocks == kv.num_blocks
        assert len({sim.instances[i].scheduler.kv.num_blocks for i in w.p_idx}) == 1
    table = ctl.instance_table()
    units = np.asarray(table["model"]) == 0
    assert units.any()
    assert (np.asarray(table["num_gpus"])[units] == 4).all()


@needs_traces
@pytest.mark.parametrize("augmented", [None, "infercept-mix"])
def test_fast_forward_exact_with_mixed_units(augmented):
    a = run_simulation(_warmserve(True, augmented))
    b = run_simulation(_warmserve(False, augmented))
    assert result_digest(a) == result_digest(b)


@settings(max_examples=60, deadline=None)
@given(
    p=st.integers(1, 3),
    d=st.integers(1, 3),
    tp_p=st.sampled_from([1, 2, 4]),
    tp_d=st.sampled_from([1, 2, 4]),
    used=st.lists(st.integers(0, 30_000), min_size=8, max_size=8),
)
def test_unit_memory_per_pool_never_overcommits(p, d, tp_p, tp_d, used):
    """Weights of each pool's shard on its own GPUs, all parts or none; KV per pool = the
    least free over its GPUs, in whole blocks of its own size (equal TPs: the least over the
    group, as before); every GPU within capacity."""
    group = p * tp_p + d * tp_d
    assume(group <= 8 and group & (group - 1) == 0)
    (m,) = served_models([f"llama-2-7b:{tp_p}/{tp_d}:{p}p{d}d"], get_gpu("h100"), 8, PAGE, 256)
    total = 36_000
    mem = ClusterMemory(8, total, 2)
    for g, u in enumerate(used):
        mem.alloc(0, (g,), ("other", g), u, 1, "weights")
    gpus = tuple(range(group))
    before = [mem.free(g) for g in range(8)]
    parts = m.weight_split(gpus)
    fits = all(mem.free(g) >= pages for part, pages in parts for g in part)
    if not fits:
        with pytest.raises(OutOfPagesError):
            mem.alloc_parts(0, parts, "w", 0, "weights")
        assert [mem.free(g) for g in range(8)] == before  # nothing taken
        return
    mem.alloc_parts(0, parts, "w", 0, "weights")
    k = p * tp_p
    assert [mem.holds(g, "w") for g in gpus] == [m.shard_pages(tp_p)] * k + [
        m.shard_pages(tp_d)
    ] * (group - k)
    pools = [(gpus[:k], m.prefill_block_pages), (gpus[k:], m.block_pages)]
    want = [min(mem.free(g) for g in part) // bp for part, bp in pools]
    if not m.mixed_tp:  # equal TPs: one size over the whole group (as every instance)
        want = [min(mem.free(g) for g in gpus) // m.block_pages] * 2
    if min(n * 256 for n in want) < 2048:
        with pytest.raises(RuntimeError, match="cannot hold"):
            plan_kv(mem, m, gpus, None, 2048)
        return
    kvp = plan_kv(mem, m, gpus, None, 2048)
    assert (kvp.prefill_blocks, kvp.blocks) == tuple(want)
    mem.alloc_parts(0, kvp.parts, "kv", 0, "kv")
    mem.check()
    for (part, bp), n in zip(pools, want, strict=True):
        assert all(mem.holds(g, "kv") == n * bp for g in part)
    assert all(mem.free(g) >= 0 for g in range(8))
