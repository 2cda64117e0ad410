"""One contract per loader, whichever path reads the file (issue 32 §6).

Before: a Mooncake length written ``1000.0``, or one hash id that was a float, a string or
≥ 2^64, sent the loader to a slow path that kept no ``hash_ids`` for the whole file (prefix hit
rate 0.66 → null, exit 0); the hash-count error named the record, not the physical line; a
``null`` inside ``hash_ids`` was dropped by the fast path, shifting every later segment.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tidal.core.errors import TraceError
from tidal.workload import _mooncake
from tidal.workload.traces import load_mooncake


def _rec(t: object = 0, p: object = 1000, o: object = 5, ids: object = "auto") -> dict:
    rec = {"timestamp": t, "input_length": p, "output_length": o}
    if ids == "auto":
        ids = [7, 8]
    if ids != "absent":
        rec["hash_ids"] = ids
    return rec


def _write(path: Path, recs: list[dict], sep: str = "\n") -> Path:
    path.write_text(sep.join(json.dumps(r) for r in recs) + "\n")
    return path


def _segments(rs) -> list[tuple[int, ...]]:
    c = rs.content
    return [
        tuple(c.ids[c.offset[i] : c.offset[i] + c.count[i]].tolist()) for i in range(len(rs))
    ]


def test_an_integral_float_length_keeps_the_hash_ids_of_the_whole_file(tmp_path: Path) -> None:
    recs = [_rec(t=i * 1000, ids=[3 * i, 3 * i + 1]) for i in range(4)]
    plain = load_mooncake(_write(tmp_path / "a.jsonl", recs), hash_block_tokens=512)
    recs[2]["input_length"] = 1000.0
    odd = load_mooncake(_write(tmp_path / "b.jsonl", recs), hash_block_tokens=512)
    assert odd.content is not None
    assert _segments(odd) == _segments(plain) == [(0, 1), (3, 4), (6, 7), (9, 10)]
    assert odd.prompt_len.tolist() == plain.prompt_len.tolist()


@pytest.mark.parametrize(
    "bad", [[1, 2.0], [1, 2.5], [1, "2"], [1, True], [1, 2**64], [1, None], 7, "x", {"a": 1}]
)
def test_an_odd_hash_id_is_refused_with_its_line(tmp_path: Path, bad: object) -> None:
    recs = [_rec(t=0), _rec(t=5), _rec(t=9, ids=bad)]
    path = _write(tmp_path / "m.jsonl", recs, sep="\n\n")  # record 3 on physical line 5
    with pytest.raises(TraceError, match=r"line 5, column 'hash_ids'"):
        load_mooncake(path, hash_block_tokens=512)
    # without hash_block_tokens the ids are not read, so they are not checked either
    assert len(load_mooncake(path)) == 3


def test_the_hash_count_error_names_the_physical_line(tmp_path: Path) -> None:
    recs = [_rec(), _rec(ids=[1])]
    path = _write(tmp_path / "m.jsonl", recs, sep="\n\n\n")
    with pytest.raises(TraceError, match=r"line 4, column 'hash_ids': 1 ids for 1000"):
        load_mooncake(path, hash_block_tokens=512)


def test_lines_end_at_newline_only(tmp_path: Path) -> None:
    """A U+2028 inside a string is no line break for polars; it is none for the scan either."""
    text = (
        json.dumps(_rec(t=0) | {"note": "a\u2028b"}, ensure_ascii=False)
        + "\n"
        + json.dumps(_rec(t=1, p=1000.5))
        + "\n"
    )
    path = tmp_path / "m.jsonl"
    path.write_text(text)
    with pytest.raises(TraceError, match=r"line 2, column 'input_length'"):
        load_mooncake(path)


# --- property: polars' path and the scan read the same records ---------------------------

number = st.one_of(
    st.integers(-3, 3000),
    st.integers(2**31 - 2, 2**31 + 1),
    st.integers(2**63 - 1, 2**64 + 1),
    st.floats(0, 3000, allow_nan=False).map(lambda x: float(round(x))),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
)
hash_id = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(2**63, 2**64 + 5),
    st.floats(allow_nan=False).map(float),
    st.booleans(),
    st.none(),
    st.text(max_size=2),
)
ids = st.one_of(
    st.lists(st.integers(0, 50), max_size=4),
    st.lists(hash_id, max_size=3),
    st.none(),
    st.just("absent"),
    number,
)


@st.composite
def records(draw) -> list[str]:
    out = []
    for _ in range(draw(st.integers(1, 6))):
        good = draw(st.integers(0, 3)) > 0
        rec = _rec(
            t=draw(st.integers(0, 10**6)) if good else draw(number),
            p=draw(st.integers(1, 3000)) if good else draw(number),
            o=draw(st.integers(1, 300)) if good else draw(number),
            ids=draw(st.lists(st.integers(0, 50), max_size=6)) if good else draw(ids),
        )
        line = json.dumps(rec)
        kind = draw(st.integers(0, 12))
        if kind == 0:
            line = line.replace('"output_length"', '"input_length"', 1)  # duplicate key
        elif kind == 1:
            line = "  " + line + "  "
        elif kind == 2:
            line = draw(st.sampled_from(["", " ", "{}", "[]", "{", "null"]))
        out.append(line)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=records(), hash_ids=st.booleans())
def test_polars_and_the_scan_agree(lines: list[str], hash_ids: bool) -> None:
    """Wherever polars reads a file, the reference scan reads the same table (or both refuse);
    so no single value switches the loader to other semantics."""
    data = ("\n".join(lines) + "\n").encode()
    count = len(_mooncake.record_lines(data))
    fast = _mooncake._fast(data, hash_ids, count)
    try:
        slow, _ = _mooncake.scan_jsonl(data, "f", hash_ids)
    except TraceError:
        slow = None
    if fast is None:
        event("scan only" if slow is not None else "refused")
        return  # the loader uses the scan: one path
    event("polars and scan")
    assert slow is not None, f"polars read a file the scan refuses: {lines}"
    assert fast.columns == slow.columns
    for c in fast.columns:
        assert fast[c].to_list() == slow[c].to_list(), (c, lines)
    assert fast.schema == slow.schema


def test_the_scan_and_polars_give_the_same_dtypes() -> None:
    data = (json.dumps(_rec()) + "\n").encode()
    fast = _mooncake._fast(data, True, 1)
    slow, lines = _mooncake.scan_jsonl(data, "f", True)
    assert fast is not None
    assert fast.schema == slow.schema == {
        **_mooncake.SCHEMA,
        "hash_ids": pl.List(pl.Int64),
    }
    assert lines == [1]
    assert np.array_equal(fast["hash_ids"].to_list(), slow["hash_ids"].to_list())


def test_augmented_lines_end_at_newline_only(tmp_path: Path) -> None:
    """``str.splitlines`` also split at U+2028, form feeds and lone CRs, so the line named
    by an error was not the editor's line (and a JSON string holding U+2028 broke in two)."""
    from tidal.workload.augmented_jsonl import read_augmented_jsonl

    good = {"prompt_tokens": 3, "segments": [{"decode_tokens": 2}], "tool": "qa"}
    text = (
        json.dumps(good | {"note": "a\u2028b\x0cc"}, ensure_ascii=False)
        + "\n"
        + json.dumps(good | {"prompt_tokens": 0})
        + "\n"
    )
    path = tmp_path / "aug.jsonl"
    path.write_text(text)
    with pytest.raises(TraceError, match=r"line 2, column 'prompt_tokens'"):
        read_augmented_jsonl(path)
    path.write_text(text.split("\n")[0] + "\n")
    assert [r[0] for r in read_augmented_jsonl(path)] == [1]
