"""The artifact's multi-model mapping (warmserve.md §3.2) and the ServeGen mix."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import needs_traces
from tidal.workload.multimodel import (
    MixConfig,
    _level_ratio,
    azure_mix,
    power_law_shares,
    read_aggregate_rates,
    servegen_mix,
)
from tidal.workload.traces import load_azure

pytestmark = needs_traces

SERVICE = [(35.0, 15.0), (35.0, 15.0), (70.0, 20.0), (100.0, 30.0)]


def test_power_law_shares_match_the_spec_examples():
    np.testing.assert_allclose(power_law_shares(4, 2.0), [0.702, 0.176, 0.078, 0.044], atol=1e-3)
    np.testing.assert_allclose(power_law_shares(4, 1.0), [0.48, 0.24, 0.16, 0.12], atol=1e-2)
    np.testing.assert_allclose(power_law_shares(4, 0.0), [0.25] * 4)


def test_azure_mix_splits_resamples_caps_and_replays():
    trace = load_azure("azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz")
    cfg = MixConfig(rate=4.0, alpha=1.0, replay_s=1200)
    w = azure_mix(trace, SERVICE, cfg, np.random.default_rng(0), read_aggregate_rates())
    rs = w.requests
    assert np.all(np.diff(rs.arrival_ns) >= 0)
    assert rs.arrival_ns.max() < 1200e9
    assert rs.prompt_len.max() <= 1024
    assert rs.output_len.min() >= 3
    assert rs.output_len.max() <= 1023
    # over the whole hour every model has exactly n_i = ⌊rate · 3600 · share_i⌋ requests
    whole = azure_mix(
        trace, SERVICE, cfg.model_copy(update={"replay_s": 3600.0}), np.random.default_rng(0)
    )
    counts = np.bincount(whole.requests.extra["model"], minlength=4)
    np.testing.assert_array_equal(counts, (4.0 * 3600 * power_law_shares(4, 1.0)).astype(int))
    assert whole.prior_avg is None  # no ServeGen levels given: no prior
    assert 0.2 < len(rs) / len(whole.requests) < 0.45
    assert len(w.prior_avg) == 4
    for avg, peak in zip(w.prior_avg, w.prior_peak, strict=True):
        assert len(avg) == 1200 // 300 + 1
        assert np.all(peak >= avg)
        assert np.all(avg > 0)
    # Little's law: the prior's average load ≈ rate_i × mean service time_i × the mean
    # ServeGen level of the earlier days relative to the replayed one
    out = np.minimum(np.maximum(trace.output_len, 3), 1023)
    rates = read_aggregate_rates()
    for i, (pre, dec) in enumerate(SERVICE):
        little = 4.0 * power_law_shares(4, 1.0)[i] * (pre + dec * out.mean()) / 1000
        pool = rates[cfg.pools[i % len(cfg.pools)]]
        day = 3 + i
        levels = [_level_ratio(pool, d, day, cfg, 5) for d in range(day)]
        level = np.mean([x for x in levels if x is not None], axis=0)
        np.testing.assert_allclose(w.prior_avg[i], little * level, rtol=0.35)


@pytest.mark.parametrize("days", [1.0, 2.5])
def test_servegen_mix_follows_the_pool_rate(days):
    cfg = MixConfig(kind="servegen", rate=2.0, alpha=0.0, days=days, pools=["m-small"])
    w = servegen_mix(cfg, 2, np.random.default_rng(1))
    rs = w.requests
    assert rs.arrival_ns.max() < days * 86400e9
    mean_rate = len(rs) / (days * 86400)
    assert mean_rate == pytest.approx(2.0, rel=0.1)
    # the daily cycle of m-small survives: busiest hour well above the quietest
    hours = np.bincount((rs.arrival_ns // 3_600_000_000_000 % 24).astype(int), minlength=24)
    assert hours.max() > 1.8 * hours.min()
