"""Length distributions: ranges, means, joint empirical sampling, errors."""

from __future__ import annotations

import numpy as np
import pytest

from tidal.core.errors import ConfigError, TraceError
from tidal.workload.lengths import (
    length_table,
    quantile_lengths,
    sample_lengths,
    uniform_bounds,
)

from .helpers import write

N = 100_000


def _sample(dist: str, prompt: int = 512, output: int = 128, **kw: float):
    return sample_lengths(
        dist, N, np.random.default_rng(11), prompt_len=prompt, output_len=output, **kw
    )


def test_fixed() -> None:
    p, o = _sample("fixed")
    assert p.dtype == np.int64
    assert o.dtype == np.int64
    assert np.all(p == 512)
    assert np.all(o == 128)


@pytest.mark.parametrize(
    ("length", "jitter", "bounds"),
    [
        (100, 0.5, (50, 150)),
        (5, 0.5, (3, 8)),  # 2.5 and 7.5 round half up
        (1, 0.9, (1, 2)),  # floored at 1
        (7, 0.0, (7, 7)),
    ],
)
def test_uniform_bounds(length: int, jitter: float, bounds: tuple[int, int]) -> None:
    assert uniform_bounds(length, jitter) == bounds


def test_uniform_range_and_mean() -> None:
    p, o = _sample("uniform", jitter=0.5)
    assert p.min() == 256
    assert p.max() == 768
    assert o.min() == 64
    assert o.max() == 192
    assert p.mean() == pytest.approx(512, rel=0.01)
    assert o.mean() == pytest.approx(128, rel=0.01)


def test_geometric_mean_and_support() -> None:
    p, o = _sample("geometric", prompt=200, output=1)
    assert p.min() >= 1
    assert p.mean() == pytest.approx(200, rel=0.02)
    assert np.all(o == 1)


def test_lognormal_median_and_mean() -> None:
    p, _ = _sample("lognormal", prompt=1000, sigma=0.5)
    assert p.min() >= 1
    assert np.median(p) == pytest.approx(1000, rel=0.02)
    assert p.mean() == pytest.approx(1000 * np.exp(0.5**2 / 2), rel=0.02)


def test_empirical_named_is_joint(traces) -> None:
    p, o = _sample("empirical:sharegpt")
    table_p, table_o = length_table("sharegpt")
    assert len(table_p) == 30_731
    assert p.mean() == pytest.approx(table_p.mean(), rel=0.02)
    assert o.mean() == pytest.approx(table_o.mean(), rel=0.02)
    rows = set(zip(table_p.tolist(), table_o.tolist(), strict=True))
    assert all(pair in rows for pair in zip(p[:2000].tolist(), o[:2000].tolist(), strict=True))


@pytest.mark.parametrize(
    ("name", "rows", "prompt_mean", "output_mean"),
    [
        ("sharegpt", 30_731, 2340, 439),
        ("arxiv", 28_257, 2588, 291),
        ("bwb", 33_768, 1067, 1613),
    ],
)
def test_empirical_tables_match_readme(
    traces, name: str, rows: int, prompt_mean: float, output_mean: float
) -> None:
    p, o = length_table(name)
    assert len(p) == rows
    assert abs(p.mean() - prompt_mean) <= 0.5
    assert abs(o.mean() - output_mean) <= 0.5


def test_empirical_path(tmp_path) -> None:
    f = write(tmp_path / "lens.csv.gz", "num_prefill_tokens,num_decode_tokens\n3,4\n30,40\n")
    p, o = sample_lengths(
        f"empirical:{f}", 1000, np.random.default_rng(0), prompt_len=1, output_len=1
    )
    assert set(zip(p.tolist(), o.tolist(), strict=True)) == {(3, 4), (30, 40)}


def test_empirical_malformed_names_line_and_column(tmp_path) -> None:
    f = write(tmp_path / "bad.csv", "num_prefill_tokens,num_decode_tokens\n3,4\n5,x\n")
    with pytest.raises(TraceError, match=r"line 3, column 'num_decode_tokens'"):
        sample_lengths(f"empirical:{f}", 10, np.random.default_rng(0), prompt_len=1, output_len=1)


def test_unknown_distribution() -> None:
    with pytest.raises(ConfigError, match="length_dist"):
        _sample("zipf")
    with pytest.raises(ConfigError, match="length_dist"):
        _sample("empirical:no_such_file.csv")


def test_quantile_lengths_interpolate() -> None:
    q = np.array([0.01, 0.5, 0.99])
    v = np.array([10.0, 100.0, 1000.0])
    x = quantile_lengths(q, v, N, np.random.default_rng(0))
    assert x.min() == 10
    assert x.max() == 1000
    assert np.median(x) == pytest.approx(100, rel=0.02)
    # Between 0.01 and 0.5 the CDF is linear from 10 to 100: P(x ≤ 55) = 0.255.
    assert np.mean(x <= 55) == pytest.approx(0.255, abs=0.01)


def test_deterministic() -> None:
    a = _sample("lognormal")
    b = _sample("lognormal")
    assert np.array_equal(a[0], b[0])
    assert np.array_equal(a[1], b[1])


def test_uniform_below_is_the_benchmark_clients_range() -> None:
    """``benchmark_serving.py --random-range-ratio 0.8`` (InferenceX): uniform on
    [⌊0.8·L⌋, L], both ends drawn, mean ≈ 0.9·L."""
    p, o = _sample("uniform-below", prompt=1000, output=129, jitter=0.2)
    assert (p.min(), p.max()) == (800, 1000)
    assert (o.min(), o.max()) == (103, 129)  # ⌊0.8 · 129⌋ = 103
    assert p.mean() == pytest.approx(900, rel=0.01)
    q, _ = _sample("uniform-below", prompt=1, output=1, jitter=0.9)
    assert (q == 1).all()  # floored at 1
