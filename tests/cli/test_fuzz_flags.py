"""Fuzzing ``tidal simulate``'s flags and YAML configs — issue 32 "What to build" §8.

Flags: hypothesis draws combinations of the :data:`tidal.cli.flags.SIMULATE` flags, each with a
value drawn for its type (ints with 0, negatives and 2^63; floats with nan, inf and 1e300;
strings with Rich markup such as ``[/x]``; the probe values of tests/cli/test_flag_modes.py so
that valid runs are reached too) and unknown or misspelt flag names, on a tiny synthetic
workload, and runs them in-process with typer's CliRunner. YAML: documents with anchors and
aliases, wrong types, deep nesting and unknown keys go through ``load_yaml`` and the command.

Every example must exit 0 or 2 with the error named (never a traceback: an exception other than
``SystemExit``), within 60 s (an alarm) and without raising the process peak 2 GiB above the
start. Marked ``fuzz``: a short budget in the default run (``TIDAL_FUZZ_EXAMPLES``, default 25
per test); ``TIDAL_FUZZ_EXAMPLES=2000 pytest -m fuzz`` is the long run.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.cli.test_flag_modes import PROBE
from tests.workload.test_fuzz_bytes import _peak_guard
from tidal.cli import app
from tidal.cli.flags import SIMULATE
from tidal.cli.flagspec import UNSET
from tidal.core.errors import TidalError
from tidal.sim.config import load_config, load_yaml

pytestmark = pytest.mark.fuzz

EXAMPLES = int(os.environ.get("TIDAL_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # the alarm below bounds each example at 60 s, and ends a hang
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LIMIT_S = 60
BASE = ["simulate", "--num-requests", "4", "--rate", "10", "--output-len", "8"]
"""The tiny workload every flag combination starts from (a drawn flag given later wins)."""

INTS = ["0", "-1", "1", "2", "3", "7", "64", "2147483648", "9223372036854775808",
        "-9223372036854775809", "1" + "0" * 30, "1.5", "abc", ""]  # fmt: skip
FLOATS = ["0", "-1", "0.5", "1", "3", "nan", "inf", "-inf", "1e300", "-1e300", "1e-300",
          "1e400", "abc", ""]  # fmt: skip
TEXTS = ["", "x", "[/x]", "[bold]x[/bold]", "[link=file:///etc]y", "nan", "-1", "0", "ü€",
         "a,b,,c", "x" * 300, "../../etc/passwd", "--rate"]  # fmt: skip
UNKNOWN = ["--no-such-flag", "--rat", "--num_requests", "--Rate", "-x", "--", "--rate=",
           "--tp=", "--rate=1=2"]  # fmt: skip


@contextmanager
def _alarm(seconds: int) -> Iterator[None]:
    """Fail the example when it runs past ``seconds`` (a hang is ended, not waited for)."""

    def _raise(signum: int, frame: Any) -> None:
        raise AssertionError(f"over {seconds} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _values(flag) -> st.SearchStrategy[list[str]]:
    """The argv words of one flag with a value drawn for its type."""
    name = flag.names[0]
    kind = str(flag.type)
    if flag.switch is not UNSET:
        return st.just([name])  # --no-fast-forward, --no-prefix-caching: a switch
    if "/" in name:
        return st.sampled_from(name.split("/")).map(lambda n: [n])
    probe = PROBE.get(flag.name, (None, {}))[0]
    own = [str(v) for v in (probe if isinstance(probe, list) else [probe]) if v is not None]
    pool = INTS if "int" in kind else FLOATS if "float" in kind else TEXTS
    alias = st.sampled_from(flag.names)
    value = st.sampled_from(own + pool) if own else st.sampled_from(pool)
    return st.tuples(alias, value).map(lambda p: list(p))


FLAGS = list(SIMULATE)


@st.composite
def argv(draw: st.DrawFn) -> list[str]:
    """``tidal simulate`` over the tiny workload with 0–6 drawn flags, maybe an unknown one."""
    words = list(BASE)
    for flag in draw(st.lists(st.sampled_from(FLAGS), max_size=6)):
        words += draw(_values(flag))
    if draw(st.integers(0, 4)) == 0:
        words.insert(draw(st.integers(1, len(words))), draw(st.sampled_from(UNKNOWN)))
    return words


def _invoke(words: list[str]) -> None:
    """Run the command; exit 0, or exit 2 with a message — never a traceback or a hang."""
    with _alarm(LIMIT_S):
        res = _peak_guard(lambda: CliRunner().invoke(app, words))
    assert not isinstance(res, type(None))
    exc = res.exception  # type: ignore[attr-defined]
    assert exc is None or isinstance(exc, SystemExit), f"{words}: traceback {exc!r}"
    code = res.exit_code  # type: ignore[attr-defined]
    assert code in (0, 2), f"{words}: exit {code}\n{res.output}"  # type: ignore[attr-defined]
    if code == 2:
        assert res.output.strip(), f"{words}: refused without a message"  # type: ignore[attr-defined]


@FUZZ
@given(argv())
@example([*BASE, "--rate", "nan"])
@example([*BASE, "--model", "[/x]"])
@example([*BASE, "--tp", "9223372036854775808"])
@example([*BASE, "--prompt-len", "0"])
@example([*BASE, "--arrival-cv", "1e300"])
@example([*BASE, "--no-such-flag", "1"])
def test_simulate_flag_combinations_exit_0_or_a_named_error(words: list[str]) -> None:
    _invoke(words)


# ---- YAML -----------------------------------------------------------------------------------

KEYS = sorted({k for f in SIMULATE if (k := f.key)})
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["[/x]", "nan", ".inf", "1e300", "0x10", "yes", "~", "2026-01-01"]),
)  # fmt: skip


def _nested(dotted: str, value: object) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cur = out
    keys = dotted.split(".")
    for k in keys[:-1]:
        cur = cur.setdefault(k, {})
    cur[keys[-1]] = value
    return out


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out


@st.composite
def structured(draw: st.DrawFn) -> str:
    """A config of real keys with values of any type (lists and maps too), maybe deep."""
    doc: dict[str, Any] = {"workload": {"num_requests": 4, "rate": 10, "output_len": 8}}
    value = st.recursive(SCALARS, lambda c: st.lists(c, max_size=3) | st.dictionaries(
        st.text(max_size=5), c, max_size=3), max_leaves=8)  # fmt: skip
    for key in draw(st.lists(st.sampled_from([*KEYS, "no_such.key", "workload.nope"]),
                             max_size=5)):  # fmt: skip
        doc = _merge(doc, _nested(key, draw(value)))
    return yaml.safe_dump(doc, allow_unicode=True)


@st.composite
def aliased(draw: st.DrawFn) -> str:
    """Anchors and aliases: a billion-laughs ladder, a merge key, a self-reference, deep nests."""
    kind = draw(st.integers(0, 4))
    n = draw(st.integers(1, 12))
    if kind == 0:
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, n)]
        return "\n".join(lines) + f"\nworkload: {{num_requests: 4, junk: *a{n - 1}}}\n"
    if kind == 1:
        return ("base: &b {num_requests: 4, rate: 10}\nworkload:\n  <<: *b\n"
                f"  output_len: {draw(st.sampled_from(['8', '-8', 'x', '[1]', '{a: 1}']))}\n")
    if kind == 2:
        return "workload: &w {num_requests: 4, self: *w}\n"
    if kind == 3:
        depth = draw(st.integers(10, 3000))
        return "workload: " + "[" * depth + "]" * depth + "\n"
    return "workload: " + "{a: " * n + "1" + "}" * n + "\n"


def _load_yaml_file(tmp: Path, text: str) -> None:
    """``load_yaml`` → ``load_config``: a mapping and a config, or a named error."""
    path = tmp / "c.yaml"
    path.write_text(text, encoding="utf-8")
    text = "ok"
    with _alarm(LIMIT_S):
        try:
            _peak_guard(lambda: load_config(load_yaml(path), SIMULATE.key_names()))
        except TidalError as err:
            text = str(err).strip()
    assert text, "an error without text"


@FUZZ
@given(st.one_of(structured(), aliased(), st.text(max_size=200)))
@example("workload: {num_requests: 4, rate: .nan}\n")
@example("workload: !!python/object/apply:os.system [echo hi]\n")
@example("[/x]: 1\n")
@example("workload: " + "[" * 3000 + "]" * 3000 + "\n")  # found: a RecursionError, and seconds
@example("".join("  " * i + f"k{i}:\n" for i in range(1200)))  # block nesting: the same
def test_yaml_configs_load_or_give_a_named_error(tmp_path_factory, text: str) -> None:
    _load_yaml_file(tmp_path_factory.mktemp("yaml"), text)


@settings(FUZZ, max_examples=max(EXAMPLES // 3, 5))
@given(structured())
def test_simulate_with_a_fuzzed_config_exits_0_or_2(tmp_path_factory, text: str) -> None:
    """The whole command over a structured config (the run too, where it is valid)."""
    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_text(text, encoding="utf-8")
    _invoke(["simulate", "--config", str(path)])
