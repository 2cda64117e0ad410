"""Controller mechanisms: loads hold pages from their start, cancellation frees them, cold
starts follow their plan."""

from __future__ import annotations

import math

import numpy as np

from tests.cluster.helpers import FakeBackend
from tidal.cluster.coldstart import unified_plan, vanilla_plan
from tidal.cluster.config import ClusterConfig
from tidal.cluster.controller import ClusterController
from tidal.cluster.instance import State
from tidal.cluster.view import LaunchParams


def _ctl(placement="dedicated", spec="1x4:h100", models=("llama-2-7b", "llama-2-13b"), **kw):
    cfg = ClusterConfig(spec=spec, models=list(models), placement=placement, **kw)
    be = FakeBackend()
    return be, ClusterController(cfg, be, np.zeros(0, dtype=np.int64))


def test_a_load_cancelled_mid_way_frees_its_pages():
    be, ctl = _ctl()
    m = ctl.models[1]  # 13B on TP 2
    free0 = [ctl.memory.free(g) for g in range(4)]
    r = ctl.prewarm(m, (0, 1), 0)
    assert [ctl.memory.free(g) for g in (0, 1)] == [free0[0] - m.weight_pages] * 2
    bw = min(ctl.cfg.startup.host_to_gpu_gbs, ctl.topo.gpu.pcie_gbs) * 1e9
    be.run(until=int(m.shard_bytes / bw / 2 * 1e9))
    ctl.transfers.sync(be.now)
    assert 0.4 < r.transfers[0].done_fraction < 0.6
    ctl.evict(r, be.now)
    assert ctl.memory.is_empty()
    assert not ctl.transfers.active
    be.run()
    assert not r.warm
    assert ctl.replicas_loaded == 0
    assert ctl.loads_cancelled == 2


def test_a_finished_load_is_warm_after_bytes_over_bandwidth():
    be, ctl = _ctl()
    m = ctl.models[0]
    r = ctl.prewarm(m, (2,), 0)
    be.run()
    bw = min(ctl.cfg.startup.host_to_gpu_gbs, ctl.topo.gpu.pcie_gbs) * 1e9
    assert r.warm
    assert r.warm_ns == math.ceil(m.shard_bytes / bw * 1e9)
    ctl.evict(r, be.now)
    assert ctl.memory.is_empty()


def test_vanilla_cold_start_is_the_sum_of_its_stages():
    be, ctl = _ctl()
    m = ctl.models[1]
    st = ctl.cfg.startup
    plan = vanilla_plan(st.worker_s, st.engine_s, st.nccl_s, st.kv_init_s)
    inst = ctl.launch(m, (0, 1), plan, LaunchParams("miss"), 0)
    be.run()
    load_s = m.shard_bytes / (min(st.host_to_gpu_gbs, ctl.topo.gpu.pcie_gbs) * 1e9)
    expect = st.worker_s + st.engine_s + st.nccl_s + load_s + st.kv_init_s
    assert inst.state == State.READY
    assert abs(inst.ready_ns / 1e9 - expect) < 1e-6
    # KV takes every page left after the weights, in whole blocks
    kv_blocks = inst.kv.num_blocks
    assert kv_blocks == (ctl.pages_per_gpu - m.weight_pages) // m.block_pages
    ctl.stop(inst, be.now)
    assert ctl.memory.is_empty()


def test_an_instance_on_a_warm_replica_pays_only_the_handoff_and_lazy_kv():
    be, ctl = _ctl()
    m = ctl.models[0]
    r = ctl.prewarm(m, (3,), 0)
    be.run()
    t0 = be.now
    plan = unified_plan(0.5, 0.01, load=False)
    inst = ctl.launch(m, (3,), plan, LaunchParams("hit", replica=r), t0)
    be.run()
    assert inst.ready_ns - t0 == 510_000_000
    assert not ctl.replicas  # consumed
    ctl.stop(inst, be.now)
    assert ctl.memory.is_empty()


def test_warmserve_reads_a_checkpoint_from_disk_once_per_node():
    """With a cold page cache the artifact's disk loads cross the SSD link once per node and
    checkpoint (the two 7B models share their files); later reads come from DRAM."""
    from tidal.cluster.config import WarmServeConfig

    be, ctl = _ctl(
        "warmserve",
        spec="2x4:h100",
        models=("llama-2-7b", "llama-2-7b", "llama-2-13b"),
        warmserve=WarmServeConfig(checkpoints="ssd"),
    )
    st = ctl.cfg.startup
    ssd, pcie = st.ssd_gbs * 1e9, min(st.host_to_gpu_gbs, ctl.topo.gpu.pcie_gbs) * 1e9
    a, b, c = ctl.models
    first = ctl.prewarm(a, (0,), 0)
    be.run()
    assert first.warm_ns == math.ceil(a.shard_bytes / ssd * 1e9)
    t0 = be.now
    again = ctl.prewarm(b, (1,), t0)  # same files, now in node 0's page cache
    be.run()
    assert again.warm_ns - t0 == math.ceil(b.shard_bytes / pcie * 1e9)
    t1 = be.now
    other_node = ctl.prewarm(a, (4,), t1)  # node 1 has not read it yet
    be.run()
    assert other_node.warm_ns - t1 == math.ceil(a.shard_bytes / ssd * 1e9)
    t2 = be.now
    big = ctl.prewarm(c, (2, 3), t2)  # two 13B ranks share node 0's SSD
    be.run()
    assert big.warm_ns - t2 >= math.ceil(2 * c.shard_bytes / ssd * 1e9) - 1
    for r in list(ctl.replicas.values()):
        ctl.evict(r, be.now)
    assert ctl.memory.is_empty()


def test_warmserve_preloaded_checkpoints_skip_the_disk():
    be, ctl = _ctl("warmserve")  # default: checkpoints in DRAM
    m = ctl.models[0]
    r = ctl.prewarm(m, (0,), 0)
    be.run()
    bw = min(ctl.cfg.startup.host_to_gpu_gbs, ctl.topo.gpu.pcie_gbs) * 1e9
    assert r.warm_ns == math.ceil(m.shard_bytes / bw * 1e9)
