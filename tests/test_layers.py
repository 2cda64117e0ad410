"""No import runs upward: every ``tidal.X`` import in src/tidal (module level or inside a
function) names a package of a strictly lower layer, or its own package (ARCHITECTURE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tidal

LAYERS = {
    "core": 0,
    "hardware": 1,
    "workload": 1,
    "engine": 2,
    "measure": 2,
    "cluster": 3,
    "sim": 4,
    "runtime": 4,
    "experiments": 5,
    "api": 6,
    "report": 6,
    "cli": 7,
}
"""Layer of each package, bottom up; packages of one layer do not import each other."""

SRC = Path(tidal.__file__).parent


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute ``tidal.*`` import in a file, relative ones resolved."""
    package = ".".join(("tidal", *path.relative_to(SRC).parent.parts))
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.append((node.lineno, base))
    return [(line, m) for line, m in found if m.startswith("tidal.")]


def upward_imports(path: Path) -> list[str]:
    parts = path.relative_to(SRC).parts
    if len(parts) == 1:  # tidal/__init__.py and top-level modules
        return []
    own = parts[0]
    bad = []
    for line, module in imports(path):
        target = module.split(".")[1]
        if target == own or target not in LAYERS:
            continue
        if LAYERS[target] >= LAYERS[own]:
            bad.append(f"{path.relative_to(SRC)}:{line} ({own}) imports {module} ({target})")
    return bad


def test_every_package_has_a_layer():
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert packages - {"configs"} == set(LAYERS)


def test_no_import_runs_upward():
    bad = [b for f in sorted(SRC.rglob("*.py")) for b in upward_imports(f)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("own", "code", "upward"),
    [
        ("experiments", "from tidal.report.io import write_json", True),
        ("experiments", "def f():\n    import tidal.cli.plan", True),
        ("sim", "from tidal.runtime import engine", True),
        ("sim", "from tidal.engine.state import EngineState", False),
        ("report", "from tidal.experiments.results import write_run", False),
        ("engine", "from . import policy", False),
        ("engine", "from ..sim import run", True),
    ],
)
def test_the_walker_catches_upward_imports(tmp_path, monkeypatch, own, code, upward):
    fake = tmp_path / "tidal"
    (fake / own).mkdir(parents=True)
    (fake / own / "mod.py").write_text(code + "\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["SRC"]), "SRC", fake)
    assert bool(upward_imports(fake / own / "mod.py")) is upward
