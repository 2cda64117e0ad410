"""Impossible configurations end in a ConfigError naming the field and the fix.

Before these fixes: ``--gpu h100@0TBs`` raised ZeroDivisionError, ``@nanTBs`` a ValueError and
``@-3TBs`` was accepted; ``--tp 3`` was accepted for 32 heads / 8 KV heads; ``--num-requests``
and ``--rate`` were dropped silently with a trace (yet recorded in summary.json); YAML
``max_seqs: true`` became 1; ``memory: {num_blocks: 1}`` ended in a RuntimeError.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from tidal.cli import app
from tidal.core.errors import ConfigError
from tidal.hardware.gpus import get_gpu
from tidal.hardware.models import MODELS, get_model
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation
from tidal.workload.build import build_workload

SYNTH = {"num_requests": 4, "rate": 10.0, "prompt_len": 64, "output_len": 8}


def _cfg(**over: object) -> dict[str, object]:
    data: dict[str, object] = {"workload": dict(SYNTH)}
    data.update(over)
    return data


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(
    "spec", ["h100@0TBs", "h100@nanTBs", "h100@-3TBs", "h100@infTBs", "h100@fastTBs", "h100@1e9TBs"]
)
def test_bad_what_if_bandwidth_is_a_named_error(spec: str) -> None:
    with pytest.raises(ConfigError) as err:
        get_gpu(spec)
    assert err.value.field == "gpu"
    assert "TB/s" in err.value.fix


def test_good_what_if_bandwidth_scales_only_the_bandwidth() -> None:
    g = get_gpu("h100@2TBs")
    assert g.mem_bw == 2e12
    assert g.flops == get_gpu("h100").flops


def test_cli_gpu_with_zero_bandwidth_exits_2_without_traceback() -> None:
    res = CliRunner().invoke(
        app, ["simulate", "--num-requests", "2", "--rate", "1", "--gpu", "h100@0TBs"]
    )
    assert res.exit_code == 2
    assert "gpu" in res.output
    assert not isinstance(res.exception, ZeroDivisionError)


def _vllm_accepts(heads: int, kv: int, tp: int) -> bool:
    """vLLM's QKVParallelLinear, restated: divide(heads, tp) and, for the KV heads,
    divide(kv, tp) when tp < kv else divide(tp, kv) (replication)."""
    if heads % tp:
        return False
    return kv % tp == 0 if tp < kv else tp % kv == 0


@pytest.mark.parametrize("name", sorted(MODELS))
def test_tp_rule_matches_vllm_for_every_model(name: str) -> None:
    from tidal.hardware.models import check_tp

    m = get_model(name)
    for tp in range(1, 2 * m.num_heads + 1):
        ok = _vllm_accepts(m.num_heads, m.num_kv_heads, tp)
        if ok:
            check_tp(m, tp)
        else:
            with pytest.raises(ConfigError):
                check_tp(m, tp)


@pytest.mark.parametrize(("tp", "ok"), [(3, False), (6, False), (16, True), (64, False)])
def test_tp_of_llama_8b(tp: int, ok: bool) -> None:
    """32 heads, 8 KV heads: 16 splits the heads 2 per rank and replicates each KV head twice
    (vLLM accepts it); 3 and 6 do not divide 32; 64 exceeds the heads."""
    if ok:
        assert load_config(_cfg(tp=tp)).tp == tp
    else:
        with pytest.raises(ConfigError, match=r"tensor parallelism .*valid: 1, 2, 4, 8, 16, 32"):
            load_config(_cfg(tp=tp))


def test_cluster_model_tp_follows_the_same_rule() -> None:
    from tidal.cluster.models import served_models

    with pytest.raises(ConfigError, match="tensor parallelism"):
        served_models(["llama-2-70b:4", "llama-2-13b:16"], get_gpu("h100"), 16, 2 << 20, 16)


def test_rate_with_a_trace_points_to_rate_scale(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n')
    with pytest.raises(ConfigError, match=r"rate_scale"):
        load_config({"workload": {"trace": str(trace), "rate": 3.0}})


def test_num_requests_with_a_trace_keeps_the_first_n(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            f'{{"timestamp": {i * 10}, "input_length": {i + 1}, "output_length": 2}}\n'
            for i in range(6)
        )
    )
    cfg = load_config({"workload": {"trace": str(trace), "num_requests": 4}})
    rs = build_workload(cfg.workload, np.random.default_rng(0))
    assert rs.prompt_len.tolist() == [1, 2, 3, 4]
    with pytest.raises(ConfigError, match="num_requests"):
        load_config({"workload": {"trace": str(trace), "num_requests": 4, "max_requests": 3}})
    same = load_config({"workload": {"trace": str(trace), "num_requests": 3, "max_requests": 3}})
    assert len(build_workload(same.workload, np.random.default_rng(0))) == 3


def test_cli_num_requests_with_a_trace_is_honoured_and_recorded(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            f'{{"timestamp": {i * 100}, "input_length": 8, "output_length": 2}}\n' for i in range(6)
        )
    )
    out = tmp_path / "run"
    res = CliRunner().invoke(
        app, ["simulate", "--trace", str(trace), "--num-requests", "2", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["workload"]["num_requests"] == 2
    assert summary["metrics"]["num_requests"] == 2


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("scheduler", "max_seqs", True),
        ("scheduler", "token_budget", "8192"),
        ("memory", "block_size", False),
        ("workload", "num_requests", True),
        (None, "seed", True),
        (None, "tp", 1.5),
        (None, "fast_forward", 1),
        (None, "fast_forward", "yes"),
        (None, "interference", 0),
    ],
)
def test_yaml_ints_and_bools_are_strict(
    tmp_path: Path, section: str | None, key: str, value: object
) -> None:
    data = _cfg()
    if section is None:
        data[key] = value
    else:
        block = data.setdefault(section, {})
        assert isinstance(block, dict)
        block[key] = value
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    from tidal.sim.config import load_yaml

    with pytest.raises(ConfigError, match=key):
        load_config(load_yaml(path))


def test_strict_scalars_still_accept_the_ordinary_forms() -> None:
    cfg = load_config(
        _cfg(seed=3, fast_forward=False, interference="auto", scheduler={"max_seqs": 128})
    )
    assert cfg.scheduler.max_seqs == 128
    assert cfg.fast_forward is False
    inf = load_config({"workload": {**SYNTH, "rate": float("inf")}})
    assert inf.workload.rate == float("inf")
    assert (
        load_config(_cfg(memory={"gpu_memory_utilization": 1})).memory.gpu_memory_utilization == 1
    )


def test_num_blocks_below_one_request_names_the_minimum() -> None:
    """64 + 8 = 72 tokens = 5 blocks of 16; watermark 0.01 of 5 blocks is 0, so 5 is the least."""
    with pytest.raises(ConfigError) as err:
        run_simulation(load_config(_cfg(memory={"num_blocks": 1})))
    assert err.value.field == "memory.num_blocks"
    assert "at least 5 blocks" in str(err.value)
    ok = run_simulation(load_config(_cfg(memory={"num_blocks": 5})))
    assert ok.metrics["num_completed"] == 4


def test_cli_num_blocks_too_small_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_cfg(memory={"num_blocks": 1})))
    res = CliRunner().invoke(app, ["simulate", "--config", str(path)])
    assert res.exit_code == 2
    assert "memory.num_blocks" in _flat(res.output)
