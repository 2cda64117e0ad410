"""Issue 32 §2: every ``tidal simulate`` flag, in every mode (single, trace, cluster,
augmented), either changes the result or is refused with the reason — never recorded as
applied while ignored. The modes each flag applies in are declared once
(:data:`tidal.sim.applicability.RULES`, plus the cluster flags); this test checks the
declaration against behaviour: every flag × mode the declaration calls ignored is refused
(naming the flag), and every one it calls applied changes the result of a tiny run. ``plan``
and ``sweep`` build their runs through the same config, and are checked below."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.conftest import needs_traces
from tidal.cli import _deep_merge, app
from tidal.cli.flags import SIMULATE
from tidal.cli.simulate import _cluster_flags
from tidal.core.errors import TidalError
from tidal.sim.applicability import AUG, CLU, RULES, SES, SYN, TRACE
from tidal.sim.config import load_config
from tidal.sim.run import run_simulation

MODE_KEY = {"single": SYN, "trace": TRACE, "cluster": CLU, "augmented": AUG}
AZURE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"

# (value, context): ``context`` flags go into both runs compared, so that only the flag differs.
PROBE: dict[str, tuple[object, dict[str, object]]] = {
    "model": ("qwen3-8b", {}),
    "gpu": ("h200", {}),
    "tp": (2, {}),
    "perf_model": ("roofline", {}),
    "perf_host": ("vidur", {}),
    "max_requests": (7, {}),
    "rate_scale": (3.0, {}),
    "start_s": (1.0, {}),
    "end_s": (2.0, {}),
    "num_requests": (9, {}),
    "rate": ("3", {}),
    "arrival_cv": (3.0, {}),
    "burstiness": (0.2, {}),
    "prompt_len": (1000, {}),
    "output_len": (30, {}),
    "length_dist": ("uniform", {}),
    "max_prompt_len": (100, {}),
    "max_output_len": (10, {}),
    "concurrency": (2, {"rate": None, "concurrency": 1000}),
    "call_time_dist": ("N", {}),
    "serving_policy": ("augserve", {}),
    "predictor": ("oracle", {"serving_policy": "augserve", "rate": "40"}),
    "swap_space_gb": (0.0, {"serving_policy": "infercept", "rate": "40"}),
    "slo_norm_latency": (0.001, {}),
    "warmup": (5, {}),
    "batching": ("eb", {}),
    "token_budget": (300, {}),
    "max_seqs": (2, {}),
    "enable_mixed_chunk": (True, {"engine": "sglang"}),
    "max_prefill_tokens": (20, {"engine": "sglang", "rate": "40"}),
    # a KV pool small enough that SGLang's admission reserve binds
    "schedule_conservativeness": (10.0, {"engine": "sglang", "mem_fraction_static": 0.2}),
    "scheduler_recv_interval": (30, {"engine": "sglang"}),
    "prefill_instances": (2, {}),
    "decode_instances": (2, {}),
    "prefill_tp": (2, {}),
    "decode_tp": (2, {}),
    "prefill_gpu": ("h200", {}),
    "decode_gpu": ("h200", {}),
    "kv_link": ("eth-100", {"prefill_instances": 1}),
    "request_overhead_ms": ("auto", {"prefill_instances": 1}),
    "unit_pools": ("apart", {}),
    "node_link": ("eth-100", {}),
    "nics_per_node": (1, {}),
    "gpu_memory_utilization": (0.5, {}),
    "mem_fraction_static": (0.3, {"engine": "sglang"}),  # SGLang's plan (refused on vllm)
    "slo_ttft": (0.001, {}),
    "slo_tpot": (0.001, {}),
    "seed": (5, {}),
    "no_prefix_caching": (True, {}),
    "host_cache_gib": (1.0, {}),
    "hash_block_tokens": (256, {}),
    "shared_prefix_groups": (2, {}),
    "shared_prefix_len": (300, {}),
    "n": (3, {}),
    "branch_policy": ("parallel-probe", {"n": 4}),
    "turns": (3, {}),
    "handoff": ("text", {"turns": 3}),
    "think_time": (2.0, {"turns": 3}),
    "placement": ("dedicated", {}),
    "alpha": (2.0, {}),
    "warmserve_disable": (["forecast"], {}),
    "mix": ("servegen", {}),
    "days": (0.01, {"mix": "servegen"}),
    "interference": (True, {}),
    "engine": ("sglang", {"perf_model": "engine"}),
    "engine_version": ("0.19.0", {"perf_model": "engine", "model": "qwen3-30b-a3b", "gpu": "h200"}),
    "data_parallel_size": (2, {"perf_model": "engine"}),
    "pipeline_parallel_size": (2, {"perf_model": "engine"}),
    "enable_expert_parallel": (True, {"perf_model": "engine", "model": "qwen3-30b-a3b", "tp": 2}),
    "moe_tp_size": (1, {"perf_model": "engine", "model": "qwen3-30b-a3b", "tp": 2}),
    "async_scheduling": (False, {"perf_model": "engine"}),
    "quantization": ("fp8", {}),
    "kv_cache_dtype": ("fp8", {}),
    "gemm_quant": ("fp8", {}),
    "moe_quant": ("fp8", {"model": "qwen3-30b-a3b"}),
    "speculative_config": ('{"method": "eagle3", "num_speculative_tokens": 3}', {}),
}
TOGETHER = {
    "shared_prefix_groups": {"shared_prefix_len": 300},
    "shared_prefix_len": {"shared_prefix_groups": 2},
}
"""Flags given in pairs: the partner goes with the flag (not into the run compared with)."""
MODE_FLAGS: dict[str, dict[str, object]] = {
    "single": {"num_requests": 30, "rate": "10"},
    "trace": {},  # the Mooncake trace of the fixture
    "cluster": {"trace": AZURE, "cluster": "1x4:h100", "models": "llama-2-7b,llama-2-13b"},
    "augmented": {"workload": "infercept-mix", "num_requests": 12, "rate": "4"},
}
MODE_CONFIG = {"cluster": {"cluster": {"warmup_s": 20, "mix": {"alpha": 1.0, "replay_s": 60}}}}

EXACT = {
    "no_fast_forward": "fast-forward is exact: the same result by contract (tests/sim)",
    "ordering": "one registered ordering (fcfs): no other value to give",
    "policy_module": "imports policies; a result changes only with --batching naming one of "
    "them (tests/cli/test_policy_module.py)",
}
"""Flags that change how a run is computed but, by contract, not its result."""
NOT_HERE = {
    ("seed", "trace"): "a Mooncake replay without spread_ticks draws no random numbers",
    ("host_cache_gib", "trace"): "its effect needs a cache under pressure (tests/sim)",
    ("trace", "cluster"): "the cluster's trace, checked by tests/cluster",
    ("mix", "cluster"): "the servegen mix needs its own trace (tests/cluster)",
    ("hash_block_tokens", "trace"): "a Mooncake trace fixes it: another value is refused by the "
    "loader, naming it (tests/workload)",
    ("days", "cluster"): "the servegen mix needs the ServeGen trace (tests/cluster)",
    ("unit_pools", "cluster"): "no unit in the mode's models (tests/cluster/test_cluster_nodes.py)",
    ("node_link", "cluster"): "needs a unit across nodes (tests/cluster/test_cluster_nodes.py)",
    ("nics_per_node", "cluster"): "needs a unit across nodes (tests/cluster/test_cluster_nodes.py)",
    ("predictor", "augmented"): "AugServe's predictions order a queue this run never forms "
    "(tests/augment)",
    ("branch_policy", "single"): "its early stop needs long outputs (tests/test_parallel_probe.py)",
    ("max_prefill_tokens", "trace"): "the fixture's arrivals are 200 ms apart: no step admits "
    "two prompts (tests/engine/test_sglang_batching.py)",
    ("schedule_conservativeness", "trace"): "the fixture's requests do not meet a full KV pool: "
    "no admission is refused for its reserve (tests/engine/test_sglang_admission.py)",
    ("schedule_conservativeness", "augmented"): "its 12 requests give the same digest at "
    "conservativeness 1 and 10 with pools of 0.20-0.25 of the GPU: no refusal by the reserve "
    "(tests/engine/test_sglang_admission.py)",
}
"""(flag, mode) pairs whose effect this tiny workload cannot show; tested where named."""
MODE_DEFINING = {"trace", "workload", "cluster", "models", "placement"}
"""Flags that choose the mode (a cluster flag of these three starts a cluster run)."""


def declared_applies(flag: str, mode: str, context: dict[str, object]) -> bool:
    """The declaration: cluster flags apply in a cluster; a key of a :data:`RULES` entry in
    its modes; augmented settings with augmented requests; turning the prefix cache off where
    the workload has prompt content; every other flag everywhere."""
    key = SIMULATE[flag].key or ""
    if flag == "rate" and mode == "cluster":
        return True  # the mix's total rate (cluster.mix.rate)
    if key.startswith("cluster."):
        return mode == "cluster"
    rule = {r.key: r for r in RULES}.get(key)
    inner = SES if mode == "single" and int(str(context.get("turns", 1))) > 1 else MODE_KEY[mode]
    if rule is not None and inner not in rule.modes:
        return False
    if key.startswith("augment.") or key == "slo.norm_latency_s":
        return mode == "augmented"
    if key == "memory.prefix_caching":
        return mode == "trace"  # the only mode whose base workload has prompt content
    if key == "memory.host_cache_gib":
        return mode == "trace"
    return True


def _trace(tmp: Path) -> str:
    rng = np.random.default_rng(0)
    path = tmp / "mc.jsonl"
    with open(path, "w") as f:
        for i in range(40):
            nb = int(rng.integers(2, 6))
            rec = {
                "timestamp": i * 200,
                "input_length": nb * 512 - 10,
                "output_length": int(rng.integers(20, 200)),
                "hash_ids": [0, 1] + [1000 + 10 * i + k for k in range(nb - 2)],
            }
            f.write(json.dumps(rec) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def mooncake(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _trace(tmp_path_factory.mktemp("flag_modes"))


def _digest(res) -> str:
    h = hashlib.sha256()
    metrics = {k: v for k, v in res.metrics.items() if "wall" not in k and "simulate" not in k}
    h.update(json.dumps(metrics, sort_keys=True, default=str).encode())
    for k in sorted(res.columns):
        h.update(k.encode() + np.asarray(res.columns[k]).tobytes())
    return h.hexdigest()


def outcome(mode: str, flags: dict[str, object]) -> str:
    """``refused: <message>`` or the digest of the run's results."""
    given = {k: v for k, v in flags.items() if v is not None}
    try:
        data = _cluster_flags(SIMULATE.config(given), given, {})
        data = _deep_merge(MODE_CONFIG.get(mode, {}), data)
        data.setdefault("workload", {})
        return _digest(run_simulation(load_config(data, SIMULATE.key_names())))
    except TidalError as err:
        return f"refused: {err}"


def _flags(mode: str, mooncake: str, extra: dict[str, object]) -> dict[str, object]:
    base = dict(MODE_FLAGS[mode])
    if mode == "trace":
        base["trace"] = mooncake
    return {**base, **extra}


CASES = [
    (f.name, mode)
    for mode in MODE_FLAGS
    for f in SIMULATE
    if f.name not in MODE_DEFINING | set(EXACT) and (f.name, mode) not in NOT_HERE
]


@pytest.mark.parametrize(("flag", "mode"), CASES, ids=[f"{m}-{f}" for f, m in CASES])
def test_a_flag_changes_the_result_or_is_refused(flag, mode, mooncake):
    if mode == "cluster" and needs_traces.args[0]:  # skipif(condition)
        pytest.skip("shared/traces not found")
    value, context = PROBE[flag]
    got = outcome(mode, _flags(mode, mooncake, {**context, **TOGETHER.get(flag, {}), flag: value}))
    name = SIMULATE[flag].names[0]
    if not declared_applies(flag, mode, context):
        assert got.startswith("refused"), f"{name} in {mode} mode is ignored but was accepted"
        return
    base = outcome(mode, _flags(mode, mooncake, context))
    assert not base.startswith("refused"), base
    assert not got.startswith("refused"), f"{name} in {mode}: {got}"
    assert got != base, f"{name} is declared to apply in {mode} mode but changed nothing"


@pytest.mark.parametrize(("flag", "mode"), CASES, ids=[f"{m}-{f}" for f, m in CASES])
def test_a_refusal_names_the_flag(flag, mode, mooncake):
    """Refused alone (no context flags), the error names the flag or its config key."""
    if declared_applies(flag, mode, {}) or PROBE[flag][1]:
        return
    if mode == "cluster" and needs_traces.args[0]:
        pytest.skip("shared/traces not found")
    got = outcome(mode, _flags(mode, mooncake, {**TOGETHER.get(flag, {}), flag: PROBE[flag][0]}))
    assert got.startswith("refused"), got
    assert SIMULATE[flag].names[0] in got or (SIMULATE[flag].key or "") in got, got


def test_every_flag_is_probed_or_declared_exact():
    named = set(PROBE) | set(EXACT) | MODE_DEFINING
    assert {f.name for f in SIMULATE} <= named


def test_summary_records_only_applied_values(tmp_path, mooncake):
    """The recorded config re-runs to the same result: every value in it was applied."""
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["simulate", "--trace", mooncake, "--out", str(out)])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    again = run_simulation(load_config(summary["config"]))
    first = json.loads((out / "summary.json").read_text())["metrics"]
    assert again.metrics["num_completed"] == first["num_completed"]
    assert again.metrics["ttft_p50_s"] == pytest.approx(first["ttft_p50_s"], rel=0, abs=0)


def test_plan_refuses_a_base_flag_its_mode_ignores(tmp_path, mooncake):
    res = CliRunner().invoke(
        app,
        ["plan", "--trace", mooncake, "--arrival-cv", "3", "--slo-ttft-p99", "2", "--gpus", "h100",
         "--tp", "1", "--out", str(tmp_path / "p")],
    )  # fmt: skip
    assert res.exit_code == 2
    assert "workload.arrival_cv" in res.output
    assert "ignored in trace mode" in res.output


def test_sweep_refuses_an_axis_its_mode_ignores_before_any_cell_runs(tmp_path, mooncake):
    cfg = tmp_path / "s.yaml"
    cfg.write_text(f"workload: {{trace: {mooncake}}}\n")
    out = tmp_path / "s"
    res = CliRunner().invoke(
        app, ["sweep", str(cfg), "--out", str(out), "--grid", "workload.turns=1,3"]
    )
    assert res.exit_code == 2
    assert "workload.turns" in res.output
    assert "ignored in trace mode" in res.output
    assert not (out / "cells").exists() or not any((out / "cells").iterdir())
