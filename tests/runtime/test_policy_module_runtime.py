"""``policy_modules`` in the real engine (``tidal serve --policy-module``): a batching policy
in one file outside the package is imported before the registries are read and drives the
real engine by its name; a bad module is refused naming the key and the flag."""

from __future__ import annotations

import textwrap

import pytest

from tests.runtime.helpers import prompts, run, tiny_engine
from tidal.core.errors import ConfigError
from tidal.engine.policy import BATCHING

pytest.importorskip("torch")

POLICY = '''
from tidal.engine.mb import MixedBatching
from tidal.engine.policy import BATCHING


@BATCHING.register("{name}")
class CountingRuntime(MixedBatching):
    """Mixed batching that counts the plans it made."""

    name = "{name}"

    def __init__(self, state, options):
        super().__init__(state)
        self.calls = 0

    def schedule(self, now_ns):
        self.calls += 1
        return super().schedule(now_ns)
'''


@pytest.fixture
def policy_file(tmp_path):
    name = "counting-runtime-test"
    path = tmp_path / "counting_runtime.py"
    path.write_text(textwrap.dedent(POLICY.format(name=name)))
    yield name, path
    BATCHING._items.pop(name, None)


def test_a_policy_file_drives_the_real_engine_by_its_name(policy_file):
    name, path = policy_file
    ps = prompts(4, seed=5)
    rt = tiny_engine(batching=name, policy_modules=[str(path)])
    outs, _ = run(rt, ps, max_tokens=6)
    policy = rt.scheduler.policy
    assert type(policy).__name__ == "CountingRuntime"
    assert policy.calls >= 6  # one plan per step at least: six tokens each
    ref, _ = run(tiny_engine(), ps, max_tokens=6)
    assert outs == ref  # mixed batching underneath: the same greedy tokens


def test_a_bad_policy_module_names_the_key_and_the_flag(tmp_path):
    with pytest.raises((ConfigError, ValueError)) as err:
        tiny_engine(policy_modules=[str(tmp_path / "missing_policy.py")])
    text = str(err.value)
    assert "policy_modules" in text
    assert "--policy-module" in text
