"""The streamed ServeGen mix equals the whole one, and streamed columns read back exactly."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import needs_traces
from tidal.core.units import INF_NS
from tidal.workload.mixstream import MixStream
from tidal.workload.multimodel import MixConfig, read_aggregate_rates, servegen_mix
from tidal.workload.stream import StreamedColumns

pytestmark = needs_traces

RATES = read_aggregate_rates()


@settings(max_examples=25)
@given(
    seed=st.integers(0, 2**32),
    days=st.sampled_from([0.01, 0.1, 0.37, 1.0, 2.5]),
    rate=st.sampled_from([0.05, 0.5, 3.0]),
    rows=st.sampled_from([1, 3, 50, 1000, 8192]),
    models=st.integers(1, 4),
    alpha=st.sampled_from([0.0, 1.0]),
    shift=st.sampled_from([0, 20_000_000_000]),
)
def test_streamed_mix_equals_the_whole_mix(seed, days, rate, rows, models, alpha, shift):
    cfg = MixConfig(kind="servegen", days=days, rate=rate, alpha=alpha)
    rng_whole, rng_stream = np.random.default_rng(seed), np.random.default_rng(seed)
    whole = servegen_mix(cfg, models, rng_whole, RATES)
    stream = MixStream(cfg, models, rng_stream, RATES, rows=rows, shift_ns=shift)
    first = stream.next_arrivals()
    assert len(stream) == len(whole.requests)
    assert stream.description == whole.description
    np.testing.assert_array_equal(stream.shares, whole.shares)
    # the generator is left where the whole draw leaves it (later draws see the same state)
    assert rng_stream.bit_generator.state == rng_whole.bit_generator.state
    pieces = list(stream.releases())
    cols = [np.concatenate(c) for c in zip(*pieces, strict=True)] if pieces else []
    rs = whole.requests
    if not cols:
        assert len(rs) == 0
        return
    t, prompt, output, model, nxt = cols
    np.testing.assert_array_equal(t, rs.arrival_ns + shift)
    np.testing.assert_array_equal(prompt, rs.prompt_len)
    np.testing.assert_array_equal(output, rs.output_len)
    np.testing.assert_array_equal(model, rs.extra["model"])
    # ``next``: the same model's following arrival; the first arrivals are the models' heads
    for m in range(models):
        idx = np.flatnonzero(model == m)
        np.testing.assert_array_equal(nxt[idx], np.append(t[idx][1:], INF_NS))
        assert first[m] == (int(t[idx[0]]) if len(idx) else INF_NS)


def test_every_piece_ends_before_the_next_begins():
    cfg = MixConfig(kind="servegen", days=1.0, rate=2.0, alpha=1.0)
    stream = MixStream(cfg, 4, np.random.default_rng(7), RATES, rows=500)
    pieces = list(stream.releases())
    assert len(pieces) > 20
    for a, b in itertools.pairwise(pieces):
        assert a[0][-1] <= b[0][0]
    assert max(len(p[0]) for p in pieces) <= 4 * (500 + 200)  # rows plus about one window


@settings(max_examples=30)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=30),
    keep=st.sampled_from([1, 16, 1000]),
    reads=st.lists(st.tuples(st.integers(0, 1200), st.integers(0, 60)), max_size=40),
)
def test_streamed_columns_read_exactly_the_pieces(sizes, keep, reads):
    n = sum(sizes)
    base = np.arange(n, dtype=np.int64) * 3 + 1
    cuts = np.cumsum([0, *sizes])
    pieces = iter([(base[a:b], -base[a:b]) for a, b in itertools.pairwise(cuts)])
    store = StreamedColumns(n, ("x", "y"), pieces, keep=keep)
    x, y = store.column("x"), store.column("y")
    for start, width in sorted(reads):  # the simulation reads forward (and rows behind)
        start %= n
        np.testing.assert_array_equal(x[start : start + width], base[start : start + width])
        assert y[start] == -base[start]
        assert x[start // 2] == base[start // 2]  # behind the kept rows: from the spool
    assert len(x) == n
    np.testing.assert_array_equal(np.asarray(y), -base)
    np.testing.assert_array_equal(x[0:n], base)
