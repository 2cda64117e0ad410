"""Links between a disaggregated deployment's pools (cluster/links.py) and the transfer
engine's latency term: hand-derived times on an idle link, max-min sharing of a port."""

from __future__ import annotations

import math

import pytest

from tests.cluster.helpers import TimerLoop
from tidal.cluster.links import (
    LINK_KINDS,
    kv_transfer_bytes,
    pool_links,
    resolve_link,
)
from tidal.cluster.transfer import TransferEngine
from tidal.core.errors import ConfigError
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model


def _llama_bytes(tokens: int) -> float:
    # Llama-3.1-8B, BF16 KV: 2 (K and V) × 32 layers × 8 KV heads × 128 dims × 2 bytes
    per_token = 2 * 32 * 8 * 128 * 2
    assert get_model("llama-3.1-8b").kv_bytes_per_token_per_gpu(1) == per_token
    return float(tokens * per_token)


def test_idle_link_time_is_bytes_over_bandwidth_plus_latency():
    h100 = get_gpu("h100")
    link = resolve_link("ib-ndr", h100, h100, 2, bandwidth_gbs=50, latency_us=10, efficiency=1)
    loop = TimerLoop()
    eng = TransferEngine(pool_links(link, 1, 1, 1, 1), loop.call_at)
    nbytes = kv_transfer_bytes(get_model("llama-3.1-8b").kv_bytes_per_token_per_gpu(1), 1, 4096)
    assert nbytes == _llama_bytes(4096) == 536_870_912
    done: list[int] = []
    t0 = 1_000
    tr = eng.start(t0, nbytes, ("tx:p0", "rx:d0"), done.append, latency_ns=link.latency_ns)
    loop.run()
    assert done == [t0 + math.ceil(536_870_912 / 50e9 * 1e9) + 10_000]
    assert tr.finished_ns == done[0] - 10_000  # the link was free again before the callback


def test_latency_does_not_occupy_the_link():
    h100 = get_gpu("h100")
    link = resolve_link("eth-100", h100, h100, 2, efficiency=1.0)
    assert link.latency_ns == 30_000
    loop = TimerLoop()
    eng = TransferEngine(pool_links(link, 1, 1, 1, 1), loop.call_at)
    done: dict[str, int] = {}
    rate = 12.5e9
    eng.start(0, rate, ("tx:p0", "rx:d0"), lambda t: done.setdefault("a", t), latency_ns=30_000)
    eng.start(0, 2 * rate, ("tx:p0", "rx:d0"), lambda t: done.setdefault("b", t), latency_ns=30_000)
    loop.run()
    # a and b share 12.5 GB/s until a's last byte at 2 s; b's last 12.5 GB alone: 1 s more
    assert abs(done["a"] - (2_000_000_000 + 30_000)) <= 1
    assert abs(done["b"] - (3_000_000_000 + 30_000)) <= 2


def test_two_transfers_into_one_decode_instance_share_its_ports_max_min():
    h100 = get_gpu("h100")
    link = resolve_link("ib-ndr", h100, h100, 3, efficiency=1.0)
    caps = pool_links(link, 2, 1, 1, 1)
    assert caps == {"tx:p0": 50e9, "tx:p1": 50e9, "rx:d0": 50e9}
    loop = TimerLoop()
    eng = TransferEngine(caps, loop.call_at)
    done: dict[str, int] = {}
    small, big = _llama_bytes(1000), _llama_bytes(3000)
    a = eng.start(0, small, ("tx:p0", "rx:d0"), lambda t: done.setdefault("a", t))
    b = eng.start(0, big, ("tx:p1", "rx:d0"), lambda t: done.setdefault("b", t))
    assert a.rate == b.rate == 25e9  # each half of rx:d0, though each tx port could give 50
    loop.run()
    t_a = math.ceil(small / 25e9 * 1e9)
    assert abs(done["a"] - t_a) <= 1
    # b: 25 GB/s until a ends, then the whole 50 GB/s
    assert abs(done["b"] - (t_a + (big - small) / 50e9 * 1e9)) <= 2
    assert done["b"] > done["a"]


def test_tp_scales_each_pools_ports():
    h100 = get_gpu("h100")
    link = resolve_link("ib-ndr", h100, h100, 12)
    caps = pool_links(link, 1, 4, 1, 8)
    assert caps["tx:p0"] == pytest.approx(4 * 50e9 * 0.8)
    assert caps["rx:d0"] == pytest.approx(8 * 50e9 * 0.8)


def test_auto_picks_nvlink_within_a_node_and_ib_across():
    h100, h200, b200 = get_gpu("h100"), get_gpu("h200"), get_gpu("b200")
    assert resolve_link("auto", h100, h100, 8).kind == "nvlink"
    assert resolve_link("auto", h100, h100, 8).line_gbs == h100.nvlink_gbs
    assert resolve_link("auto", h100, h100, 9).kind == "ib-ndr"
    assert resolve_link("auto", h200, b200, 2).kind == "ib-ndr"  # two GPU types: two nodes


def test_unknown_kind_names_the_field_and_the_choices():
    h100 = get_gpu("h100")
    with pytest.raises(ConfigError, match=r"deployment\.kv_transfer\.link.*ib-ndr"):
        resolve_link("infiniband", h100, h100, 2)
    assert set(LINK_KINDS) >= {"nvlink", "ib-ndr", "roce-400", "eth-100", "pcie"}
