"""Seeded accepted lengths: the closed form met by the draws, and draws that depend on
(seed, request, step) only."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal.engine.acceptance import (
    BLOCK_REQUESTS,
    AcceptanceModel,
    accepted_per_position,
    uniforms,
)
from tidal.engine.spec_config import expected_tokens, expected_tokens_uniform

Z = 5.0
"""Draws per cell: enough that the 1 % band is Z standard errors of the mean wide."""


def draws_needed(alphas: list[float], rel: float = 0.01, z: float = Z) -> int:
    """n with z·σ(a)/√n ≤ rel·E[a], σ from the exact distribution P(a ≥ i + 1) = Π_{m≤i} α_m."""
    surv = [1.0, *np.cumprod(alphas)]
    mean = sum(surv)
    second = sum((2 * i + 1) * s for i, s in enumerate(surv))  # E[a²] = Σ (2i+1)·P(a > i)
    var = second - mean * mean
    return math.ceil((z * math.sqrt(var) / (rel * mean)) ** 2)


def simulated_mean(alphas: list[float], seed: int = 7, requests: int = 200) -> float:
    model = AcceptanceModel(alphas, seed)
    steps = -(-draws_needed(alphas) // requests)
    total = sum(int(model.lengths(rid, 0, steps).sum()) for rid in range(requests))
    return total / (requests * steps)


@pytest.mark.parametrize("alpha", [0.5, 0.7, 0.8, 0.9])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_mean_tokens_per_step_meets_the_closed_form(alpha: float, k: int) -> None:
    mean = simulated_mean([alpha] * k)
    assert mean == pytest.approx(expected_tokens_uniform(alpha, k), rel=0.01)


@pytest.mark.parametrize("alphas", [[0.9, 0.7, 0.5], [0.85, 0.6], [0.6, 0.9, 0.8, 0.4, 0.7]])
def test_per_position_rates_meet_the_sum(alphas: list[float]) -> None:
    assert simulated_mean(alphas) == pytest.approx(expected_tokens(alphas), rel=0.01)
    # each position's acceptance frequency is its survival probability Π α_m
    model = AcceptanceModel(alphas, 3)
    n = draws_needed(alphas)
    per_pos = accepted_per_position(model.lengths(11, 0, n), len(alphas)) / n
    np.testing.assert_allclose(per_pos, np.cumprod(alphas), atol=0.01)


def test_sample_size_is_derived_not_guessed() -> None:
    # α = 0.5, k = 1: a ∈ {1, 2} equally likely, σ = 0.5, E = 1.5 → (5·0.5/0.015)² ≈ 27,778
    assert draws_needed([0.5]) == math.ceil((5 * 0.5 / 0.015) ** 2)


@given(st.integers(0, 2**63 - 1), st.integers(0, 10**9), st.integers(0, 500), st.integers(1, 60))
def test_draws_are_a_function_of_seed_request_and_step(
    seed: int, rid: int, j0: int, count: int
) -> None:
    whole = uniforms(seed, rid, 0, j0 + count)
    np.testing.assert_array_equal(whole[j0:], uniforms(seed, rid, j0, count))
    assert ((whole >= 0) & (whole < 1)).all()
    other = uniforms(seed, rid + 1, 0, j0 + count)
    assert not np.array_equal(whole, other)


@given(
    st.integers(1, 5000),
    st.sampled_from([0, 0, 1, 300]),
    st.integers(1, 8),
    st.floats(0.0, 1.0),
    st.integers(0, 3000),
)
def test_lengths_until_clips_the_last_step(
    left: int, j0: int, k: int, alpha: float, rid: int
) -> None:
    """Also the block path (j0 = 0: draws of 256 requests at once) gives the values of the
    request's own draws."""
    model = AcceptanceModel([alpha] * k, 99)
    a, cum = model.draw_until(rid, j0, left)
    np.testing.assert_array_equal(cum, np.concatenate([[0], np.cumsum(a)]))
    assert int(a.sum()) == left
    assert (a >= 1).all()
    assert (a <= k + 1).all()
    raw = model.lengths(rid, j0, len(a))
    np.testing.assert_array_equal(a[:-1], raw[:-1])  # only the last one is clipped
    assert a[-1] <= raw[-1]
    again = model.lengths_until(rid, j0, left)  # the cached block is not modified
    np.testing.assert_array_equal(a, again)


def test_extreme_rates() -> None:
    assert (AcceptanceModel([0.0] * 3, 1).lengths(0, 0, 100) == 1).all()
    assert (AcceptanceModel([1.0] * 3, 1).lengths(0, 0, 100) == 4).all()



@settings(max_examples=15, deadline=None)
@given(
    lefts=st.lists(st.integers(1, 3000), min_size=20, max_size=40),
    k=st.integers(1, 10),
    alpha=st.floats(0.0, 1.0),
)
def test_resized_blocks_draw_the_requests_own_values(lefts, k, alpha) -> None:
    """After 16 first joins the next block is sized by their needs (shorter or longer rows
    than the first block's; k > 8 counts by binary search): every join still gets the values
    of the request's own draws, the row reaches ``left`` exactly at ``last``, and the views a
    join returned are not modified by later joins."""
    model = AcceptanceModel([alpha] * k, 5)
    seen = []
    for i, left in enumerate(lefts):
        rid = i if i < 16 else BLOCK_REQUESTS * (i - 15) + i  # 16 in block 0, then one a block
        a, cum, last = model.draw_row(rid, 0, left)
        assert int(cum[last - 1]) < left <= int(cum[last])
        np.testing.assert_array_equal(a[:last], model.lengths(rid, 0, last))
        np.testing.assert_array_equal(cum[: last + 1], np.concatenate([[0], np.cumsum(a[:last])]))
        seen.append((rid, a[:last], last))
    for rid, a, last in seen:
        np.testing.assert_array_equal(a, model.lengths(rid, 0, last))
    assert model._block_steps % 64 == 0
    assert 64 <= model._block_steps <= 2048
