"""``bench/interp_holdout.py``: every other grid point removed, the table rebuilt from the rest
and compared at the removed points — on Tidal's ``Curve`` and the measured ``_Table2D``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import interp_holdout as ih


def test_kept_values_are_the_even_indices_and_the_last() -> None:
    assert ih.kept_values([1, 2, 4, 8, 16, 32]) == {1, 4, 16, 32}
    assert ih.kept_values([3, 1, 2, 2]) == {1, 3}
    # a grid of tile edges (m, m + 1) thins by pairs
    assert ih.kept_values([32, 33, 48, 49, 64, 65, 80], pairs=True) == {32, 33, 64, 65, 80}


def test_a_linear_function_is_recovered_exactly_by_both_builders() -> None:
    pts1 = [((float(x),), 3.0 + 2.0 * x) for x in (1, 2, 4, 8, 16, 32, 64)]
    assert max(ih.holdout(pts1, ih.curve_builder, 0)) < 1e-12
    pts2 = [((float(r), float(c)), 1.0 + r + 2 * c) for r in (1, 2, 4, 8, 16) for c in (16, 32, 64)]
    for axis in (0, 1):
        errs = ih.holdout(pts2, ih.table2d_builder, axis)
        assert errs
        assert max(errs) < 1e-12
    assert len(ih.holdout(pts2, ih.table2d_builder, 0)) == 2 * 3  # rows 2 and 8, all columns


def test_the_error_at_a_removed_point_is_the_chord_error() -> None:
    """y = x² on 1, 2, 3, 4, 5: points 2 and 4 removed; the chords through (1, 1), (3, 9) and
    (3, 9), (5, 25) give 5 and 17 where 4 and 16 were measured."""
    pts = [((float(x),), float(x * x)) for x in (1, 2, 3, 4, 5)]
    assert sorted(ih.holdout(pts, ih.curve_builder, 0)) == pytest.approx([1 / 16, 0.25])
    # a power law is exact in log-log
    assert max(ih.holdout(pts, ih.loglog_curve_builder, 0)) < 1e-12


def test_duplicates_take_their_median_and_short_axes_are_skipped() -> None:
    assert ih.dedupe([((1.0,), 3.0), ((1.0,), 1.0), ((1.0,), 2.0)]) == [((1.0,), 2.0)]
    assert ih.holdout([((1.0,), 1.0), ((2.0,), 2.0)], ih.curve_builder, 0) == []


def test_the_bundled_profiles_meet_the_acceptance() -> None:
    """The Vidur tables the measured model interpolates: median |error| ≤ 3 % per family."""
    res = ih.evaluate(ih.vidur_tables(), "table")
    assert res
    assert all(v["median"] <= 0.03 for v in res.values())
