"""Locating shared/traces and resolving trace names."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidal.core.errors import ConfigError
from tidal.workload.paths import ENV_VAR, resolve_trace, traces_dir


def test_env_var_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert traces_dir() == tmp_path


def test_env_var_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=ENV_VAR):
        traces_dir()


def test_walks_up_from_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shared" / "traces").mkdir(parents=True)
    deep = tmp_path / "repo" / "sub"
    deep.mkdir(parents=True)
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(deep)
    assert traces_dir() == tmp_path / "shared" / "traces"


def test_found_from_the_package(
    traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    assert traces_dir().resolve() == traces.resolve()


def test_resolve_forms(traces: Path, tmp_path: Path) -> None:
    full = traces / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv.gz"
    assert resolve_trace(full) == full
    assert resolve_trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz") == full
    assert resolve_trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv") == full
    assert resolve_trace("AzureLLMInferenceTrace_conv.csv.gz") == full
    local = tmp_path / "x.csv"
    local.write_text("a\n")
    assert resolve_trace(str(local)) == local


def test_resolve_missing_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^length_dist: no such trace file"):
        resolve_trace("definitely_not_here.csv", field="length_dist")
