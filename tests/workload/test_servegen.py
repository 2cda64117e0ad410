"""ServeGen: reading the window tables and sampling requests from them."""

from __future__ import annotations

import io
import math
import tarfile
from pathlib import Path

import numpy as np
import pytest

from tidal.core.errors import ConfigError, TraceError
from tidal.workload.servegen import (
    GAMMA,
    WEIBULL,
    ServeGenTable,
    load_servegen,
    read_servegen,
    sample_arrivals,
)

from .helpers import write

M_SMALL = "servegen/servegen_language_m-small_trace_csv.tar.gz"


def _table(kind: int, shape: float, rate: float, windows: int) -> ServeGenTable:
    n = windows
    return ServeGenTable(
        "test",
        None,
        np.zeros(n, np.int64),
        np.arange(n) * 600.0,
        np.full(n, rate),
        np.ones(n),
        np.full(n, kind, np.int8),
        np.full(n, shape),
        600.0,
    )


def _weibull_cv2(k: float) -> float:
    return math.exp(math.lgamma(1 + 2 / k) - 2 * math.lgamma(1 + 1 / k)) - 1


@pytest.mark.parametrize(
    ("kind", "shape"),
    [
        (GAMMA, 1.0),
        (GAMMA, 0.05),
        (GAMMA, 4.0),
        (WEIBULL, 0.3),
        (WEIBULL, 1.5),
    ],
)
def test_count_matches_rate_in_expectation(kind: int, shape: float) -> None:
    """Stationary start: E[count] = rate·T even for very bursty gaps (a renewal process that
    starts with an arrival would overshoot by about (cv² − 1)/2 per window)."""
    rate, windows = 0.05, 4000
    t, client = sample_arrivals(_table(kind, shape, rate, windows), np.random.default_rng(1))
    expected = rate * 600 * windows
    cv2 = 1 / shape if kind == GAMMA else _weibull_cv2(shape)
    sd = math.sqrt(expected * max(cv2, 1.0))
    assert abs(len(t) - expected) < 5 * sd
    assert np.all(np.diff(t) >= 0)
    assert t[-1] < 600 * windows * 1e9
    assert np.all(client == 0)


def test_iat_cv_within_a_busy_window() -> None:
    t, _ = sample_arrivals(_table(GAMMA, 0.25, 50.0, 10), np.random.default_rng(2))
    gaps = np.diff(t[t < 600e9])
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.1)


def test_real_window_rate(traces: Path) -> None:
    table = read_servegen(traces / M_SMALL)
    sel = (table.window_start_s >= 72000) & (table.window_start_s < 73800) & (table.kind > 0)
    expected = float((table.rate[sel] * 600 * 0.02).sum())
    counts = [
        len(
            sample_arrivals(
                table, np.random.default_rng(s), start_s=72000, end_s=73800, rate_scale=0.02
            )[0]
        )
        for s in range(4)
    ]
    assert np.mean(counts) == pytest.approx(expected, rel=0.05)


def test_real_table(traces: Path) -> None:
    table = read_servegen(traces / M_SMALL)
    assert table.model == "m-small"
    assert len(np.unique(table.client)) == 43
    assert len(np.unique(table.window_start_s)) == 2016
    assert table.window_s == 600


def test_load_real_small_window(traces: Path) -> None:
    rs = load_servegen(
        traces / M_SMALL, np.random.default_rng(0), start_s=72000, end_s=72600, rate_scale=0.1
    )
    assert 40_000 < len(rs) < 100_000
    assert rs.arrival_ns.min() >= 0
    assert rs.arrival_ns.max() < 600e9
    assert set(np.unique(rs.extra["client"])) <= set(range(43))
    # Lengths follow the m-small quantiles: p50 input 40, p50 output 3.
    assert np.median(rs.prompt_len) == pytest.approx(40, abs=2)
    assert np.median(rs.output_len) == pytest.approx(3, abs=1)
    assert rs.prompt_len.min() >= 1
    assert rs.output_len.min() >= 1


def test_mm_image_prompt_adds_image_tokens(traces: Path) -> None:
    rs = load_servegen(
        traces / "servegen/servegen_multimodal_mm-image_trace_csv.tar.gz",
        np.random.default_rng(0),
        end_s=3600,
    )
    assert np.median(rs.prompt_len) > 540


def test_refuses_huge_selection(traces: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_servegen(traces / M_SMALL, np.random.default_rng(0))
    text = str(err.value)
    for name in ("rate_scale", "end_s", "max_requests"):
        assert name in text


def test_max_requests_takes_the_first(traces: Path) -> None:
    rs = load_servegen(traces / M_SMALL, np.random.default_rng(0), max_requests=50_000)
    assert len(rs) == 50_000
    assert np.all(np.diff(rs.arrival_ns) >= 0)


def test_max_requests_spans_several_slabs() -> None:
    """Windows of 60 expected requests: 1000 requests need about 17 windows."""
    table = _table(WEIBULL, 0.5, 0.1, 100)
    t, _ = sample_arrivals(table, np.random.default_rng(3), max_requests=1000)
    full, _ = sample_arrivals(table, np.random.default_rng(3))
    assert len(t) == 1000
    assert np.all(np.diff(t) >= 0)
    assert 5 * 600e9 < t[-1] < 60 * 600e9
    assert len(full) > 1000


def test_deterministic(traces: Path) -> None:
    a = load_servegen(traces / M_SMALL, np.random.default_rng(9), end_s=1200, rate_scale=0.01)
    b = load_servegen(traces / M_SMALL, np.random.default_rng(9), end_s=1200, rate_scale=0.01)
    assert np.array_equal(a.arrival_ns, b.arrival_ns)
    assert np.array_equal(a.prompt_len, b.prompt_len)
    assert np.array_equal(a.extra["client"], b.extra["client"])


# --- small hand-made inputs ---------------------------------------------------------------


def _chunks(root: Path, model: str = "m-small") -> Path:
    folder = root / "language" / model
    write(
        folder / "chunk-3-trace.csv",
        "0,1.0,1.0,Gamma,1.0,0.5\n600,0,0,,0,0\n1200,2.0,2.0,Weibull,0.6,0.1\n",
    )
    write(
        folder / "chunk-7-trace.csv",
        "0,0.5,1.0,Gamma,1.0,2.0\n600,1.0,1.0,Gamma,1.0,1.0\n1200,0,0,,0,0\n",
    )
    return folder


def test_directory_and_window(tmp_path: Path, traces: Path) -> None:
    folder = _chunks(tmp_path)
    table = read_servegen(folder)
    assert table.model == "m-small"
    assert sorted(np.unique(table.client).tolist()) == [3, 7]
    rs = load_servegen(folder, np.random.default_rng(0), start_s=300, end_s=1500)
    # Window [300, 1500): client 3 at 1/s for 300 s and 2/s for 300 s; client 7 at 0.5/s for
    # 300 s and 1/s for 600 s: 1650 expected.
    assert abs(len(rs) - 1650) < 5 * math.sqrt(1650 * 4)
    assert rs.arrival_ns.min() >= 0
    assert rs.arrival_ns.max() < 1200e9
    # Re-based to 300 s: [300, 900) is window 600 (only client 7), [900, 1200) is window 1200
    # (only client 3).
    late = rs.arrival_ns >= 900e9
    assert set(np.unique(rs.extra["client"][late]).tolist()) == {3}
    middle = (rs.arrival_ns >= 300e9) & ~late
    assert set(np.unique(rs.extra["client"][middle]).tolist()) == {7}


def test_tar_input(tmp_path: Path, traces: Path) -> None:
    folder = _chunks(tmp_path / "src")
    tar_path = tmp_path / "servegen_language_m-small_trace_csv.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        for f in sorted(folder.iterdir()):
            data = f.read_bytes()
            info = tarfile.TarInfo(f"language/m-small/{f.name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    table = read_servegen(tar_path)
    assert table.model == "m-small"
    assert len(table.rate) == 6


def test_unknown_model(tmp_path: Path, traces: Path) -> None:
    folder = _chunks(tmp_path, model="m-unknown")
    with pytest.raises(ConfigError, match="m-unknown"):
        load_servegen(folder, np.random.default_rng(0))


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("1200,abc,1,Gamma,1,1", "rate"),
        ("1200,1,1,Pareto,1,1", "pattern"),
        ("1200,1,1,Gamma,0,1", "param1"),
        ("1200,-1,1,Gamma,1,1", "rate"),
        ("1200,1,1,Gamma,1", None),
    ],
)
def test_malformed(tmp_path: Path, row: str, column: str | None) -> None:
    f = write(tmp_path / "m-small" / "chunk-1-trace.csv", f"0,1,1,Gamma,1,1\n600,0,0,,0,0\n{row}\n")
    with pytest.raises(TraceError) as err:
        read_servegen(tmp_path / "m-small")
    where = f"{f}, line 3" + (f", column {column!r}" if column else "")
    assert str(err.value).startswith(where + ": ")
