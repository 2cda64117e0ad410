"""``--policy-module PATH`` (config key ``policy_modules``): a batching policy written in one
file outside the package is imported before the registries are read and runs a simulation by
its name; a bad path or module name is refused naming the flag."""

from __future__ import annotations

import json
import textwrap

import pytest
from typer.testing import CliRunner

from tidal.cli import app
from tidal.engine.policy import BATCHING

runner = CliRunner()

POLICY = '''
"""Mixed batching that counts the steps it scheduled and reports its option."""
from pydantic import BaseModel, ConfigDict

from tidal.engine.mb import MixedBatching
from tidal.engine.policy import BATCHING


class CountingOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tag: int = 7


@BATCHING.register("{name}")
class Counting(MixedBatching):
    """Mixed batching that counts its steps."""

    name = "{name}"
    Options = CountingOptions

    def __init__(self, state, options):
        super().__init__(state)
        self.tag = options.tag
        self.calls = 0

    def schedule(self, now_ns):
        self.calls += 1
        return super().schedule(now_ns)

    def extra_metrics(self):
        return {{**super().extra_metrics(), "counting_calls": self.calls, "counting_tag": self.tag}}
'''

SYNTH = [
    "--model", "qwen3-8b", "--gpu", "h100", "--num-requests", "60", "--rate", "20",
    "--prompt-len", "300", "--output-len", "40", "--seed", "3",
]  # fmt: skip


@pytest.fixture
def policy_file(tmp_path, request):
    name = f"counting-{request.node.name[-12:].strip('[]_')}".lower()
    path = tmp_path / "counting_policy.py"
    path.write_text(textwrap.dedent(POLICY.format(name=name)))
    yield name, path
    BATCHING._items.pop(name, None)  # keep the registry as the package defines it


def _summary(out):
    return json.loads((out / "summary.json").read_text())["metrics"]


def test_a_policy_in_one_file_runs_a_simulation_by_its_name(tmp_path, policy_file):
    name, path = policy_file
    out = tmp_path / "run"
    args = ["simulate", *SYNTH, "--policy-module", str(path), "--batching", name]
    res = runner.invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    m = _summary(out)
    # the file's policy scheduled the steps (a fast-forwarded decode run is one call)
    assert 0 < m["counting_calls"] <= m["num_steps"]
    assert m["counting_tag"] == 7
    # it is mixed batching underneath: the same requests finish at the same times as with mb
    ref = tmp_path / "mb"
    assert runner.invoke(app, ["simulate", *SYNTH, "--out", str(ref)]).exit_code == 0
    assert m["ttft_mean_s"] == _summary(ref)["ttft_mean_s"]


def test_the_config_key_loads_it_and_its_options_are_validated(tmp_path, policy_file):
    name, path = policy_file
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        f"policy_modules: [{path}]\nscheduler: {{batching: {name}, options: {{tag: 11}}}}\n"
    )
    out = tmp_path / "run"
    res = runner.invoke(app, ["simulate", "--config", str(cfg), *SYNTH, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert _summary(out)["counting_tag"] == 11
    cfg.write_text(
        f"policy_modules: [{path}]\nscheduler: {{batching: {name}, options: {{tga: 1}}}}\n"
    )
    res = runner.invoke(app, ["simulate", "--config", str(cfg), *SYNTH, "--out", str(out)])
    assert res.exit_code != 0
    assert "tga" in res.output


def test_a_module_name_is_imported_from_the_path(tmp_path, policy_file, monkeypatch):
    name, path = policy_file
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    args = ["simulate", *SYNTH, "--policy-module", path.stem, "--batching", name]
    res = runner.invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert _summary(out)["counting_calls"] > 0


@pytest.mark.parametrize("given", ["missing_policy.py", "no_such_policy_module"])
def test_a_bad_policy_module_names_the_flag(tmp_path, given):
    spec = str(tmp_path / given) if given.endswith(".py") else given
    res = runner.invoke(app, ["simulate", *SYNTH, "--policy-module", spec, "--out", str(tmp_path)])
    assert res.exit_code != 0
    text = " ".join(res.output.split())
    assert "policy_modules" in text
    assert "--policy-module" in text
    assert given in text


def test_a_file_that_fails_to_import_says_why(tmp_path):
    bad = tmp_path / "broken_policy.py"
    bad.write_text("raise RuntimeError('half-written policy')\n")
    args = ["simulate", *SYNTH, "--policy-module", str(bad), "--out", str(tmp_path)]
    res = runner.invoke(app, args)
    assert res.exit_code != 0
    text = " ".join(res.output.split())
    assert "policy_modules" in text
    assert "half-written policy" in text


def test_a_config_file_path_is_relative_to_the_config_not_the_cwd(
    tmp_path, policy_file, monkeypatch
):
    """``policy_modules: [policies/x.py]`` in ``conf/run.yaml`` is ``conf/policies/x.py``
    whatever the working directory (as docker-compose resolves its files); the recorded config
    holds the resolved path, so it re-runs from anywhere."""
    name, path = policy_file
    conf = tmp_path / "conf"
    (conf / "policies").mkdir(parents=True)
    moved = conf / "policies" / path.name
    moved.write_text(path.read_text())
    path.unlink()
    cfg = conf / "run.yaml"
    cfg.write_text(f"policy_modules: [policies/{moved.name}]\nscheduler: {{batching: {name}}}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = tmp_path / "run"
    res = runner.invoke(app, ["simulate", "--config", str(cfg), *SYNTH, "--out", str(out)])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["policy_modules"] == [str(moved.resolve())]
    assert summary["metrics"]["counting_calls"] > 0


def test_a_missing_config_path_names_the_key_and_the_resolved_path(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    conf.mkdir()
    cfg = conf / "run.yaml"
    cfg.write_text("policy_modules: ../lost/policy.py\n")
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["simulate", "--config", str(cfg), *SYNTH, "--out", str(tmp_path)])
    assert res.exit_code != 0
    text = " ".join(res.output.split())
    assert "policy_modules: '../lost/policy.py' resolves to" in text
    assert str(tmp_path.resolve() / "lost" / "policy.py") in text
    assert "--policy-module" in text


def test_module_names_and_absolute_paths_in_a_config_stay_as_given(tmp_path) -> None:
    from tidal.sim.config_file import load_yaml

    absolute = tmp_path / "abs_policy.py"
    absolute.write_text("")
    cfg = tmp_path / "sub" / "run.yaml"
    cfg.parent.mkdir()
    cfg.write_text(f"policy_modules: [json.decoder, {absolute}]\nbase: {{policy_modules: []}}\n")
    data = load_yaml(cfg)
    assert data["policy_modules"] == ["json.decoder", str(absolute)]
    assert data["base"]["policy_modules"] == []
