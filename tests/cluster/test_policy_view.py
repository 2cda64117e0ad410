"""Placement policies read the cluster only through ClusterView and change it only through
ClusterActions (tidal.cluster.view): checked in their source, and at run time with a view
that refuses writes and every name outside the protocol, under which each placement still
reproduces its golden digest."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tidal.cluster.policies as policies
from tests.cluster.test_exact_hash import CASES, GOLDEN, run_digest
from tests.conftest import needs_traces
from tidal.cluster.policies.base import ClusterPolicy
from tidal.cluster.view import ClusterActions, ClusterView

VIEW = {n for n in vars(ClusterView) if not n.startswith("_")}
ACTIONS = {n for n in vars(ClusterActions) if not n.startswith("_")}
SOURCES = sorted(Path(policies.__file__).parent.glob("*.py"))


def _target(node: ast.expr) -> str | None:
    """``view``/``act`` when ``node`` is ``self.view``, ``view``, ``self.act`` or ``act``."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr in ("view", "act")
    ):
        return node.attr
    if isinstance(node, ast.Name) and node.id in ("view", "act"):
        return node.id
    return None


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_policies_use_only_the_view_and_the_actions(path):
    tree = ast.parse(path.read_text())
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "ctl":
            bad.append(f"{node.lineno}: ctl")
        if isinstance(node, ast.ImportFrom) and node.module == "tidal.cluster.controller":
            bad.append(f"{node.lineno}: imports the controller")
        if isinstance(node, ast.Attribute):
            kind = _target(node.value)
            allowed = {"view": VIEW, "act": ACTIONS}.get(kind or "", set())
            if kind and node.attr not in allowed:
                bad.append(f"{node.lineno}: {kind}.{node.attr}")
            if kind == "view" and isinstance(node.ctx, ast.Store):
                bad.append(f"{node.lineno}: writes view.{node.attr}")
    assert not bad, f"{path.name}: " + ", ".join(bad)


class ReadOnlyView:
    """The controller as the protocol shows it: other names and every write refused."""

    def __init__(self, ctl) -> None:
        object.__setattr__(self, "_ctl", ctl)

    def __getattr__(self, name: str):
        if name not in VIEW:
            raise AttributeError(f"ClusterView has no {name!r}")
        value = getattr(self._ctl, name)
        return tuple(value) if isinstance(value, list) and name == "gpu_busy" else value

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"a policy wrote view.{name}")


@needs_traces
@pytest.mark.parametrize("case", ["dedicated", "serverlessllm", "muxserve", "warmserve"])
def test_each_placement_runs_on_a_read_only_view(monkeypatch, case):
    init = ClusterPolicy.__init__

    def read_only(self, view, act):
        init(self, ReadOnlyView(view), act)

    monkeypatch.setattr(ClusterPolicy, "__init__", read_only)
    assert run_digest(CASES[case]) == GOLDEN[case]
