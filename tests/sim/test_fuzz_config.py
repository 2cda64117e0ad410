"""Fuzzing YAML configs: every generated config is refused with a ConfigError naming the field,
or it is valid, holds its invariants, survives a dump/load round trip, and runs (or is refused
by the run with a ConfigError, e.g. a model that does not fit), never another exception.

Values mix good ones with the kinds that slipped through before: ``true`` for integers,
``nan``/0/negative numbers, strings for numbers, lists and mappings for scalars, what-if GPUs
with zero or negative bandwidth, TP degrees that do not divide the heads.
"""

from __future__ import annotations

import math
import os
from typing import Any

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import get_model
from tidal.sim.config import SimulationConfig, load_config
from tidal.sim.run import run_simulation


def mostly(good: Any, bad: Any, one_in: int = 12) -> Any:
    return st.sampled_from([True] * (one_in - 1) + [False]).flatmap(lambda ok: good if ok else bad)


junk = st.one_of(
    st.booleans(),
    st.none(),
    st.text(max_size=5),
    st.sampled_from([float("nan"), float("inf"), -1, 0, -0.5, 1.5, [1, 2], {"a": 1}, "12"]),
)
GOOD: dict[str, Any] = {
    "model": st.sampled_from(["llama-3.1-8b", "qwen3-8b", "tiny-llama", "mistral-7b", "x"]),
    "gpu": st.sampled_from(
        [
            "h100",
            "h200",
            "l40s",
            "h100@2TBs",
            "h100@0TBs",
            "h100@-3TBs",
            "h100@nanTBs",
            "b200@1e9TBs",
            "q9",
        ]
    ),
    "tp": st.sampled_from([1, 1, 2, 3, 4, 8, 16, 64]),
    "seed": st.integers(0, 2**31),
    "fast_forward": st.booleans(),
    "interference": st.sampled_from([True, False, "auto", "sometimes"]),
    "perf_model": st.sampled_from(["auto", "roofline", "linear", "profile:/nonexistent"]),
}
SCHED = {
    "batching": st.sampled_from(["mb", "eb", "ebplus", "zz"]),
    "ordering": st.sampled_from(["fcfs", "sjf", "zz"]),
    "token_budget": st.integers(1, 16384),
    "max_seqs": st.integers(1, 512),
}
MEMORY = {
    "gpu_memory_utilization": st.floats(0.01, 1.2, allow_nan=False),
    "block_size": st.sampled_from([1, 16, 32]),
    "num_blocks": st.integers(1, 5000),
    "watermark": st.floats(0, 0.99, allow_nan=False),
}
WORKLOAD = {
    "num_requests": st.integers(1, 12),
    "rate": st.one_of(st.floats(0.1, 1e4, allow_nan=False), st.just(float("inf"))),
    "prompt_len": st.integers(1, 3000),
    "output_len": st.integers(1, 200),
    "length_dist": st.sampled_from(["fixed", "uniform", "geometric", "lognormal", "nope"]),
    "arrival_cv": st.floats(0.1, 4, allow_nan=False),
    "max_requests": st.integers(1, 20),
}


def _section(draw: Any, keys: dict[str, Any]) -> dict[str, Any]:
    chosen = draw(st.sets(st.sampled_from(sorted(keys)), max_size=len(keys)))
    return {k: draw(mostly(keys[k], junk)) for k in sorted(chosen)}


@st.composite
def configs(draw: Any) -> dict[str, Any]:
    data = _section(draw, GOOD)
    for name, keys in (("scheduler", SCHED), ("memory", MEMORY), ("workload", WORKLOAD)):
        if name == "workload" or draw(st.booleans()):
            data[name] = _section(draw, keys)
    wl = data["workload"]
    wl.setdefault("num_requests", 4)  # usually a runnable synthetic workload
    wl.setdefault("rate", 5.0)
    if draw(st.integers(0, 15)) == 0:
        data[draw(st.sampled_from(["nonsense", "scheduler"]))] = draw(junk)
    return data


def _walk_ints(model: Any) -> None:
    """Every int field holds an int that is not a bool (strict integers)."""
    from pydantic import BaseModel

    for name, info in type(model).model_fields.items():
        v = getattr(model, name)
        if isinstance(v, BaseModel):
            _walk_ints(v)
        elif info.annotation in (int, int | None) and v is not None:
            assert type(v) is int, (name, v)


def _invariants(cfg: SimulationConfig) -> None:
    _walk_ints(cfg)
    m, g = get_model(cfg.model), get_gpu(cfg.gpu)
    assert m.num_heads % cfg.tp == 0
    kv = m.num_kv_heads
    assert (kv % cfg.tp == 0) if cfg.tp <= kv else (cfg.tp % kv == 0)
    assert 0 < g.mem_bw_tbs < math.inf
    assert cfg.scheduler.token_budget >= cfg.scheduler.max_seqs
    assert 0 < cfg.memory.gpu_memory_utilization <= 1
    assert cfg.workload.rate is None or cfg.workload.rate > 0


def _attempt(fn: Any, *args: Any) -> tuple[Any, ConfigError | None]:
    try:
        return fn(*args), None
    except ConfigError as err:
        return None, err


@settings(
    max_examples=int(os.environ.get("TIDAL_FUZZ_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(configs())
def test_yaml_config_fuzz(data: dict[str, Any]) -> None:
    text = yaml.safe_dump(data)
    cfg, err = _attempt(load_config, yaml.safe_load(text))
    if err is not None:
        assert ":" in str(err)
        event("refused by validation")
        return
    _invariants(cfg)
    again = load_config(cfg.model_dump(mode="json"))
    assert again == cfg
    res, err = _attempt(run_simulation, cfg)
    if err is not None:
        assert err.field
        event("refused by the run")
        return
    event("ran")
    n = res.metrics["num_requests"]
    assert res.metrics["num_completed"] == n
    assert n == min(cfg.workload.num_requests or n, cfg.workload.max_requests or n)
