"""EB's options in groups (threshold, bound, phase, demand, selector): every flat key of the
configs written before the grouping loads into its group with the same meaning."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

from tidal.batching.eb_options import GROUP_OF, GROUPS, REFERENCE, EBOptions
from tidal.sim.config import load_config


def other_value(group: str, key: str) -> object:
    """A valid value of ``group.key`` other than its default."""
    field = GROUPS[group].model_fields[key]
    default = field.default
    args = typing.get_args(field.annotation)
    if typing.get_origin(field.annotation) is typing.Literal:
        return next(a for a in args if a != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, str) and bool in args:  # bool | Literal[...], a literal default
        return True
    if default is None:
        return 2 if int in args else 0.5
    for factor in (0.5, 1.25):
        value = type(default)(default * factor) if default else type(default)(1)
        try:
            GROUPS[group](**{key: value})
        except ValidationError:
            continue
        return value
    raise AssertionError(f"no other valid value of {key}")


KNOBS = sorted(GROUP_OF.items())


@pytest.mark.parametrize(("key", "group"), KNOBS, ids=[k for k, _ in KNOBS])
def test_a_flat_key_is_its_grouped_key(key, group):
    value = other_value(group, key)
    flat = EBOptions(**{key: value})
    assert flat == EBOptions(**{group: {key: value}})
    assert getattr(getattr(flat, group), key) == value
    assert flat != EBOptions()


def test_every_knob_has_one_group():
    names = [k for m in GROUPS.values() for k in m.model_fields]
    assert len(names) == len(set(names)) == len(GROUP_OF)
    assert len(GROUP_OF) >= 38
    assert max(len(m.model_fields) for m in GROUPS.values()) <= 11


def test_an_old_yaml_loads_with_the_same_meaning():
    old = {
        "n_bound": "clt",
        "delta": 1e-5,
        "sticky": 2.0,
        "surge_n": "ema",
        "theta_floor": 0.7,
        "theta_max": 0.75,
        "mb_memory_safe": True,
    }
    data = {"workload": {"num_requests": 1, "rate": 1}, "scheduler": {"eb": old}}
    eb = load_config(data).scheduler.eb
    assert eb.bound.n_bound == "clt"
    assert (eb.selector.delta, eb.selector.sticky, eb.demand.surge_n) == (1e-5, 2.0, "ema")
    assert (eb.threshold.theta_floor, eb.threshold.theta_max) == (0.7, 0.75)
    assert eb.selector.mb_cap == "n_hat"  # mb_memory_safe: true meant mb_cap: n_hat
    assert "mb_memory_safe" not in eb.model_dump()


def test_mb_memory_safe_false_leaves_mb_cap_alone():
    assert EBOptions(mb_memory_safe=False, mb_cap="none").selector.mb_cap == "none"
    assert EBOptions(mb_memory_safe=True, mb_cap="none").selector.mb_cap == "n_hat"
    with pytest.raises(ValidationError, match="mb_memory_safe"):
        EBOptions(mb_memory_safe="yes")


def test_the_reference_preset_fills_only_what_is_not_given():
    ref = EBOptions(preset="reference", delta=2e-6, bound={"cold_reserve": 0.25})
    assert ref.selector.delta == 2e-6
    assert ref.bound.cold_reserve == 0.25
    assert ref.bound.n_bound == REFERENCE["bound"]["n_bound"]
    assert ref.selector.crossover_lhs == REFERENCE["selector"]["crossover_lhs"]
    flat = EBOptions(**{k: v for g in REFERENCE.values() for k, v in g.items()})
    assert EBOptions(preset="reference").model_dump(exclude={"preset"}) == flat.model_dump(
        exclude={"preset"}
    )


def test_a_key_given_flat_and_grouped_is_refused():
    with pytest.raises(ValidationError, match="delta: given both flat and under selector"):
        EBOptions(delta=1e-6, selector={"delta": 1e-5})


def test_an_unknown_key_is_named():
    with pytest.raises(ValidationError, match="deltaa"):
        EBOptions(deltaa=1.0)
    with pytest.raises(ValidationError, match="theta_floor"):
        EBOptions(theta_floor=0.9, theta_max=0.8)


def test_replace_changes_only_the_knobs_given():
    base = EBOptions(preset="reference", sticky=2.0)
    new = base.replace(delta=0.5, n_bound="forecast")
    assert (new.selector.delta, new.bound.n_bound, new.selector.sticky) == (0.5, "forecast", 2.0)
    assert new.selector.mb_cap == base.selector.mb_cap == "none"


def test_prefer_throughput_is_mb_mode_at_n_max():
    assert EBOptions().bound.prefer == "no-preemption"
    assert EBOptions().selector.mb_cap == "forecast"
    assert EBOptions(prefer="throughput").selector.mb_cap == "none"
    assert EBOptions(prefer="throughput", mb_cap="none").selector.mb_cap == "none"
    assert EBOptions(preset="reference", prefer="throughput").selector.mb_cap == "none"
    with pytest.raises(ValueError, match="prefer: throughput runs MB mode at mb_cap: none"):
        EBOptions(prefer="throughput", mb_cap="forecast")
    # a copy keeps the resolved cap; replacing the preference back needs no cap given
    opts = EBOptions(prefer="throughput")
    assert opts.replace(delta=1e-5).selector.mb_cap == "none"
    assert opts.replace(prefer="no-preemption").selector.mb_cap == "none"
