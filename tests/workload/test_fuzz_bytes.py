"""Fuzzing every file loader with bytes: random, and valid files mutated (flipped, cut,
duplicated, gzip-wrapped, NUL-padded) — issue 32 "What to build" §8.

Each loader must end in its result or a named error (``TidalError``: TraceError or
ConfigError); any other exception, a run over 60 s, or a process peak 2 GiB above the start is
a failure. The measured ``requests.parquet`` loader also gets structured frames: random
dtypes (int, float with NaN, string, bool, null) and values (negative, 2^62, 2^63−1), and
what it accepts is checked against the contract (sorted arrivals from 0, lengths in range).

Marked ``fuzz``: in the default run with a short budget (``TIDAL_FUZZ_EXAMPLES``, default 60
per loader); ``TIDAL_FUZZ_EXAMPLES=2000 pytest -m fuzz`` is the long run.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tidal.core.errors import TidalError
from tidal.workload._io import MAX_SPAN_NS, MAX_TOKENS
from tidal.workload.augmented_jsonl import load_augmented_jsonl
from tidal.workload.lengths import _load_table
from tidal.workload.measured import load_measured
from tidal.workload.multimodel import read_aggregate_rates
from tidal.workload.servegen_table import read_servegen
from tidal.workload.traces import detect_format, load_azure, load_mooncake, load_trace

pytestmark = pytest.mark.fuzz

EXAMPLES = int(os.environ.get("TIDAL_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=60_000,  # ms: an input that takes a loader over 60 s fails
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PEAK_LIMIT_KB = 2 * 1024 * 1024

SEEDS = {
    "a.csv": (
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
        b"2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"
    ),
    "m.jsonl": (
        b'{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]}\n'
        b'{"timestamp": 27, "input_length": 600, "output_length": 9, "hash_ids": [1, 3]}\n'
    ),
    "aug.jsonl": (
        b'{"prompt_tokens": 8, "segments": [{"decode_tokens": 4, "call_s": 0.5, '
        b'"return_tokens": 3}, {"decode_tokens": 2}]}\n'
        b'{"prompt_tokens": 5, "segments": [{"decode_tokens": 7}]}\n'
    ),
    "chunk-1-trace.csv": b"0,1.5,1,Gamma,0.8,2\n600,0.5,1,Weibull,1.2,1\n1200,0,0,,,\n",
    "lengths.csv": b"num_prefill_tokens,num_decode_tokens\n10,5\n300,20\n",
    "rates.csv": b"model,window_start_s,total_rate_rps\nm-small,0,1.5\nm-small,600,2\n",
}


def _rss_kb(field: str) -> int:
    try:
        with open("/proc/self/status") as f:
            return next(int(x.split()[1]) for x in f if x.startswith(field))
    except (OSError, StopIteration):
        return 0


def _peak_guard(fn: Callable[[], object]) -> object:
    """Run ``fn``; fail when the process peak grew more than 2 GiB above the RSS at the start
    (VmHWM rises only when a new peak is reached, so a rise is this call's)."""
    rss, hwm = _rss_kb("VmRSS"), _rss_kb("VmHWM")
    try:
        return fn()
    finally:
        after = _rss_kb("VmHWM")
        if after > hwm:
            assert after - rss < PEAK_LIMIT_KB, f"peak {after - rss} KiB above the start"


@st.composite
def mutated(draw, seed: bytes) -> bytes:
    """``seed`` with a few edits: byte flips, cuts, duplicated spans, inserted junk."""
    data = bytearray(seed)
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2, 4]))):
        op = draw(st.integers(0, 4))
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == 0 and data:
            data[i] = draw(st.integers(0, 255))
        elif op == 1:
            del data[i : i + draw(st.integers(1, 20))]
        elif op == 2:
            data[i:i] = data[i : i + draw(st.integers(1, 40))] * draw(st.integers(1, 5))
        elif op == 3:
            data[i:i] = draw(
                st.sampled_from([b"\n", b",", b'"', b"{", b"}", b"\x00", b"\xef\xbb\xbf",
                                 b"1e400", b"-1", b"NaN", b"9223372036854775808", b"\r\n"])
            )
        else:
            data[i:i] = draw(st.binary(max_size=12))
    return bytes(data)


def contents(seed: bytes):
    body = st.one_of(st.binary(max_size=300), mutated(seed), mutated(seed), st.just(seed))
    how = st.sampled_from(["plain", "plain", "plain", "gzip", "gzip-cut"])
    return st.tuples(body, how).map(_wrap)


def _wrap(args: tuple[bytes, str]) -> bytes:
    body, how = args
    if how == "plain":
        return body
    z = gzip.compress(body, 6)
    return z if how == "gzip" else z[: max(len(z) - 5, 2)]


def _check(
    fn: Callable[[Path], object], name: str, data: bytes, record: bool = True
) -> object | None:
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d) / "language" / "m-small"
        folder.mkdir(parents=True)
        path = folder / name
        path.write_bytes(data)
        text, kind = "", ""
        try:
            result = _peak_guard(lambda: fn(path))
        except TidalError as err:
            text, kind = str(err), type(err).__name__
            result = None
    if result is None:
        assert text, "an error without text"
        if record:
            event(f"named error ({kind})")
        return None
    if record:
        event("loaded")
    return result


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


LOADERS: dict[str, Callable[[Path], object]] = {
    "a.csv": load_azure,
    "m.jsonl": lambda p: load_mooncake(p, hash_block_tokens=512),
    "aug.jsonl": lambda p: load_augmented_jsonl(p, _rng(), rate=1.0, num_requests=None),
    "chunk-1-trace.csv": read_servegen,
    "lengths.csv": lambda p: _load_table.__wrapped__(str(p)),
    "rates.csv": read_aggregate_rates,
}


KIND = {
    "a.csv": "azure",
    "m.jsonl": "mooncake",
    "aug.jsonl": "augmented",
    "chunk-1-trace.csv": "servegen_chunk",
    "lengths.csv": "length_table",
    "rates.csv": "aggregate_rates",
}


def _bytes_test(name: str) -> Callable[..., None]:
    """A module-level hypothesis test of one loader (so each gets its own statistics)."""

    @FUZZ
    @given(data=contents(SEEDS[name]))
    @example(data=SEEDS[name])
    @example(data=b"")
    @example(data=b"\xef\xbb\xbf")
    @example(data=b"\x00" * 4096)
    @example(data=gzip.compress(SEEDS[name].split(b"\n")[0] + b"\n" + bytes(1 << 20)))
    def test(data: bytes) -> None:
        _check(LOADERS[name], name, data)

    test.__name__ = test.__qualname__ = f"test_bytes_{KIND[name]}"
    return test


for _name in LOADERS:
    _t = _bytes_test(_name)
    globals()[_t.__name__] = _t


@FUZZ
@given(data=st.one_of(*(contents(s) for s in SEEDS.values())), name=st.sampled_from(["t", "t.gz"]))
def test_format_detection_and_auto_loading_survive_bytes(data: bytes, name: str) -> None:
    def auto(path: Path) -> object:
        target = path.with_name(name)
        path.rename(target)
        detect_format(target)
        return load_trace(target, rng=_rng())

    _check(auto, "x", data)


# --- measured requests.parquet -----------------------------------------------------------

INT_VALUES = st.one_of(
    st.integers(0, 10_000), st.sampled_from([-5, -1, 0, 2**31, 2**62, 2**63 - 1, -(2**63)])
)
COLUMN = st.one_of(
    st.lists(INT_VALUES, min_size=3, max_size=3).map(lambda v: pl.Series(v, dtype=pl.Int64)),
    st.lists(st.one_of(INT_VALUES, st.none()), min_size=3, max_size=3).map(
        lambda v: pl.Series(v, dtype=pl.Int64)
    ),
    st.lists(st.floats(allow_nan=True), min_size=3, max_size=3).map(pl.Series),
    st.lists(st.text(max_size=3), min_size=3, max_size=3).map(pl.Series),
    st.lists(st.booleans(), min_size=3, max_size=3).map(pl.Series),
    st.lists(st.integers(0, 2**64 - 1), min_size=3, max_size=3).map(
        lambda v: pl.Series(v, dtype=pl.UInt64)
    ),
)
GOOD = {
    "arrival_ns": pl.Series([5, 0, 9]),
    "prompt_len": pl.Series([3, 4, 5]),
    "finish_ns": pl.Series([50, 60, 70]),
    "output_tokens": pl.Series([2, 0, 1]),
    "success": pl.Series([True, False, True]),
}


@st.composite
def frames(draw) -> pl.DataFrame:
    cols = dict(GOOD)
    if draw(st.integers(0, 3)) == 0:
        return pl.DataFrame({k: v.alias(k) for k, v in cols.items()})
    for name in draw(st.sets(st.sampled_from([*GOOD, "first_token_ns"]), max_size=2)):
        if draw(st.integers(0, 9)) == 0:
            cols.pop(name, None)
        else:
            cols[name] = draw(COLUMN)
    return pl.DataFrame({k: v.alias(k) for k, v in cols.items()})


@FUZZ
@given(df=frames())
def test_the_measured_loader_survives_frames_and_keeps_its_contract(df: pl.DataFrame) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "requests.parquet"
        df.write_parquet(path)
        try:
            rs = load_measured(path)
        except TidalError:
            event("named error")
            return
    event("loaded")
    assert rs.arrival_ns[0] == 0
    assert np.all(np.diff(rs.arrival_ns) >= 0)
    assert int(rs.arrival_ns[-1]) <= MAX_SPAN_NS
    assert np.all((rs.prompt_len >= 1) & (rs.prompt_len <= MAX_TOKENS))
    assert np.all((rs.output_len >= 1) & (rs.output_len <= MAX_TOKENS))
    rows = rs.extra["source_row"]
    if "success" in df.columns:
        assert df["success"].to_numpy()[rows].all()


@FUZZ
@given(data=st.one_of(st.binary(max_size=400), mutated(b"PAR1" + bytes(40) + b"PAR1")))
def test_the_measured_loader_survives_bytes(data: bytes) -> None:
    _check(load_measured, "requests.parquet", data)


def test_seeds_load() -> None:
    """The unmutated seeds are valid files (so the mutations start from real input)."""
    for name, fn in LOADERS.items():
        assert _check(fn, name, SEEDS[name], record=False) is not None, name
    assert json.loads(SEEDS["m.jsonl"].split(b"\n")[0])["input_length"] == 1000


# --- what the fuzz found (kept as regression cases) --------------------------------------

CR_RAGGED = (
    b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
    b"2023-11-16 18:15:46.6805900,3\r4,44,9\n"
)
"""A ragged row with a lone carriage return: polars refused it, then the field counter
(``csv.reader``) raised ``_csv.Error`` (a traceback) while looking for the line."""


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("a.csv", CR_RAGGED),
        ("a.csv", b"TIMESTAMP,ContextTokens,GeneratedTokens\n\xff\xfe\r,1,2,3\n"),
        ("chunk-1-trace.csv", b"0\r1\n"),
        ("rates.csv", b"model,window_start_s\rtotal_rate_rps\nm,0,1,2\n"),
    ],
)
def test_a_csv_the_field_counter_cannot_read_is_a_named_error(name: str, data: bytes) -> None:
    import csv
    import io

    with pytest.raises(csv.Error):  # the input does reach the failing path
        list(csv.reader(io.StringIO(data.decode("utf-8", errors="replace"))))
    assert _check(LOADERS[name], name, data, record=False) is None


def test_an_aggregate_rate_row_without_a_model_is_named() -> None:
    """A blank ``model`` cell reached ``np.unique`` as None (``TypeError``)."""
    data = b"model,window_start_s,total_rate_rps\n,0,1.5\nm,600,2\n"
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "rates.csv"
        path.write_bytes(data)
        with pytest.raises(TidalError, match=r"line 2, column 'model': expected a model name"):
            read_aggregate_rates(path)


def test_a_last_request_without_hash_ids_shares_nothing(tmp_path: Path) -> None:
    """``PrefixContent.from_segments`` indexed past its arrays when the last request had no
    segments (``IndexError``)."""
    path = tmp_path / "m.jsonl"
    path.write_bytes(
        b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
        b'{"timestamp": 1, "input_length": 5, "output_length": 5}\n'
    )
    c = load_mooncake(path, hash_block_tokens=512).content
    assert c is not None
    assert c.count.tolist() == [2, 0]
    assert c.ends.tolist() == [512, 600]
