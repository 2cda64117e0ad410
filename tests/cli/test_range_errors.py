"""A value out of range names the flag as the user typed it, the config key and the range the
field accepts (read from the config models' declared bounds, :mod:`tidal.core.validation`), in
``tidal simulate``, ``tidal plan`` and ``tidal serve``; ``tidal serve --help`` lists the
registered batching policies."""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError
from typer.testing import CliRunner

from tests.conftest import needs_traces
from tidal.cli import app
from tidal.core.validation import accepted_range, format_validation_error
from tidal.engine.policy import BATCHING

runner = CliRunner()
SIM = ["simulate", "--num-requests", "5", "--rate", "1"]


def _error(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """The one-line-per-problem error text of ``tidal ARGV`` (``sys.argv`` as a shell sets
    it: the flags are named as typed)."""
    monkeypatch.setattr(sys, "argv", ["tidal", *argv])
    res = runner.invoke(app, argv, terminal_width=300, env={"COLUMNS": "300"})
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    return re.sub(r"\s+", " ", res.output)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (
            ["--gpu-memory-utilization", "1.5"],
            "memory.gpu_memory_utilization (--gpu-memory-utilization): Input should be less "
            "than or equal to 1, got 1.5 (accepted: 0 < value ≤ 1)",
        ),
        (["-tp", "0"], "tp (-tp): Input should be greater than or equal to 1, got 0 "
         "(accepted: value ≥ 1)"),
        (["--tensor-parallel-size=0"], "tp (--tensor-parallel-size): "),
        (["--max-num-seqs", "0"], "scheduler.max_seqs (--max-num-seqs): "),
        (["--slo-ttft", "-1"], "slo.ttft_s (--slo-ttft): Input should be greater than 0, got "
         "-1.0 (accepted: value > 0)"),
        (["--arrival-cv", "-1"], "(accepted: 0.001 ≤ value ≤ 1000)"),
        (["--request-rate", "-1"], "workload.rate (--request-rate): must be > 0"),
        (["--burstiness", "0"], "workload.arrival_cv (--burstiness): must be a finite number"),
        pytest.param(
            ["--trace", "azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz"],
            "workload.rate (--rate): a trace brings its own arrival times", marks=needs_traces,
        ),
    ],
)  # fmt: skip
def test_simulate_names_the_flag_typed_and_the_range(flags, expected, monkeypatch) -> None:
    assert expected in _error([*SIM, *flags], monkeypatch)


def test_a_missing_value_names_its_flag(monkeypatch) -> None:
    """A workload-level check that names its field (``rate: …``) is labelled with the flag."""
    text = _error(["simulate", "--num-requests", "5"], monkeypatch)
    assert "workload.rate (--rate): a synthetic workload needs a rate" in text


def test_plan_names_the_flag_and_the_range(monkeypatch) -> None:
    argv = ["plan", "--num-requests", "20", "--rate", "2", "--slo-ttft-p99", "2"]
    text = _error([*argv, "--max-replicas", "0", "--out", "/nonexistent/p"], monkeypatch)
    assert "max_replicas (--max-replicas): " in text
    assert "(accepted: value ≥ 1)" in text
    text = _error([*argv, "--gpu-memory-utilization", "3", "--out", "/nonexistent/p"], monkeypatch)
    assert "memory.gpu_memory_utilization (--gpu-memory-utilization): " in text
    assert "got 3.0 (accepted: 0 < value ≤ 1)" in text
    text = _error([*argv, "--token-budget", "0,512", "--out", "/nonexistent/p"], monkeypatch)
    assert "search.scheduler.token_budget (--token-budget): 0: " in text
    assert "(accepted: value ≥ 1)" in text


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--gpu-memory-utilization", "1.5"], "gpu_memory_utilization "
         "(--gpu-memory-utilization): Input should be less than or equal to 1, got 1.5 "
         "(accepted: 0 < value ≤ 1)"),
        (["--max-num-seqs", "0"], "max_seqs (--max-num-seqs): "),
        (["--max-num-batched-tokens", "0"], "token_budget (--max-num-batched-tokens): "),
        (["--threads", "0"], "num_threads (--threads): "),
        (["--kv-cache-gb", "-1"], "kv_cache_gb (--kv-cache-gb): Input should be greater than 0, "
         "got -1.0 (accepted: value > 0)"),
    ],
)  # fmt: skip
def test_serve_names_the_flag_typed_and_the_range(flags, expected, monkeypatch) -> None:
    pytest.importorskip("uvicorn")
    pytest.importorskip("torch")
    text = _error(["serve", "--port", "18799", *flags], monkeypatch)
    assert expected in text
    assert "errors.pydantic.dev" not in text


def test_serve_help_lists_the_registered_batching_policies() -> None:
    res = runner.invoke(app, ["serve", "--help"], terminal_width=300, env={"COLUMNS": "300"})
    text = re.sub(r"[\s│]+", " ", res.output)
    for name in BATCHING.names():
        assert re.search(rf"[:;] {re.escape(name)} \(", text), name
    assert "ebplus (" in text
    assert "needs --profile" in text
    # brackets in help text print (typer reads help as rich markup)
    sim = re.sub(r"[\s│]+", " ", runner.invoke(
        app, ["simulate", "--help"], terminal_width=300, env={"COLUMNS": "300"}).output)
    assert "[options: scheduler.eb]" in sim


@given(
    st.integers(-1000, 1000), st.integers(1, 1000), st.booleans(), st.booleans(),
    st.integers(-3000, 3000),
)
def test_the_accepted_range_is_what_the_field_accepts(lo, width, open_lo, open_hi, x) -> None:
    hi = lo + width
    bounds = {"gt" if open_lo else "ge": lo, "lt" if open_hi else "le": hi}

    class M(BaseModel):
        v: int = Field(**bounds)  # type: ignore[call-overload]

    rng = accepted_range(M.model_fields["v"])
    assert rng == f"{lo} {'<' if open_lo else '≤'} value {'<' if open_hi else '≤'} {hi}"
    ok = (lo < x if open_lo else lo <= x) and (x < hi if open_hi else x <= hi)
    try:
        M(v=x)
    except ValidationError as err:
        assert not ok
        text = format_validation_error(err, M, {"v": "--v"})
        assert text.startswith("v (--v): ")
        assert text.endswith(f", got {x} (accepted: {rng})")
    else:
        assert ok


def test_the_command_list_keeps_each_summary_in_one_paragraph() -> None:
    """``tidal --help`` lists each command with its docstring's first paragraph; a line break
    of the docstring is not a line break of the list (it cut sentences in two)."""
    res = runner.invoke(app, ["--help"], terminal_width=300, env={"COLUMNS": "300"})
    lines = res.output.splitlines()
    simulate = next(line for line in lines if "│ simulate " in line)
    assert "on a trace or a synthetic workload." in simulate
    profile = next(line for line in lines if "│ profile-gpu " in line)
    assert "the embedding and LM head, paged decode" in profile


@pytest.mark.parametrize("cmd", [["simulate"], ["serve"], ["hardware"], ["hardware", "show"]])
def test_help_prints_no_restructuredtext_literals(cmd) -> None:
    """A docstring's ````x```` (reStructuredText, for the code's readers) prints as ``x``."""
    res = runner.invoke(app, [*cmd, "--help"], terminal_width=300, env={"COLUMNS": "300"})
    assert res.exit_code == 0
    assert "``" not in res.output
