"""Columns spooled to disk read, hash and write exactly as the in-memory columns would.

- :class:`ColumnSpool` returns every row range it was given, across chunk boundaries;
- :class:`SpooledRecorder` (a cluster run's recorder) gives the columns of
  :class:`RequestRecorder` for any finish order, with unfinished and undelivered requests;
- a :class:`ColumnSet`'s digest and Parquet file equal those of the same columns in a dict,
  byte for byte (the streamed write reproduces polars' own row groups, ``write_parts``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.core.io import write_parquet, write_parts
from tidal.core.request import Request
from tidal.core.spool import ColumnSet, ColumnSpool
from tidal.report.digest import result_digest
from tidal.sim.recorder import RequestRecorder, SpooledRecorder
from tidal.workload.base import RequestSet


@settings(max_examples=40, deadline=None)
@given(
    chunk=st.integers(1, 40),
    batches=st.lists(st.integers(0, 70), max_size=8),
    data=st.data(),
)
def test_spool_reads_back_every_range(chunk: int, batches: list[int], data) -> None:
    spool = ColumnSpool(("a", "b"), chunk)
    ref: list[int] = []
    for k in batches:
        vals = np.arange(len(ref), len(ref) + k, dtype=np.int64) * 7 - 3
        if k % 2:
            for v in vals.tolist():
                spool.append(v, -v)
        else:
            spool.extend([vals, -vals])
        ref += vals.tolist()
    assert len(spool) == len(ref)
    lo = data.draw(st.integers(0, len(ref)))
    hi = data.draw(st.integers(lo, len(ref) + 3))
    assert spool.read("a", lo, hi).tolist() == ref[lo:hi]
    assert spool.read("b", lo, hi).tolist() == [-v for v in ref[lo:hi]]


def _requests(n: int) -> RequestSet:
    rng = np.random.default_rng(n)
    arrival = np.sort(rng.integers(0, 10**9, n)).astype(np.int64)
    extra = {"model": rng.integers(0, 3, n).astype(np.int64)}
    return RequestSet(arrival, rng.integers(1, 99, n), rng.integers(1, 99, n), "t", extra)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 60), block=st.integers(1, 9), data=st.data())
def test_spooled_recorder_equals_in_memory(n: int, block: int, data) -> None:
    reqs = _requests(n)
    order = data.draw(st.permutations(range(n)))
    finished = data.draw(st.integers(0, n))
    delivered = data.draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n)) if n else set()
    ref, spooled = RequestRecorder(reqs), SpooledRecorder(reqs, block)
    for i in delivered | set(order[:finished]):
        for rec in (ref, spooled):
            rec.instance[i] = i % 5
    for i in order[:finished]:
        r = Request(i, int(reqs.arrival_ns[i]), int(reqs.prompt_len[i]), 5)
        r.first_scheduled_ns, r.first_token_ns, r.finish_ns = i + 1, i + 2, i + 3
        r.num_output_tokens, r.num_preemptions, r.num_cached_tokens = 5, i % 2, i % 3 - 1
        ref.on_finish(r)
        spooled.on_finish(r)
    want, got = ref.columns(), spooled.columns()
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == want[k].dtype, k
        assert got[k].tolist() == want[k].tolist(), k
    res = SimpleNamespace(columns=got, metrics={}, extras={})
    assert result_digest(res) == result_digest(SimpleNamespace(columns=want, metrics={}, extras={}))


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("n", [0, 1, 1000, 150_001, 600_001])
def test_streamed_parquet_is_byte_identical(tmp_path: Path, n: int) -> None:
    rng = np.random.default_rng(n)
    cols = {
        "request_id": np.arange(n, dtype=np.int64),
        "finish_ns": rng.integers(-1, 10**12, n),
        "model": rng.integers(0, 4, n),
    }
    write_parquet(tmp_path / "a.parquet", cols)
    write_parquet(tmp_path / "b.parquet", ColumnSet.of_arrays(cols))
    assert _sha(tmp_path / "a.parquet") == _sha(tmp_path / "b.parquet")
    assert sum(write_parts(n)) == n
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.parquet", "b.parquet"]
