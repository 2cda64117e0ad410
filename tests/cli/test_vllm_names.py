"""vLLM's flag names map to the same config key as Tidal's own (one test per alias): the
command is run twice, under each name, up to the point where its config is built."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

import tidal.experiments.space
import tidal.experiments.sweep
from tidal.cli import app
from tidal.cli.vllm_names import cv_of_burstiness
from tidal.core.errors import TidalError

runner = CliRunner()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CapturedError(TidalError):
    pass


def _capture(monkeypatch, module, name):
    seen = []

    def fake(*args, **kwargs):
        seen.append((args, kwargs))
        raise CapturedError("captured")

    monkeypatch.setattr(module, name, fake)
    return seen


def simulate_config(monkeypatch, args):
    import tidal.cli.simulate as sim_cli

    seen = _capture(monkeypatch, sim_cli, "_run_and_write")
    base = ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100"]
    res = runner.invoke(app, [*base, *args])
    assert seen, res.output
    return seen[0][0][0].model_dump(mode="json")


SIMULATE = [
    ("--max-num-seqs", "--max-seqs", "64", "scheduler.max_seqs"),
    ("--max-num-batched-tokens", "--token-budget", "4096", "scheduler.token_budget"),
    ("--tensor-parallel-size", "--tp", "2", "tp"),
    ("-tp", "--tp", "2", "tp"),
    ("--num-prompts", "--num-requests", "77", "workload.num_requests"),
    ("--request-rate", "--rate", "3.5", "workload.rate"),
    ("--max-concurrency", "--concurrency", "9", "workload.concurrency"),
    ("--random-input-len", "--prompt-len", "300", "workload.prompt_len"),
    ("--random-output-len", "--output-len", "40", "workload.output_len"),
    ("--num-warmups", "--warmup", "5", "workload.warmup_requests"),
]


def dotted(d, key):
    for k in key.split("."):
        d = d[k]
    return d


@pytest.mark.parametrize(("alias", "flag", "value", "key"), SIMULATE, ids=[a for a, *_ in SIMULATE])
def test_simulate_alias_sets_the_same_key(monkeypatch, alias, flag, value, key):
    common = {"--num-requests": "10", "--rate": "2"}
    common.pop(flag, None)
    if flag == "--concurrency":  # a closed loop ignores the rate, so it is refused with one
        common.pop("--rate")
    args = [x for kv in common.items() for x in kv]
    a = simulate_config(monkeypatch, [*args, alias, value])
    assert a == simulate_config(monkeypatch, [*args, flag, value])
    assert float(dotted(a, key)) == float(value)


def test_simulate_burstiness_is_the_gamma_shape_of_the_arrival_cv(monkeypatch):
    common = ["--num-requests", "10", "--rate", "2"]
    a = simulate_config(monkeypatch, [*common, "--burstiness", "4"])
    assert a["workload"]["arrival_cv"] == pytest.approx(0.5)
    b = simulate_config(monkeypatch, [*common, "--arrival-cv", str(cv_of_burstiness(4))])
    assert a == b
    res = runner.invoke(app, ["simulate", *common, "--burstiness", "4", "--arrival-cv", "2"])
    assert res.exit_code == 2
    assert "not both" in res.output


def test_simulate_gpu_memory_utilization_key(monkeypatch):
    a = simulate_config(monkeypatch, ["--num-requests", "10", "--rate", "2",
                                      "--gpu-memory-utilization", "0.7"])  # fmt: skip
    assert a["memory"]["gpu_memory_utilization"] == 0.7


def plan_data(monkeypatch, args):
    seen = _capture(monkeypatch, tidal.experiments.space, "load_plan_spec")
    res = runner.invoke(app, ["plan", "--out", "unused", "--num-requests", "10", *args])
    assert seen, res.output
    return seen[0][0][0]


PLAN = [
    ("--max-num-seqs", "--max-seqs", "64,128", "search.scheduler.max_seqs"),
    ("--max-num-batched-tokens", "--token-budget", "2048,8192", "search.scheduler.token_budget"),
    ("--tensor-parallel-size", "--tp", "1,2", "search.tp"),
    ("-tp", "--tp", "1,2", "search.tp"),
    ("--num-prompts", "--num-requests", "50", "base.workload.num_requests"),
    ("--request-rate", "--rate", "3", "base.workload.rate"),
    ("--max-concurrency", "--concurrency", "8", "base.workload.concurrency"),
    ("--random-input-len", "--prompt-len", "300", "base.workload.prompt_len"),
    ("--random-output-len", "--output-len", "40", "base.workload.output_len"),
]


@pytest.mark.parametrize(("alias", "flag", "value", "key"), PLAN, ids=[a for a, *_ in PLAN])
def test_plan_alias_sets_the_same_key(monkeypatch, alias, flag, value, key):
    a = plan_data(monkeypatch, [alias, value])
    assert a == plan_data(monkeypatch, [flag, value])
    if key.startswith("search."):
        assert ",".join(str(v) for v in a["search"][key.removeprefix("search.")]) == value
    else:
        assert float(dotted(a, key)) == float(value)


def test_plan_burstiness_and_gpu_memory_utilization(monkeypatch):
    a = plan_data(monkeypatch, ["--burstiness", "0.25", "--gpu-memory-utilization", "0.8"])
    assert a["base"]["workload"]["arrival_cv"] == pytest.approx(2.0)
    assert a["base"]["memory"]["gpu_memory_utilization"] == 0.8


def serve_config(monkeypatch, args):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    import tidal.runtime.config as rc

    seen = _capture(monkeypatch, rc, "build_engine")
    res = runner.invoke(app, ["serve", *args, "--port", str(_free_port())])
    assert seen, res.output
    return seen[0][0][0].model_dump(mode="json")


SERVE = [
    ("--max-num-seqs", "--max-seqs", "32"),
    ("--max-num-batched-tokens", "--token-budget", "1024"),
]


@pytest.mark.parametrize(("alias", "flag", "value"), SERVE, ids=[a for a, _, _ in SERVE])
def test_serve_alias_sets_the_same_key(monkeypatch, alias, flag, value):
    a = serve_config(monkeypatch, [alias, value])
    assert a == serve_config(monkeypatch, [flag, value])
    assert a != serve_config(monkeypatch, [])


def test_serve_model_positional_is_the_model_flag(monkeypatch):
    assert serve_config(monkeypatch, ["tiny-llama"]) == serve_config(
        monkeypatch, ["--model", "tiny-llama"]
    )
    res = runner.invoke(
        app, ["serve", "tiny-llama", "--model", "llama-3.1-8b", "--port", str(_free_port())]
    )
    assert res.exit_code == 2
    assert "differ" in res.output


@pytest.mark.parametrize("alias", ["--tensor-parallel-size", "-tp"])
def test_serve_tp_is_accepted_and_bounded_by_one_device(alias):
    pytest.importorskip("fastapi")
    res = runner.invoke(app, ["serve", alias, "2", "--port", str(_free_port())])
    assert res.exit_code == 2
    assert "one device" in res.output


def sweep_grid(monkeypatch, tmp_path, grid):
    seen = _capture(monkeypatch, tidal.experiments.sweep, "run_sweep")
    cfg = tmp_path / "base.yaml"
    cfg.write_text("model: llama-3.1-8b\nworkload: {num_requests: 10, rate: 2}\n")
    res = runner.invoke(app, ["sweep", str(cfg), "--out", str(tmp_path / "o"), "--grid", grid])
    assert seen, res.output
    return seen[0][0][1]


SWEEP = [
    ("max_num_seqs", "scheduler.max_seqs", "64,128"),
    ("max_num_batched_tokens", "scheduler.token_budget", "2048,4096"),
    ("tensor_parallel_size", "tp", "1,2"),
    ("num_prompts", "workload.num_requests", "10,20"),
    ("request_rate", "workload.rate", "1,2"),
    ("max_concurrency", "workload.concurrency", "4,8"),
    ("random_input_len", "workload.prompt_len", "100,200"),
    ("random_output_len", "workload.output_len", "10,20"),
    ("gpu_memory_utilization", "memory.gpu_memory_utilization", "0.8,0.9"),
]


@pytest.mark.parametrize(("alias", "key", "values"), SWEEP, ids=[a for a, _, _ in SWEEP])
def test_sweep_grid_alias_sets_the_same_key(monkeypatch, tmp_path, alias, key, values):
    a = sweep_grid(monkeypatch, tmp_path, f"{alias}={values}")
    assert a == sweep_grid(monkeypatch, tmp_path, f"{key}={values}")
    assert list(a) == [key]


def test_sweep_burstiness_axis_is_an_arrival_cv_axis(monkeypatch, tmp_path):
    g = sweep_grid(monkeypatch, tmp_path, "burstiness=1,4")
    assert g == {"workload.arrival_cv": [1.0, 0.5]}


def _help(cmd):
    res = runner.invoke(app, [cmd, "--help"], terminal_width=200, env={"COLUMNS": "200"})
    return re.sub(r"\s+", " ", res.output)


@pytest.mark.parametrize("cmd", ["simulate", "plan", "serve", "fidelity"])
def test_help_shows_both_names_and_defaults(cmd):
    text = _help(cmd)
    assert "--max-num-seqs" in text
    assert "--max-seqs" in text
    assert "--tensor-parallel-size" in text
    assert "default" in text


def test_help_defaults_of_simulate_are_the_config_defaults():
    from tidal.sim.config import SimulationConfig

    d = SimulationConfig.model_validate({"workload": {"num_requests": 1, "rate": 1}}).model_dump()
    text = _help("simulate")
    for label, value in (
        ("also sizes the KV plan).", d["scheduler"]["token_budget"]),
        ("vLLM max_num_seqs, SGLang max_running_requests).", d["scheduler"]["max_seqs"]),
        ("share of the driver-reported memory planned.", d["memory"]["gpu_memory_utilization"]),
        ("Synthetic: prompt length (location).", d["workload"]["prompt_len"]),
        ("Synthetic: output length (location).", d["workload"]["output_len"]),
        ("Tensor-parallel degree.", d["tp"]),
    ):
        m = re.search(re.escape(label) + r" \(default: ([0-9.]+)\)", text)
        assert m, label
        assert float(m.group(1)) == pytest.approx(float(value)), label
