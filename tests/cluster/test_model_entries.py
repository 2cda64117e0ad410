"""``--models`` entries (``id[:tp][:PpDd]``, cluster/models.py): every malformed entry is one
error naming ``--models``, the entry and the accepted syntax; well-formed ones parse back to
the numbers written."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from tidal.cli import app
from tidal.cluster.models import ENTRY_SYNTAX, Entry, parse_entry, served_models
from tidal.core.errors import ConfigError
from tidal.hardware.gpus import get_gpu

MALFORMED = [
    ("llama-2-7b:1p", "'1p' is neither a tensor-parallel degree nor a unit shape"),
    ("llama-2-7b:0p1d", "≥ 1 prefill and ≥ 1 decode engine"),
    ("llama-2-7b:1p0d", "≥ 1 prefill and ≥ 1 decode engine"),
    ("llama-2-7b:pd", "'pd' is neither"),
    ("llama-2-7b:1p1d1x", "'1p1d1x' is neither"),
    (":1p1d", "no model id"),
    (" :2", "no model id"),
    ("llama-2-7b:x", "'x' is neither"),
    ("llama-2-7b:0", "must be ≥ 1"),
    ("llama-2-7b:1p1d:2", "the unit shape comes last"),
    ("llama-2-7b:1:2:3", "at most 2"),
    ("llama-2-7b:²", "'²' is neither"),
]


@pytest.mark.parametrize(("entry", "why"), MALFORMED)
def test_a_malformed_entry_names_the_flag_the_entry_and_the_syntax(entry: str, why: str) -> None:
    with pytest.raises(ConfigError) as info:
        served_models([entry], get_gpu("h100"), 8, 2 << 20, 256)
    text = str(info.value)
    assert "--models" in text
    assert f"bad entry {entry!r}" in text
    assert why in text
    assert ENTRY_SYNTAX in text


def test_an_unknown_model_id_names_the_flag_and_the_entry() -> None:
    with pytest.raises(ConfigError, match=r"--models\): entry 'nope:1p1d': .*unknown value"):
        served_models(["nope:1p1d"], get_gpu("h100"), 8, 2 << 20, 256)


def test_the_cli_prints_one_error_for_a_malformed_entry() -> None:
    argv = ["simulate", "--cluster", "1x8:h100", "--models", "llama-2-7b:1p", "--mix"]
    res = CliRunner().invoke(app, [*argv, "servegen", "--days", "0.01"])
    assert res.exit_code != 0
    text = " ".join(res.output.split())
    assert "error: cluster.models (--models): bad entry 'llama-2-7b:1p'" in text
    assert "Traceback" not in text
    assert text.count("error:") == 1


@given(
    st.sampled_from(["llama-2-7b", "qwen3-8b", "org/Model-1.5"]),
    st.none() | st.integers(1, 64),
    st.none() | st.tuples(st.integers(1, 9), st.integers(1, 9)),
)
def test_well_formed_entries_parse_to_what_was_written(mid, tp, shape) -> None:
    text = mid + (f":{tp}" if tp is not None else "")
    text += f":{shape[0]}p{shape[1]}d" if shape else ""
    assert parse_entry(text) == Entry(mid, tp, *(shape or (0, 0)))
