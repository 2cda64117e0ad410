"""Fuzzing the trace loaders: every generated file ends in a named error or a correct result.

Inputs mix well-formed rows with the values that broke loaders before (far-future times, huge
or fractional token counts, text, blanks, ragged rows, bad JSON, nested junk). Correct results
are checked against an independent reference parse of the same rows (Python's ``datetime`` and
``json``): the same count, arrivals sorted, non-negative and re-based to 0, lengths ≥ 1 and equal
to the file's. Any exception other than TraceError/ConfigError fails the test.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tidal.core.errors import ConfigError, TraceError
from tidal.workload.augmented_jsonl import load_augmented_jsonl
from tidal.workload.traces import load_azure, load_mooncake

pytestmark = pytest.mark.fuzz

MAX_SPAN_NS = 2**60  # the loaders' documented limits (tidal.workload._io)
MAX_TOKENS = 2**31 - 1
EXAMPLES = int(os.environ.get("TIDAL_FUZZ_EXAMPLES", "150"))
"""Examples per loader (bounded for CI; docs/RELIABILITY.md reports a run with more)."""
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMED = (TraceError, ConfigError)

_EPOCH = dt.datetime(1970, 1, 1)


def mostly(good, bad, one_in: int = 25):
    """``good`` except one draw in ``one_in`` (so that whole files are often valid)."""
    return st.sampled_from([True] * (one_in - 1) + [False]).flatmap(lambda ok: good if ok else bad)


bad_ints = st.one_of(
    st.integers(-5, 0), st.integers(2**31 - 2, 2**31 + 2), st.integers(2**62, 2**70)
)
ints = mostly(st.integers(1, 5000), bad_ints)
junk_scalar = st.one_of(
    st.text(max_size=4),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)


def attempt(fn, *args, **kwargs):
    """(result, None), or (None, the named error); any other exception propagates."""
    try:
        return fn(*args, **kwargs), None
    except NAMED as err:
        return None, err


def _check_result(rs, expected: list[tuple[int, int, int]]) -> None:
    """``expected``: (time ns, prompt, output) per row in file order."""
    assert len(rs) == len(expected)
    t = rs.arrival_ns
    assert np.all(np.diff(t) >= 0)
    assert len(t) == 0 or t[0] == 0
    order = sorted(range(len(expected)), key=lambda i: expected[i][0])  # stable, as the loader
    t0 = min((e[0] for e in expected), default=0)
    assert t.tolist() == [expected[i][0] - t0 for i in order]
    assert rs.prompt_len.tolist() == [expected[i][1] for i in order]
    assert rs.output_len.tolist() == [expected[i][2] for i in order]
    assert np.all(rs.prompt_len >= 1)
    assert np.all(rs.output_len >= 1)


# --- Azure CSV ---------------------------------------------------------------------------

azure_time = st.tuples(
    mostly(st.integers(2022, 2024), st.integers(1, 9999)),
    st.integers(1, 12),
    st.integers(1, 28),
    st.integers(0, 23),
    st.integers(0, 59),
    st.integers(0, 59),
    st.integers(0, 9_999_999),
)
azure_cell = mostly(
    ints.map(str), st.sampled_from(["", " ", "x", "1.5", "1e3", "-0", "+7", "2e40", "nan"])
)


@st.composite
def azure_rows(draw):
    rows = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.integers(0, 29))
        if kind == 0:
            rows.append(("raw", draw(st.text(alphabet='0123456789,:- ."x', max_size=30))))
            continue
        y, mo, d, h, mi, s, frac = draw(azure_time)
        stamp = f"{y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}.{frac:07d}"
        rows.append(("row", stamp, draw(azure_cell), draw(azure_cell)))
    return rows


def _azure_expected(rows) -> list[tuple[int, int, int]] | None:
    """Reference parse; None when some row is malformed (a named error is then required)."""
    out = []
    for r in rows:
        if r[0] == "raw":
            if r[1].strip():
                return None
            continue
        _, stamp, p, o = r
        try:
            sec = dt.datetime.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")
            pi, oi = int(p.strip()), int(o.strip())
        except ValueError:
            return None
        if (
            "." in p
            or "e" in p
            or "." in o
            or "e" in o
            or not (1 <= pi <= MAX_TOKENS and 1 <= oi <= MAX_TOKENS)
        ):
            return None
        ns = int((sec - _EPOCH).total_seconds()) * 10**9 + int(stamp[20:]) * 100
        out.append((ns, pi, oi))
    if not out:
        return None  # a header alone: refused as "a header but no requests"
    ts = [e[0] for e in out]
    if max(ts) - min(ts) > MAX_SPAN_NS or any(abs(x) >= 2**63 for x in ts):
        return None
    return out


@FUZZ
@given(azure_rows())
def test_azure_fuzz(rows) -> None:
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for r in rows:
        lines.append(r[1] if r[0] == "raw" else ",".join(r[1:]))
    expected = _azure_expected(rows)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "a.csv"
        path.write_text("\n".join(lines) + "\n")
        rs, err = attempt(load_azure, path)
    if err is not None:
        assert str(err).startswith(str(path))
        assert expected is None, f"refused a good file ({err}): {lines}"
        event("named error")
        return
    assert expected is not None, f"accepted a malformed file: {lines}"
    event("loaded")
    _check_result(rs, expected)


# --- Mooncake JSON Lines -----------------------------------------------------------------

times = mostly(
    st.one_of(st.integers(0, 10**7), st.floats(0, 1e7, allow_nan=False)),
    st.sampled_from([1e13, 1e12, -1, 2**63, 1e300]),
)
json_value = st.one_of(ints, st.floats(allow_nan=False, allow_infinity=False), junk_scalar)
good_or_junk = mostly(ints, json_value)


@st.composite
def mooncake_lines(draw):
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.integers(0, 40))
        if kind == 0:
            lines.append(draw(st.sampled_from(["", "{", "[1]", "null", "{}", '{"timestamp": }'])))
            continue
        obj = {
            "timestamp": draw(mostly(times, json_value)),
            "input_length": draw(good_or_junk),
            "output_length": draw(mostly(st.integers(1, 900), json_value)),
        }
        if kind == 1:
            del obj[draw(st.sampled_from(sorted(obj)))]
        if draw(st.booleans()):
            obj["hash_ids"] = draw(st.one_of(st.lists(st.integers(0, 9), max_size=3), junk_scalar))
        lines.append(json.dumps(obj))
    return lines


def _int_token(v: object) -> int | None:
    if (
        isinstance(v, bool)
        or not isinstance(v, int | float)
        or v != v
        or v in (float("inf"), float("-inf"))
    ):
        return None
    if v != int(v) or not 1 <= v <= MAX_TOKENS:
        return None
    return int(v)


def _mooncake_expected(lines: list[str]) -> list[tuple[int, int, int]] | None:
    out, t_ms = [], []
    for raw in lines:
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(obj, dict) or any(
            k not in obj for k in ("timestamp", "input_length", "output_length")
        ):
            return None
        t = obj["timestamp"]
        p, o = _int_token(obj["input_length"]), _int_token(obj["output_length"])
        if (
            isinstance(t, bool)
            or not isinstance(t, int | float)
            or not 0 <= t < float("inf")
            or p is None
            or o is None
        ):
            return None
        t_ms.append(float(t))
        out.append((0, p, o))
    if not out or max(t_ms) - min(t_ms) > MAX_SPAN_NS / 1e6:
        return None
    lo = min(t_ms)
    return [(round((t - lo) * 1e6), p, o) for t, (_, p, o) in zip(t_ms, out, strict=True)]


@FUZZ
@given(mooncake_lines())
def test_mooncake_fuzz(lines) -> None:
    expected = _mooncake_expected(lines)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.jsonl"
        path.write_text("\n".join(lines) + "\n")
        rs, err = attempt(load_mooncake, path)
    if err is not None:
        assert str(err).startswith(str(path))
        assert expected is None, f"refused a good file ({err}): {lines}"
        event("named error")
        return
    assert expected is not None, f"accepted a malformed file: {lines}"
    event("loaded")
    assert len(rs) == len(expected)
    got = sorted(
        zip(rs.arrival_ns.tolist(), rs.prompt_len.tolist(), rs.output_len.tolist(), strict=True)
    )
    want = sorted(expected)
    assert [g[1:] for g in got] == [w[1:] for w in want]
    for g, w in zip(got, want, strict=True):  # float ms → ns: within rounding
        assert abs(g[0] - w[0]) <= max(1, abs(w[0]) * 1e-12)
    assert np.all(np.diff(rs.arrival_ns) >= 0)
    assert rs.arrival_ns.min() == 0


# --- augmented JSON Lines ----------------------------------------------------------------

seconds = mostly(st.floats(0, 100, allow_nan=False), st.sampled_from([1e10, 1e13, -1.0, 0]))


@st.composite
def segment(draw, last: bool):
    seg = {"decode_tokens": draw(mostly(st.integers(1, 50), json_value))}
    if not last or draw(st.integers(0, 30)) == 0:
        seg["call_s"] = draw(mostly(seconds, json_value))
        seg["return_tokens"] = draw(mostly(st.integers(0, 40), json_value))
    return seg


@st.composite
def augmented_lines(draw):
    with_arrivals = draw(st.booleans())
    lines, t = [], 0.0
    for _ in range(draw(st.integers(1, 6))):
        n = draw(st.integers(1, 3))
        obj: dict[str, object] = {
            "prompt_tokens": draw(mostly(st.integers(1, 500), json_value)),
            "segments": [draw(segment(i == n - 1)) for i in range(n)],
        }
        if draw(st.integers(0, 20)) == 0:
            obj["tool"] = draw(st.sampled_from(["qa", "calculator", "nope"]))
        if with_arrivals:
            t += draw(st.floats(0, 10, allow_nan=False))
            obj["arrival_s"] = draw(mostly(st.just(t), st.sampled_from([1e13, -1.0, t - 1])))
        lines.append(json.dumps(obj))
    return lines


@FUZZ
@given(augmented_lines())
def test_augmented_fuzz(lines) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "aug.jsonl"
        path.write_text("\n".join(lines) + "\n")
        rng = np.random.default_rng(0)
        rs, err = attempt(load_augmented_jsonl, path, rng, rate=2.0, num_requests=None)
    if err is not None:
        assert str(err).startswith(str(path))
        event("named error")
        return
    event("loaded")
    objs = [json.loads(x) for x in lines]
    assert len(rs) == len(objs)
    t = rs.arrival_ns
    assert np.all(np.diff(t) >= 0)
    assert t[0] >= 0
    assert np.all(rs.prompt_len >= 1)
    assert np.all(rs.output_len >= 1)
    for key in ("call_ns", "return_tokens"):
        if key in rs.extra:
            assert np.all(rs.extra[key] >= 0)
    if "arrival_s" in objs[0]:
        want = [round((o["arrival_s"] - objs[0]["arrival_s"]) * 1e9) for o in objs]
        assert np.all(np.abs(t - np.array(want)) <= 1)


# --- ServeGen tarball members ------------------------------------------------------------

WINDOW_S = 600.0
sg_start = mostly(
    st.integers(0, 4).map(lambda k: f"{k * WINDOW_S:g}"),
    st.sampled_from(["1e12", "1e300", "2e9", "-1", "x", "", "nan"]),
    one_in=8,
)
sg_rate = mostly(
    st.floats(0, 3, allow_nan=False).map(lambda r: f"{r:.6g}"),
    st.sampled_from(["-1", "inf", "nan", "1e9", "x", ""]),
)
sg_pattern = mostly(st.sampled_from(["Gamma", "Weibull", ""]), st.sampled_from(["Lognorm", "1"]))
sg_shape = mostly(
    st.floats(0.01, 20, allow_nan=False).map(lambda k: f"{k:.6g}"),
    st.sampled_from(["0", "1e-9", "-1", "", "x"]),
)
sg_any = mostly(st.floats(0, 50, allow_nan=False).map(lambda x: f"{x:.4g}"), st.just("x"))


@st.composite
def servegen_members(draw):
    members = {}
    for client in draw(st.sets(st.integers(0, 99), min_size=1, max_size=3)):
        rows = [
            ",".join(
                [
                    draw(sg_start),
                    draw(sg_rate),
                    draw(sg_any),
                    draw(sg_pattern),
                    draw(sg_shape),
                    draw(sg_any),
                ]
            )
            for _ in range(draw(st.integers(1, 4)))
        ]
        members[client] = "\n".join(rows) + "\n"
    return members


def _servegen_files(d: Path, members: dict[int, str]) -> Path:
    import gzip
    import io
    import tarfile

    q = "model,field,quantile,value\n" + "".join(
        f"m-fuzz,{f},{p},{v}\n"
        for f in ("input_tokens", "output_tokens")
        for p, v in ((0.0, 1), (0.5, 40), (1.0, 900))
    )
    (d / "servegen_length_quantiles.csv.gz").write_bytes(gzip.compress(q.encode()))
    path = d / "servegen_language_m-fuzz_trace_csv.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for client, text in members.items():
            info = tarfile.TarInfo(f"language/m-fuzz/chunk-{client}-trace.csv")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return path


@settings(
    max_examples=max(EXAMPLES // 2, 1), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(servegen_members())
def test_servegen_fuzz(members) -> None:
    from tidal.workload.servegen import load_servegen, read_servegen

    with tempfile.TemporaryDirectory() as d:
        path = _servegen_files(Path(d), members)
        table, err = attempt(read_servegen, path)
        if err is None:
            rng = np.random.default_rng(0)
            rs, err = attempt(load_servegen, path, rng, max_expected=50_000)
    if err is not None:
        assert (
            err.field == "rate_scale"
            if isinstance(err, ConfigError)
            else str(err).startswith(str(path))
        )
        event(f"named error ({type(err).__name__})")
        return
    event("loaded")
    t, client = rs.arrival_ns, rs.extra["client"]
    assert np.all(np.diff(t) >= 0)
    end_ns = (table.window_start_s.max() - table.origin_s + table.window_s) * 1e9
    assert np.all((t >= 0) & (t < end_ns))
    assert np.all(rs.prompt_len >= 1)
    assert np.all((rs.output_len >= 1) & (rs.output_len <= 900))
    assert set(client.tolist()) <= set(members)
    # every arrival lies in an active window of its own client
    lo = (table.window_start_s - table.origin_s) * 1e9
    active = (table.kind > 0) & (table.rate > 0)
    for ti, ci in zip(t.tolist(), client.tolist(), strict=True):
        mine = active & (table.client == ci)
        assert np.any(mine & (lo <= ti) & (ti < lo + table.window_s * 1e9)), (ti, ci)


def test_the_reference_limits_are_the_loaders() -> None:
    from tidal.workload import _io

    assert (_io.MAX_SPAN_NS, _io.MAX_TOKENS) == (MAX_SPAN_NS, MAX_TOKENS)
