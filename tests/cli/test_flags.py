"""The flag tables of ``simulate`` and ``plan`` (tidal.cli.flags): every flag reaches its config
key, ``--help`` lists every flag under all its names with the default the config applies, and
the defaults listed are the config models' own."""

from __future__ import annotations

import re
import types
import typing

import pydantic
import pytest
from typer.testing import CliRunner

import tidal.experiments.space
import tidal.sim.config
from tidal.cli import app
from tidal.cli.flags import PLAN, SIMULATE
from tidal.cli.flagspec import UNSET, Flag, FlagTable
from tidal.cli.vllm_names import GRID_KEYS
from tidal.cluster.config import ClusterConfig
from tidal.core.errors import TidalError
from tidal.experiments.space import PlanSpec
from tidal.sim.config import SimulationConfig

runner = CliRunner()


class CapturedError(TidalError):
    pass


def capture(monkeypatch, module, name, argv):
    seen = []

    def fake(data, *args, **kwargs):
        seen.append(data)
        raise CapturedError("captured")

    monkeypatch.setattr(module, name, fake)
    res = runner.invoke(app, argv)
    assert seen, res.output
    return seen[0]


def dotted(d, key):
    for k in key.split("."):
        d = d[k]
    return d


def sample(flag: Flag) -> tuple[list[str], object]:
    """Command-line words giving ``flag`` a value, and the value typer hands the command."""
    if flag.switch is not UNSET:
        return [flag.names[0]], True
    if flag.decls and "/" in flag.decls[0]:
        return [flag.decls[0].split("/")[0]], True
    args = typing.get_args(flag.type)
    if int in args:
        return [flag.names[0], "7"], 7
    if float in args:
        return [flag.names[0], "0.25"], 0.25
    if any(typing.get_origin(a) is list for a in args):
        return [flag.names[0], "7"], ["7"]
    return [flag.names[0], "7"], "7"


def expected(flag: Flag, value: object) -> object:
    out = flag.value(value)
    return [out] if flag.axis and not isinstance(out, list) else out


@pytest.mark.parametrize("flag", SIMULATE.flags, ids=[f.name for f in SIMULATE])
def test_each_simulate_flag_reaches_its_config_key(monkeypatch, flag):
    words, value = sample(flag)
    cluster = flag.key.startswith("cluster.") and flag.name not in ("cluster", "models")
    argv = ["simulate", *words, *(["--cluster", "1x8:h100"] if cluster else [])]
    data = capture(monkeypatch, tidal.sim.config, "load_config", argv)
    assert dotted(data, flag.key) == expected(flag, value)


@pytest.mark.parametrize("flag", PLAN.flags, ids=[f.name for f in PLAN])
def test_each_plan_flag_reaches_its_config_key(monkeypatch, flag):
    words, value = sample(flag)
    base = [] if flag.name == "num_requests" else ["--num-requests", "10"]
    argv = ["plan", "--out", "unused", *base, *words]
    data = capture(monkeypatch, tidal.experiments.space, "load_plan_spec", argv)
    got = data["search"][flag.key] if flag.axis else dotted(data, flag.key)
    assert got == expected(flag, value)


def test_cluster_flags_are_refused_outside_a_cluster():
    """Issue 32 §2: a cluster flag in a single-instance run is refused, not dropped."""
    argv = ["simulate", "--alpha", "0.9", "--mix", "servegen", "--rate", "3"]
    res = runner.invoke(app, argv)
    assert res.exit_code == 2
    assert "--alpha, --mix: ignored in a single-instance run" in res.output


def test_in_a_cluster_rate_and_workload_are_the_mix(monkeypatch):
    argv = ["simulate", "--cluster", "1x8:h100", "--rate", "3", "--workload", "infercept-mix"]
    data = capture(monkeypatch, tidal.sim.config, "load_config", argv)
    assert data["cluster"] == {
        "spec": "1x8:h100",
        "mix": {"rate": 3.0, "augmented": "infercept-mix"},
    }
    assert data["workload"] == {}


def model_default(model: type[pydantic.BaseModel], key: str) -> object:
    head, _, rest = key.partition(".")
    field = model.model_fields[head]
    if not rest:
        return None if field.is_required() else field.get_default(call_default_factory=True)
    sub = field.annotation
    if isinstance(sub, types.UnionType):
        sub = next(a for a in typing.get_args(sub) if a is not type(None))
    return model_default(sub, rest)


def config_default(cmd: str, key: str) -> object:
    if cmd == "plan":
        if not key.startswith("base."):
            return model_default(PlanSpec, key)
        key = key.removeprefix("base.")
    if key.startswith("cluster."):
        return model_default(ClusterConfig, key.removeprefix("cluster."))
    return model_default(SimulationConfig, key)


def alternatives(table: FlagTable) -> set[str]:
    """Flags giving another form of an earlier flag's key (--burstiness of --arrival-cv)."""
    keys: set[str | None] = set()
    alt = set()
    for f in table:
        if f.key in keys:
            alt.add(f.name)
        keys.add(f.key)
    return alt


TABLES = {"simulate": SIMULATE, "plan": PLAN}
ROWS = [(cmd, f) for cmd, t in TABLES.items() for f in t if f.name not in alternatives(t)]


@pytest.mark.parametrize(("cmd", "flag"), ROWS, ids=[f"{c}-{f.name}" for c, f in ROWS])
def test_the_default_listed_is_the_configs(cmd, flag):
    if flag.axis or flag.switch is not UNSET:
        assert flag.shows is None
        return
    default = config_default(cmd, flag.key)
    if isinstance(default, list):
        default = ",".join(default) or None
    assert flag.shows == default


def _help(cmd):
    res = runner.invoke(app, [cmd, "--help"], terminal_width=300, env={"COLUMNS": "300"})
    return re.sub(r"[\s│]+", " ", res.output)


@pytest.mark.parametrize("cmd", TABLES)
def test_help_lists_every_name_and_default(cmd):
    text = _help(cmd)
    for flag in TABLES[cmd]:
        for name in (n for names in flag.names for n in names.split("/")):
            assert re.search(rf"(^|[\s,]){re.escape(name)}([\s,]|$)", text), name
        if flag.shows is not None:
            assert f"(default: {flag.shows})" in text, flag.name


def test_shared_flags_have_the_same_names_in_each_command():
    plan = {f.name: f for f in PLAN}
    shared = [f for f in SIMULATE if f.name in plan]
    assert len(shared) >= 15
    for f in shared:
        assert plan[f.name].names == f.names


def test_every_vllm_name_is_a_grid_key():
    vllm = {n.lstrip("-").replace("-", "_") for f in SIMULATE for n in f.vllm}
    assert vllm - set(GRID_KEYS) == {"tp", "burstiness"}  # tp is Tidal's key; burstiness → CV


def test_two_flags_of_one_key_are_refused():
    table = FlagTable([Flag("a", int, "", "x.y"), Flag("b", int, "", "x.y", convert=lambda v: -v)])
    assert table.config({"a": 1}) == {"x": {"y": 1}}
    assert table.config({"b": 1}) == {"x": {"y": -1}}
    with pytest.raises(TidalError, match="y: give --a or --b, not both"):
        table.config({"a": 1, "b": 2})


def test_a_switch_sets_its_value_only_when_given():
    table = FlagTable([Flag("no_x", bool, "", "x", default=False, switch=False)])
    assert table.config({"no_x": False}) == {}
    assert table.config({"no_x": True}) == {"x": False}


def test_a_flag_given_twice_in_a_table_is_an_error():
    with pytest.raises(ValueError, match="given twice"):
        FlagTable([Flag("a", int, "")], [Flag("a", str, "")])
