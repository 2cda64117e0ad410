"""GPU page accounting: never over capacity, exact bookkeeping, empty at the end."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidal.cluster.memory import ClusterMemory, OutOfPagesError

OPS = st.lists(
    st.tuples(
        st.sampled_from(["alloc", "release", "partial", "retag"]),
        st.integers(0, 5),  # owner
        st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True),  # gpus
        st.integers(0, 60),  # pages
    ),
    max_size=60,
)


@given(ops=OPS, total=st.integers(1, 100))
def test_random_operations_keep_the_invariant(ops, total):
    mem = ClusterMemory(4, total, num_models=2)
    where: dict[int, tuple[int, ...]] = {}
    t = 0
    for op, owner, gpus, pages in ops:
        t += 1
        key = ("o", owner)
        if op == "alloc":
            g = where.get(owner, tuple(sorted(gpus)))
            before = [mem.free(x) for x in range(4)]
            try:
                mem.alloc(t, g, key, pages, owner % 2, "prewarm")
                where[owner] = g
            except OutOfPagesError:
                # all or nothing: a refused allocation changes nothing
                assert [mem.free(x) for x in range(4)] == before
                assert any(b < pages for b in before)
        elif op in ("release", "partial") and owner in where:
            n = -1 if op == "release" else pages
            mem.release(t, where[owner], key, n)
            if all(mem.holds(x, key) == 0 for x in where[owner]):
                del where[owner]
        elif op == "retag" and owner in where:
            g = where.pop(owner)
            mem.retag(t, g, key, ("o", owner + 100), "weights")
            mem.release(t, g, ("o", owner + 100))
        mem.check()
        for x in range(4):
            assert 0 <= mem.free(x) <= total
            assert total - mem.free(x) <= mem.peak_used[x] <= total
    for owner, g in where.items():
        mem.release(t + 1, g, ("o", owner))
    assert mem.is_empty()


def test_log_records_per_model_totals():
    mem = ClusterMemory(2, 10, num_models=1)
    mem.alloc(5, (0, 1), "a", 4, 0, "prewarm")
    mem.retag(6, (0, 1), "a", "b", "weights")
    mem.release(7, (0,), "b")
    cols = mem.log_columns()
    gpu0 = [
        (int(t), int(k), int(p))
        for t, g, k, p in zip(
            cols["time_ns"], cols["gpu"], cols["kind"], cols["pages"], strict=True
        )
        if g == 0
    ]
    # prewarm 4 → prewarm 0 + weights 4 → weights 0
    assert gpu0 == [(5, 0, 4), (6, 0, 0), (6, 1, 4), (7, 1, 0)]


def test_overcommit_is_refused():
    mem = ClusterMemory(1, 8, num_models=1)
    mem.alloc(0, (0,), "a", 8, 0, "kv")
    with pytest.raises(OutOfPagesError):
        mem.alloc(0, (0,), "b", 1, 0, "kv")
