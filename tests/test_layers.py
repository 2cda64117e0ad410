"""No import runs upward and no import cycle: every ``tidal.X`` import in src/tidal (module level
or inside a function) names a package of a strictly lower layer, or its own package
(ARCHITECTURE.md); and the graph of module imports (module level and inside functions; type-only
imports under ``if TYPE_CHECKING:`` never run and are left out) has no cycle."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import tidal

LAYERS = {
    "core": 0,
    "hardware": 1,
    "workload": 1,
    "engine": 2,
    "measure": 2,
    "batching": 3,
    "augment": 3,
    "cluster": 4,
    "sim": 5,
    "runtime": 5,
    "experiments": 6,
    "api": 7,
    "report": 7,
    "cli": 8,
}
"""Layer of each package, bottom up; packages of one layer do not import each other. The papers'
policies (``batching``: EB/EB⁺; ``augment``: INFERCEPT/AugServe) sit between the engine core and
the cluster that composes them."""

SRC = Path(tidal.__file__).parent


def _walk(node: ast.AST, runtime_only: bool) -> Iterator[ast.AST]:
    """Every node under ``node``; with ``runtime_only``, not the bodies of ``if TYPE_CHECKING``."""
    for child in ast.iter_child_nodes(node):
        type_only = isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
        if runtime_only and type_only:
            assert isinstance(child, ast.If)
            yield from (n for s in child.orelse for n in (s, *_walk(s, runtime_only)))
            continue
        yield child
        yield from _walk(child, runtime_only)


def import_targets(
    path: Path, runtime_only: bool = False, root: Path | None = None
) -> list[tuple[int, str, list[str]]]:
    """(line, module, imported names) of every absolute ``tidal.*`` import in a file under
    ``root`` (default: the package), relative ones resolved; ``import a.b`` imports no names."""
    package = ".".join(("tidal", *path.relative_to(root or SRC).parent.parts))
    found: list[tuple[int, str, list[str]]] = []
    for node in _walk(ast.parse(path.read_text(), str(path)), runtime_only):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.append((node.lineno, base, [a.name for a in node.names]))
    return [(line, m, names) for line, m, names in found if m.startswith("tidal.")]


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute ``tidal.*`` import in a file, relative ones resolved."""
    return [(line, m) for line, m, _ in import_targets(path)]


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


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, dict[str, int]]:
    """module → {imported module: line} over the modules under ``root`` (a package named
    ``tidal``). ``from p import x`` imports module ``p.x`` when that is a module, else ``p``;
    importing ``a.b`` is an edge to ``a.b`` only (a package's ``__init__`` that imports its own
    modules is not a cycle)."""
    files = {module_name(f, root): f for f in sorted(root.rglob("*.py"))}
    graph: dict[str, dict[str, int]] = {m: {} for m in files}
    for mod, f in files.items():
        for line, target, names in import_targets(f, runtime_only=True, root=root):
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in files]
            for t in subs or ([target] if target in files else []):
                if t != mod:
                    graph[mod].setdefault(t, line)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def describe_cycle(graph: dict[str, dict[str, int]], comp: list[str]) -> str:
    """The imports inside one cycle, ``a:line -> b`` each."""
    members = set(comp)
    edges = [f"{a}:{line} -> {b}" for a in comp for b, line in graph[a].items() if b in members]
    return "import cycle among " + ", ".join(comp) + "\n  " + "\n  ".join(edges)


def test_every_package_has_a_layer():
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert packages - {"configs"} == set(LAYERS)


def test_no_import_runs_upward():
    bad = [b for f in sorted(SRC.rglob("*.py")) for b in upward_imports(f)]
    assert not bad, "\n".join(bad)


def test_no_import_cycle():
    graph = import_graph(SRC)
    found = cycles(graph)
    assert not found, "\n".join(describe_cycle(graph, c) for c in found)


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
        ("engine", "from tidal.batching.eb import ExclusiveBatching", True),
        ("batching", "from tidal.augment.bundles import SERVING_POLICIES", True),
        ("augment", "from tidal.engine.build import build_scheduler", False),
    ],
)
def test_the_walker_catches_upward_imports(tmp_path, monkeypatch, own, code, upward):
    fake = tmp_path / "tidal"
    (fake / own).mkdir(parents=True)
    (fake / own / "mod.py").write_text(code + "\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["SRC"]), "SRC", fake)
    assert bool(upward_imports(fake / own / "mod.py")) is upward


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "tidal"
    for rel, code in {"__init__.py": "", "a/__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(code)
    return root


@pytest.mark.parametrize(
    ("files", "cycle"),
    [
        ({"a/x.py": "import tidal.a.y\n", "a/y.py": "from tidal.a import x\n"}, ["x", "y"]),
        # inside a function it still runs, so it still closes a cycle
        ({"a/x.py": "def f():\n    from tidal.a.y import g\n", "a/y.py": "import tidal.a.x\n"},
         ["x", "y"]),
        # three modules around
        ({"a/x.py": "from . import y\n", "a/y.py": "from .z import q\n",
          "a/z.py": "from tidal.a.x import p\n"}, ["x", "y", "z"]),
        # type-only imports never run
        ({"a/x.py": "import typing\nif typing.TYPE_CHECKING:\n    from tidal.a.y import g\n",
          "a/y.py": "import tidal.a.x\n"}, []),
        # a package that imports its own modules is no cycle
        ({"a/__init__.py": "from tidal.a import x\n", "a/x.py": "from tidal.a.y import q\n",
          "a/y.py": ""}, []),
    ],
)  # fmt: skip
def test_the_walker_catches_cycles(tmp_path, files, cycle):
    graph = import_graph(_package(tmp_path, files))
    assert cycles(graph) == ([[f"tidal.a.{m}" for m in cycle]] if cycle else [])


STATE_WRITE = re.compile(r"\b\w+\.state\s*=\s*RequestState\.")
STATS_GETATTR = re.compile(r"getattr\(\s*(?:self\.)?(?:kv|_kv|executor|_executor)\b")


def test_only_the_engine_core_writes_request_state_and_stats_are_not_fished():
    """Issue 30: a request's state changes only in ``engine/`` (the scheduler owns every
    ending), and KV managers and executors give their counters through methods
    (``cache_stats()``), never through ``getattr`` on them."""
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        text = path.read_text()
        if not rel.startswith("engine/"):
            bad += [f"{rel}: writes a request's state" for _ in STATE_WRITE.finditer(text)]
        bad += [f"{rel}: getattr on a KV manager or executor" for _ in STATS_GETATTR.finditer(text)]
    assert not bad, "\n".join(bad)


def test_the_state_and_getattr_patterns_match_what_they_forbid():
    assert STATE_WRITE.search("        req.state = RequestState.PAUSED")
    assert not STATE_WRITE.search("if req.state == RequestState.PAUSED:")
    assert STATS_GETATTR.search('getattr(kv, "num_evicted_blocks", 0)')
    assert STATS_GETATTR.search('getattr(self.executor, "sampled", None)')
    assert not STATS_GETATTR.search('getattr(self._perf, "spec_affine", None)')
