"""Units across nodes (``cluster.unit_pools``, ``cluster.network``; docs/design/
disagg-cluster-nodes.md): entry layouts and their errors, a hand-derived KV transfer over an
idle InfiniBand link inside a cluster run (and over NVLink for the same unit inside a node),
queueing on a shared NIC, placement under hypothesis (no GPU over-committed, every pool a
whole group of one node, ``apart`` on two nodes; WarmServe's prewarm planner too), and a
WarmServe cluster on 2 nodes with a split unit: every request served, memory within capacity,
every launch and prewarm on whole groups, fast-forward exactness."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import needs_traces
from tidal.cluster.config import ClusterConfig
from tidal.cluster.controller import ClusterController
from tidal.cluster.models import served_models
from tidal.cluster.placement_units import (
    aligned_free,
    check_placeable,
    first_free,
    place_groups,
    split_gpus,
)
from tidal.cluster.policies.warmserve_plan import plan_prewarm
from tidal.cluster.topology import Topology
from tidal.core.errors import ConfigError
from tidal.hardware.gpus import get_gpu
from tidal.report.digest import result_digest
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation
from tidal.workload.base import RequestSet

AZURE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"
PAGE = 2 << 20
KV_7B = 2 * 32 * 32 * 128 * 2
"""Llama-2-7B's KV bytes per token (K and V, 32 layers × 32 heads × 128 dims, BF16)."""
H100 = get_gpu("h100")


def test_unit_layouts_and_errors():
    auto = served_models(
        ["llama-2-7b:1p1d", "llama-2-7b:1/2:1p1d", "llama-2-70b:8:1p1d", "llama-2-7b"],
        H100, 8, PAGE, 256, "auto",
    )  # fmt: skip
    one, mixed, big, agg = auto
    assert (one.split, one.groups) == (False, (2,))  # a power-of-two unit stays one group
    assert (mixed.split, mixed.apart, mixed.groups, mixed.tp) == (True, False, (1, 2), 3)
    assert (big.split, big.groups, big.tp) == (True, (8, 8), 16)
    assert (agg.split, agg.groups) == (False, (1,))
    (apart,) = served_models(["llama-2-7b:4/4:1p1d"], H100, 8, PAGE, 256, "apart")
    assert (apart.split, apart.apart, apart.groups) == (True, True, (4, 4))
    assert split_gpus(apart, (0, 1, 2, 3, 8, 9, 10, 11)) == [(0, 1, 2, 3), (8, 9, 10, 11)]
    with pytest.raises(ConfigError, match="unit_pools: auto"):  # together: as before
        served_models(["llama-2-7b:1/2:1p1d"], H100, 8, PAGE, 256)
    with pytest.raises(ConfigError, match="prefill pool's 3 GPUs"):  # a pool is one group
        served_models(["llama-2-7b:3p2d"], H100, 8, PAGE, 256, "auto")
    with pytest.raises(ConfigError, match="decode pool's 16 GPUs"):
        served_models(["llama-2-70b:8:1p2d"], H100, 8, PAGE, 256, "auto")


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match=r"unit_pools: apart.*one node"):
        ClusterConfig(spec="1x8:h100", models=["llama-2-7b:1p1d"], unit_pools="apart")
    with pytest.raises(ValueError, match=r"cluster\.network\.link: unknown link kind 'ib'"):
        ClusterConfig(spec="2x8:h100", network={"link": "ib"})
    models = served_models(["llama-2-70b:8:1p1d"], H100, 8, PAGE, 256, "auto")
    check_placeable(models, _topo(2, 8))  # one group on each node
    with pytest.raises(ConfigError, match=r"no placement of its GPU groups \(8, 8\)"):
        check_placeable(models, _topo(1, 8))


def _one_request(n: int, prompt: int, at_s: float) -> RequestSet:
    return RequestSet(
        np.full(n, int(at_s * 1e9)), np.full(n, prompt), np.full(n, 16), "test",
        extra={"model": np.zeros(n, dtype=np.int64)},
    )  # fmt: skip


def _static(pools: str, network: dict | None = None, spec: str = "2x8:h100"):
    return load_config(
        {
            "workload": {"trace": AZURE},
            "cluster": {
                "spec": spec, "perf_model": "roofline", "models": ["llama-2-7b:4/4:1p1d"],
                "placement": "dedicated", "warmup_s": 20, "unit_pools": pools,
                "network": network or {}, "mix": {"rate": 1.0, "alpha": 1.0, "replay_s": 60},
            },
        }
    )  # fmt: skip


def _transfer_ns(res) -> np.ndarray:
    c = res.extras["controller"].backend.disagg.cols
    return c.kv_transfer_end_ns - c.kv_transfer_start_ns


@needs_traces
@pytest.mark.parametrize(
    ("network", "gbs", "lat_us"),
    [(None, 50.0, 5.0), ({"link": "roce-400", "latency_us": 7.5}, 50.0, 7.5),
     ({"link": "eth-100", "efficiency": 0.5}, 12.5, 30.0)],
)  # fmt: skip
def test_cross_node_transfer_by_hand(network, gbs, lat_us):
    """A 1p1d TP 4/4 unit with its pools on two nodes, one 2000-token prompt on an idle
    fabric: four flows (one per GPU and NIC) of bytes/4 each, at line rate × efficiency,
    then the link's latency: ⌈bytes / 4 / rate⌉ ns + latency."""
    res = run_simulation(_static("apart", network), _one_request(1, 2000, 30.0))
    assert res.metrics["num_completed"] == 1
    nbytes = 2000 * KV_7B
    assert res.metrics["kv_transfer_bytes"] == nbytes
    eff = (network or {}).get("efficiency", 0.8)
    rate = gbs * 1e9 * eff
    want = math.ceil(nbytes / 4 / rate * 1e9) + round(lat_us * 1e3)
    assert int(_transfer_ns(res)[0]) == want
    ctl = res.extras["controller"]
    kinds = {w.link.kind for w in ctl.backend.disagg.wirings}
    assert kinds == {(network or {}).get("link", "ib-ndr")}
    # inside one node (auto: the 8-GPU unit is one group) the same prompt crosses NVLink
    near = run_simulation(_static("auto", network), _one_request(1, 2000, 30.0))
    nv = 450e9 * 0.8 * 4  # four NVLink ports of an H100 on each side
    assert int(_transfer_ns(near)[0]) == math.ceil(nbytes / nv * 1e9) + 2000
    assert int(_transfer_ns(near)[0]) < want


@needs_traces
@pytest.mark.parametrize("nics", [8, 2, 1])
def test_units_queue_on_a_shared_nic(nics):
    """Dedicated placement fills 2×8 with two apart 4/4 units (prefill GPUs 0–3 and 4–7 on
    node 0, decode GPUs 8–11 and 12–15 on node 1); two coincident prompts, one per unit.
    8 NICs per node (one per GPU): each transfer has four NICs to itself. 2 NICs (GPUs 0–3 →
    NIC 0, 4–7 → NIC 1): each unit's four flows share one NIC, the units do not meet. 1 NIC:
    both units' eight flows share it, each transfer gets half a NIC and takes twice as long
    as alone."""
    res = run_simulation(
        _static("apart", {"nics_per_node": nics}), _one_request(2, 2000, 30.0)
    )
    assert res.metrics["num_completed"] == 2
    t = _transfer_ns(res)
    rate = 50e9 * 0.8
    nbytes = 2000 * KV_7B
    share = {8: 4, 2: 1, 1: 0.5}[nics]  # NICs' worth of rate each transfer gets
    assert t.tolist() == [math.ceil(nbytes / (share * rate) * 1e9) + 5000] * 2


def _topo(nodes: int, per: int) -> Topology:
    return Topology(nodes, per, H100)


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.integers(1, 3),
    per=st.sampled_from([2, 4, 8]),
    shape=st.tuples(
        st.integers(1, 2), st.sampled_from([1, 2, 4]), st.integers(1, 2), st.sampled_from([1, 2, 4])
    ),
    pools=st.sampled_from(["auto", "apart"]),
    aligned=st.booleans(),
    busy=st.data(),
)
def test_placement_whole_groups_never_overcommitted(nodes, per, shape, pools, aligned, busy):
    """Instances placed one after another on a partly busy cluster until none fits: every
    GPU holds at most one instance, every instance's groups are whole groups of its sizes,
    each inside one node (``apart``: two nodes), and placement stops only when no layout
    is left (checked by brute force for first-fit)."""
    p, tp_p, d, tp_d = shape
    entry = f"llama-2-7b:{tp_p}/{tp_d}:{p}p{d}d"
    if pools == "apart" and nodes < 2:
        pools = "auto"
    try:
        (m,) = served_models([entry], H100, per, PAGE, 256, pools)
    except ConfigError:
        return  # a pool that is not a power of two ≤ a node: refused by name (tested above)
    topo = _topo(nodes, per)
    n = topo.num_gpus
    taken = set(busy.draw(st.sets(st.integers(0, n - 1), max_size=n)))
    owner = dict.fromkeys(taken, -1)
    pick = (aligned_free if aligned else first_free)(topo, lambda g: g not in owner)
    for k in range(n + 1):
        gpus = place_groups(m, nodes, pick)
        if gpus is None:
            break
        assert len(set(gpus)) == len(gpus) == m.tp
        for g in gpus:
            assert g not in owner  # never over-committed
            owner[g] = k
        groups = split_gpus(m, gpus)
        assert [len(x) for x in groups] == list(m.groups)
        homes = [{topo.node_of(g) for g in grp} for grp in groups]
        assert all(len(h) == 1 for h in homes)
        if aligned:
            for grp in groups:  # aligned to its size, consecutive
                assert grp[0] % len(grp) == 0
                assert list(grp) == list(range(grp[0], grp[0] + len(grp)))
        if m.apart:
            assert homes[0] != homes[1]
    if not aligned:  # first fit is complete: no node pair can take the groups any more
        free = [sum(1 for g in topo.gpus_of(k) if g not in owner) for k in range(nodes)]
        sizes = m.groups
        if len(sizes) == 1:
            assert all(f < sizes[0] for f in free)
        else:
            for a in range(nodes):
                for b in range(nodes):
                    if a == b:
                        ok = not m.apart and free[a] >= sizes[0] + sizes[1]
                    else:
                        ok = free[a] >= sizes[0] and free[b] >= sizes[1]
                    assert not ok


@settings(max_examples=80, deadline=None)
@given(
    per=st.sampled_from([4, 8]),
    apart=st.booleans(),
    sizes=st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4])),
    free=st.lists(st.integers(0, 3), min_size=16, max_size=16),
    slots=st.lists(st.integers(0, 2), min_size=16, max_size=16),
    scores=st.lists(st.floats(0.1, 10), min_size=1, max_size=4),
    smart=st.booleans(),
)
def test_prewarm_plan_of_split_units(per, apart, sizes, free, slots, scores, smart):
    """WarmServe's planner with a split unit beside an aggregated TP2 model on 2 nodes: no GPU
    gets more weight pages than it has free nor more replicas than slots; every replica of
    the unit is two whole groups, each in one node (``apart``: two nodes); replicas of one
    model never share a GPU."""
    n = 2 * per
    nodes = [range(0, per), range(per, n)]
    w = [1, 1]
    layouts = [(sizes, apart), ((2,), False)]
    tps = [sum(sizes), 2]
    acts = plan_prewarm([scores, scores[:2]], tps, w, [], free[:n], slots[:n], nodes, smart,
                        layouts)  # fmt: skip
    used = [0] * n
    mine: list[set[int]] = [set(), set()]
    for m, gpus in acts:
        assert len(set(gpus)) == len(gpus) == tps[m]
        assert not mine[m] & set(gpus)
        mine[m] |= set(gpus)
        cut = [gpus[: sizes[0]], gpus[sizes[0] :]] if m == 0 else [gpus]
        homes = [{g // per for g in grp} for grp in cut]
        assert all(len(h) == 1 for h in homes)
        if m == 0 and apart:
            assert homes[0] != homes[1]
        for g in gpus:
            used[g] += 1
    assert all(u * 1 <= f for u, f in zip(used, free[:n], strict=True))
    assert all(u <= s for u, s in zip(used, slots[:n], strict=True))


def _warmserve(fast_forward: bool = True, **cluster):
    return load_config(
        {
            "fast_forward": fast_forward,
            "workload": {"trace": AZURE},
            "cluster": {
                "spec": "2x4:h100", "perf_model": "roofline",
                "models": ["llama-2-7b:2/2:1p1d", "llama-2-7b", "llama-2-7b"],
                "placement": "warmserve", "warmup_s": 20, "unit_pools": "apart",
                "mix": {"rate": 3.0, "alpha": 1.0, "replay_s": 240}, **cluster,
            },
        }
    )  # fmt: skip


@needs_traces
def test_warmserve_places_split_units_on_two_nodes():
    placed: list[tuple[str, tuple[int, ...]]] = []
    launch, prewarm = ClusterController.launch, ClusterController.prewarm

    def spy_launch(self, model, gpus, *a, **k):
        placed.append((model.name, tuple(gpus)))
        return launch(self, model, gpus, *a, **k)

    def spy_prewarm(self, model, gpus, *a, **k):
        placed.append((model.name, tuple(gpus)))
        return prewarm(self, model, gpus, *a, **k)

    with (
        mock.patch.object(ClusterController, "launch", spy_launch),
        mock.patch.object(ClusterController, "prewarm", spy_prewarm),
    ):
        res = run_simulation(_warmserve())
    ctl = res.extras["controller"]
    cols = res.columns
    assert (np.asarray(cols["finish_ns"]) >= 0).all()
    assert max(ctl.memory.peak_used) <= ctl.pages_per_gpu
    ctl.memory.check()
    unit = [g for name, g in placed if name == "llama-2-7b#0"]
    assert unit
    for gpus in unit:  # two whole groups of two GPUs, on node 0 and node 1
        assert len(gpus) == 4
        assert {g // 4 for g in gpus[:2]} != {g // 4 for g in gpus[2:]}
        assert len({g // 4 for g in gpus[:2]}) == len({g // 4 for g in gpus[2:]}) == 1
    mine = np.asarray(cols["model"]) == 0
    prompts = int(np.asarray(cols["prompt_len"])[mine].sum())
    assert res.metrics["kv_transfer_bytes"] == prompts * KV_7B
    assert {w.link.kind for w in ctl.backend.disagg.wirings} == {"ib-ndr"}
    assert ctl.backend.disagg.fabric is not None


@needs_traces
def test_fast_forward_exact_with_split_units():
    a = run_simulation(_warmserve(True))
    b = run_simulation(_warmserve(False))
    assert result_digest(a) == result_digest(b)


def _processor_sharing(start: np.ndarray, nbytes: np.ndarray, rate: float) -> np.ndarray:
    """End times (ns, float) of jobs on one server of ``rate`` bytes/s shared equally by
    the jobs in it (egalitarian processor sharing), jobs in start order."""
    ends = np.zeros(len(start))
    left: dict[int, float] = {}
    t, i = 0.0, 0
    while i < len(start) or left:
        k = len(left)
        to_done = min(left.values()) * k / rate * 1e9 if k else math.inf
        to_next = start[i] - t if i < len(start) else math.inf
        dt = min(to_done, to_next)
        for j in left:
            left[j] -= rate * dt / 1e9 / k
        t += dt
        for j in [j for j, r in left.items() if r <= 1e-3]:
            ends[j] = t
            del left[j]
        while i < len(start) and start[i] <= t:
            left[i] = nbytes[i]
            i += 1
    return ends


@needs_traces
def test_one_shared_nic_is_a_processor_sharing_queue():
    """With one NIC per node, every transfer of both units crosses node 0's NIC out and node
    1's NIC in: the fabric is one server of the NIC's rate shared max-min fairly by the
    transfers in flight, so each transfer ends when an egalitarian processor-sharing queue
    fed the same (start, bytes) says, plus the link's latency."""
    cfg = load_config(
        {
            "workload": {"trace": AZURE},
            "cluster": {
                "spec": "2x8:h100", "models": ["llama-2-13b:4/4:1p1d"], "perf_model": "roofline",
                "placement": "dedicated", "warmup_s": 20, "unit_pools": "apart",
                "network": {"nics_per_node": 1}, "max_model_len": 10240,
                "mix": {"rate": 4.0, "alpha": 1.0, "replay_s": 40, "prompt_cap": 8192},
            },
        }
    )  # fmt: skip
    res = run_simulation(cfg)
    c = res.extras["controller"].backend.disagg.cols
    done = c.kv_transfer_end_ns >= 0
    assert done.sum() == res.metrics["num_completed"] > 20
    start = c.kv_transfer_start_ns[done].astype(float)
    end = c.kv_transfer_end_ns[done].astype(float)
    nbytes = np.asarray(res.columns["prompt_len"])[done] * 2 * 40 * 40 * 128 * 2.0
    order = np.argsort(start, kind="stable")
    ideal = _processor_sharing(start[order], nbytes[order], 50e9 * 0.8) + 5000
    assert (end[order] - start[order]).max() > 2 * (nbytes / 40e9 * 1e9).max()  # they queued
    assert np.abs(end[order] - ideal).max() <= 2.0  # ns: each flow's end is rounded up


@needs_traces
@pytest.mark.parametrize("placement", ["dedicated", "serverlessllm", "warmserve"])
def test_every_policy_places_split_units(placement):
    """``auto`` with a 1/2:1p1d unit (groups of 1 and 2 GPUs) beside an aggregated 7B on 2×4
    H100: every policy serves every request within memory; every unit it starts is a GPU
    and a pair, each inside one node; its KV crosses NVLink when both sit on one node, else
    InfiniBand. (Dedicated, the unit alone, fills the cluster with two units: GPU 0 + pair
    2–3 on node 0, then GPU 1 + pair 4–5 across the nodes.)"""
    models = ["llama-2-7b:1/2:1p1d"] + (["llama-2-7b"] if placement != "dedicated" else [])
    cfg = load_config(
        {
            "workload": {"trace": AZURE},
            "cluster": {
                "spec": "2x4:h100", "perf_model": "roofline", "placement": placement,
                "models": models, "warmup_s": 20,
                "mix": {"rate": 3.0, "alpha": 1.0, "replay_s": 120},
            },
        }
    )  # fmt: skip
    res = run_simulation(cfg)
    ctl = res.extras["controller"]
    assert (np.asarray(res.columns["finish_ns"]) >= 0).all()
    assert max(ctl.memory.peak_used) <= ctl.pages_per_gpu
    ctl.memory.check()
    units = ctl.backend.disagg.every
    assert units
    kinds = []
    for u in units:
        pre, dec = u.gpus[:1], u.gpus[1:]
        assert len(dec) == 2
        assert dec[0] // 4 == dec[1] // 4
        same = pre[0] // 4 == dec[0] // 4
        kinds.append(u.wiring.link.kind)
        assert u.wiring.link.kind == ("nvlink" if same else "ib-ndr")
    if placement == "dedicated":
        assert [u.gpus for u in units] == [(0, 2, 3), (1, 4, 5)]
        assert kinds == ["nvlink", "ib-ndr"]
