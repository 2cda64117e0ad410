"""The int64 nanosecond clock never wraps, and workload numbers outside their range are named
errors (issue 32 §8 and the workload part of §13).

Before: ``--rate 1e-6 --num-requests 10000`` gave 610 negative arrivals (exit 0); ``--turns 2
--think-time 1e12`` a negative TTFT; ``think_time_s: inf`` silently no think time;
``arrival_cv`` inf or 1e±200 ``ZeroDivisionError``; 2^40 requests ``MemoryError``; ``n`` 2^70
``ValueError``; ``prompt_len`` 2^70 ``OverflowError``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tidal.core.errors import ConfigError
from tidal.workload import _io, config
from tidal.workload.arrivals import arrival_times
from tidal.workload.build import build_workload
from tidal.workload.config import WorkloadConfig


def _build(**kw: object):
    return build_workload(WorkloadConfig(**kw), np.random.default_rng(0))


def test_arrivals_beyond_the_span_are_refused_not_wrapped() -> None:
    with pytest.raises(ConfigError, match=r"workload\.rate: 10000 arrivals .* beyond the"):
        _build(num_requests=10_000, rate=1e-6)
    with pytest.raises(ConfigError, match=r"workload\.rate"):
        _build(num_requests=10, rate=1e-300)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 3000),
    rate=st.floats(1e-9, 1e9, allow_nan=False),
    cv=st.sampled_from([1e-3, 0.5, 1.0, 4.0, 1e3]),
)
def test_arrival_times_are_monotone_and_in_range_or_refused(n, rate, cv) -> None:
    try:
        t = arrival_times(n, rate, cv, np.random.default_rng(1))
    except ConfigError as err:
        field = err.field
        t = None
    if t is None:
        assert field == "workload.rate"
        return
    assert t[0] == 0
    assert np.all(np.diff(t) >= 0)
    assert t[-1] <= _io.MAX_SPAN_NS


def test_think_time_is_bounded_by_the_span() -> None:
    with pytest.raises(ValidationError, match="think_time_s"):
        WorkloadConfig(num_requests=10, rate=1.0, turns=2, think_time_s=1e12)
    with pytest.raises(ValidationError, match="think_time_s"):
        WorkloadConfig(num_requests=10, rate=1.0, turns=2, think_time_s=math.inf)
    # each think time allowed, their sum over a session not
    with pytest.raises(ConfigError, match=r"workload\.think_time_s: .* make a session last"):
        _build(num_requests=200, rate=1.0, turns=100, think_time_s=5e7)
    rs = _build(num_requests=200, rate=1.0, turns=100, think_time_s=5e5)
    assert rs.extra["think_ns"].min() >= 0
    assert int(rs.extra["think_ns"].reshape(2, 100).sum(axis=1).max()) <= _io.MAX_SPAN_NS


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("arrival_cv", math.inf),
        ("arrival_cv", 1e200),
        ("arrival_cv", 1e-200),
        ("arrival_cv", math.nan),
        ("num_requests", 2**40),
        ("n", 2**70),
        ("prompt_len", 2**70),
        ("output_len", 2**40),
        ("hash_block_tokens", 2**70),
        ("shared_prefix_len", 2**70),
    ],
)
def test_a_value_out_of_range_names_its_field(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        WorkloadConfig(**{"num_requests": 10, "rate": 1.0, field: value})


def test_prompts_times_branches_are_bounded() -> None:
    with pytest.raises(ValidationError, match=r"num_requests: .* × n"):
        WorkloadConfig(num_requests=10_000_000, rate=1.0, n=4)


def test_the_extremes_of_arrival_cv_still_sample() -> None:
    for cv in (1e-3, 1e3):
        rs = _build(num_requests=50, rate=10.0, arrival_cv=cv)
        assert np.all(np.diff(rs.arrival_ns) >= 0)


def test_the_config_limits_are_the_loaders() -> None:
    assert config.MAX_TOKENS == _io.MAX_TOKENS
    assert config.MAX_SPAN_S == _io.MAX_SPAN_S
