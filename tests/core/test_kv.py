"""KV block manager: accounting by hand, and a hypothesis state machine over random operations."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tidal.core.kv import KVBlockManager
from tidal.core.request import Request


def test_allocate_rounds_up_to_blocks_and_free_returns_them():
    kv = KVBlockManager(10, block_size=16)
    r = Request(0, 0, 33, 1)
    kv.allocate(r, 33)  # ceil(33/16) = 3
    assert r.num_blocks == 3
    assert kv.num_free_blocks == 7
    kv.allocate(r, 48)  # still 3 blocks
    assert kv.num_free_blocks == 7
    kv.allocate(r, 49)
    assert r.num_blocks == 4
    kv.free(r)
    assert kv.num_free_blocks == 10
    assert r.num_blocks == 0


def test_overcommit_raises():
    kv = KVBlockManager(2, block_size=16)
    with pytest.raises(RuntimeError, match="overcommit"):
        kv.allocate(Request(0, 0, 40, 1), 40)


def test_watermark_refuses_admission_near_full():
    kv = KVBlockManager(100, block_size=16, watermark=0.1)  # keep 10 blocks free
    assert kv.can_admit(90)
    assert not kv.can_admit(91)


def test_swap_out_and_in_moves_blocks_between_tiers():
    kv = KVBlockManager(10, block_size=4, num_host_blocks=5)
    r = Request(0, 0, 12, 1)
    kv.allocate(r, 12)
    assert kv.swap_out(r)
    assert (kv.num_free_blocks, kv.num_free_host_blocks, kv.host_blocks_of(r)) == (10, 2, 3)
    assert kv.swap_in(r)
    assert (kv.num_free_blocks, kv.num_free_host_blocks, r.num_blocks) == (7, 5, 3)
    big = Request(1, 0, 40, 1)
    kv.allocate(big, 28)
    assert not kv.swap_out(big)  # 7 blocks do not fit in 5 host blocks


def test_block_ids_are_unique_and_recycled():
    kv = KVBlockManager(8, block_size=4, track_ids=True)
    a, b = Request(0, 0, 9, 1), Request(1, 0, 8, 1)
    kv.allocate(a, 9)
    kv.allocate(b, 8)
    ta, tb = list(kv.block_table(a)), list(kv.block_table(b))
    assert len(ta) == 3
    assert len(tb) == 2
    assert not set(ta) & set(tb)
    kv.free(a)
    c = Request(2, 0, 12, 1)
    kv.allocate(c, 12)
    assert set(kv.block_table(c)) <= set(range(8)) - set(tb)


class KVMachine(RuleBasedStateMachine):
    """Random allocate/grow/free/swap sequences never break the accounting invariant."""

    def __init__(self) -> None:
        super().__init__()
        self.kv = KVBlockManager(64, block_size=8, num_host_blocks=32, track_ids=True)
        self.gpu: dict[int, Request] = {}
        self.host: dict[int, Request] = {}
        self.tokens: dict[int, int] = {}
        self.next_id = 0

    @rule(tokens=st.integers(1, 200))
    def allocate(self, tokens: int) -> None:
        r = Request(self.next_id, 0, tokens, 1)
        self.next_id += 1
        if self.kv.blocks_for(tokens) <= self.kv.num_free_blocks:
            self.kv.allocate(r, tokens)
            self.kv.block_table(r)
            self.gpu[r.request_id] = r
            self.tokens[r.request_id] = tokens

    @precondition(lambda self: self.gpu)
    @rule(data=st.data(), extra=st.integers(1, 40))
    def grow(self, data: st.DataObject, extra: int) -> None:
        rid = data.draw(st.sampled_from(sorted(self.gpu)))
        r = self.gpu[rid]
        new = self.tokens[rid] + extra
        if self.kv.blocks_for(new) - r.num_blocks <= self.kv.num_free_blocks:
            self.kv.allocate(r, new)
            self.tokens[rid] = new
            assert len(self.kv.block_table(r)) == r.num_blocks

    @precondition(lambda self: self.gpu)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.gpu)))
        self.kv.free(self.gpu.pop(rid))

    @precondition(lambda self: self.gpu)
    @rule(data=st.data())
    def swap_out(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.gpu)))
        if self.kv.swap_out(self.gpu[rid]):
            self.host[rid] = self.gpu.pop(rid)

    @precondition(lambda self: self.host)
    @rule(data=st.data())
    def swap_in(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.host)))
        if self.kv.swap_in(self.host[rid]):
            self.gpu[rid] = self.host.pop(rid)

    @invariant()
    def accounting(self) -> None:
        self.kv.check(list(self.gpu.values()))
        assert 0 <= self.kv.num_free_blocks <= self.kv.num_blocks
        ids = [i for r in self.gpu.values() for i in self.kv.block_table(r)]
        assert len(ids) == len(set(ids))


TestKVMachine = KVMachine.TestCase


def test_block_table_grows_to_blocks_charged_in_bulk_and_ids_stay_a_partition():
    kv = KVBlockManager(6, block_size=4, track_ids=True)
    a, b = Request(0, 0, 8, 4), Request(1, 0, 5, 4)
    kv.allocate(a, 8)  # 2 blocks
    kv.allocate(b, 5)  # 2 blocks
    ta, tb = list(kv.block_table(a)), list(kv.block_table(b))
    assert len(ta) == len(tb) == 2
    assert not set(ta) & set(tb)
    # a decode pool charges a's third block in bulk; its num_blocks is written back later
    kv.take(1)
    grown = kv.block_table(a, 3)
    assert grown[:2] == ta
    assert len(grown) == 3
    assert grown[2] not in tb
    a.num_blocks = 3  # the pool's lazy write-back
    kv.check([a, b])
    kv.free(a)
    assert kv.num_free_blocks == 4
    kv.check([b])
