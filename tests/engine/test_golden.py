"""Behaviour preservation: every scheduler composition reproduces the committed per-column
hashes of its results (``golden_cases.py`` says how to regenerate them, and when)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import traces_available
from tests.engine.golden_cases import CASES, GOLDEN, compute

_GOLDEN = json.loads(GOLDEN.read_text())
_TRACE_CASES = {n for n in CASES if n.startswith("cluster.")}


@pytest.mark.parametrize("name", sorted(CASES))
def test_results_match_the_golden_hashes(name):
    if name in _TRACE_CASES and not traces_available():
        pytest.skip("shared/traces not found (set TIDAL_TRACES_DIR)")
    if name.startswith("runtime."):
        pytest.importorskip("torch")
    got = compute([name])[name]
    want = _GOLDEN[name]
    diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    assert not diff, f"{name}: columns changed: {diff}"


def test_every_case_has_a_golden_entry():
    assert set(_GOLDEN) == set(CASES)
