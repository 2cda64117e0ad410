"""The machine-noise measurements of ``calibrate`` and ``fidelity`` (:mod:`tidal.runtime.noise`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tidal.core.clock import resolve_clock
from tidal.runtime import noise
from tidal.runtime.noise import (
    LIMITS,
    LoadMeter,
    fidelity_warnings,
    noise_warnings,
    repeat_spread,
)


def _s(point: str, rep: int, seconds: float) -> SimpleNamespace:
    return SimpleNamespace(point=point, repeat=rep, seconds=seconds)


def test_repeat_spread_is_the_median_relative_range_of_pass_means():
    # point a: pass means 1.0, 1.1, 1.2 -> (1.2 - 1.0) / 1.1; point b: 2.0, 2.0 -> 0
    # point c: one pass only, skipped; the median of the two spreads is their mean
    samples = [_s("a", 0, 0.9), _s("a", 0, 1.1), _s("a", 1, 1.1), _s("a", 2, 1.2)]
    samples += [_s("b", 0, 2.0), _s("b", 1, 2.0), _s("c", 0, 5.0)]
    assert repeat_spread(samples) == pytest.approx((0.2 / 1.1 + 0.0) / 2)
    assert repeat_spread([_s("a", 0, 1.0), _s("a", 0, 3.0)]) is None


def test_load_meter_subtracts_its_own_cpu_time(monkeypatch):
    hz = noise.os.sysconf("SC_CLK_TCK")
    stats = iter([(0, 0, 0), (3 * hz, hz // 10, 4 * hz)])  # 3 CPU-s busy, 0.1 s stolen
    clocks = iter([0.0, 2.0])  # 2 s of wall time
    cpu = iter([10.0, 11.0])  # this process used 1 CPU-s of the 3
    monkeypatch.setattr(noise, "_proc_stat", lambda: next(stats))
    monkeypatch.setattr(noise.time, "monotonic", lambda: next(clocks))
    monkeypatch.setattr(noise.time, "process_time", lambda: next(cpu))
    monkeypatch.setattr(noise.os, "cpu_count", lambda: 2)
    load = LoadMeter().start().read()
    assert load["others_share"] == pytest.approx((3 - 1) / (2 * 2))  # 2 CPU-s of 4
    assert load["steal_share"] == pytest.approx((hz // 10) / (4 * hz))
    assert load["cpus"] == 2


def test_load_meter_without_proc_stat(monkeypatch):
    monkeypatch.setattr(noise, "_proc_stat", lambda: None)
    load = LoadMeter().start().read()
    assert load["others_share"] is None
    assert load["steal_share"] is None
    assert noise_warnings(load) == []


def test_noise_warnings_fire_beyond_the_limits_only():
    quiet = {"cpus": 2, "others_share": 0.1, "steal_share": 0.0, "loadavg_1m": 1.0}
    assert noise_warnings(quiet, spread=0.02, drift=-0.03) == []
    busy = {**quiet, "others_share": 0.6, "loadavg_1m": 7.5}
    (only,) = noise_warnings(busy)
    assert "60% of the 2 CPUs" in only
    assert "7.5" in only
    found = noise_warnings(quiet, spread=LIMITS["spread"] * 2, drift=-0.2)
    assert len(found) == 2
    assert "10.0%" in found[0]
    assert "-20.0%" in found[1]


def test_fidelity_warnings_name_the_noise_floor_and_the_drift():
    quiet = {"cpus": 2, "others_share": 0.0, "steal_share": 0.0}
    floor = {"ttft_median_rel_error": 0.09, "tpot_median_rel_error": 0.04}
    (f,) = fidelity_warnings(quiet, floor, [(1.0, 1.02)])
    assert "9.0% TTFT" in f
    (d,) = fidelity_warnings(quiet, None, [(1.0, 1.02), (1.0, 0.9)])
    assert "10.0%" in d
    low = {"ttft_median_rel_error": 0.03, "tpot_median_rel_error": 0.02}
    assert fidelity_warnings(quiet, low, [(1.0, 1.01)]) == []


def test_auto_clock_is_cpu_time_on_a_cpu_only():
    assert resolve_clock("auto", "cpu") == "cpu"
    assert resolve_clock("auto", "cuda") == "wall"
    assert resolve_clock("wall", "cpu") == "wall"
    with pytest.raises(ValueError, match="unknown clock"):
        resolve_clock("gpu", "cpu")
