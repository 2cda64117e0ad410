"""The README cannot drift: every shell block runs, and every number its prose claims is what
the command gives now (issue 31).

Each ```bash block of README.md, and each ```python block (the Python API, run with this
interpreter), is preceded by a marker (an HTML comment, invisible on the rendered page):

* ``<!-- readme-test: run -->`` — the block runs as written (``bash -e``, in a scratch
  directory holding ``docs/``), in the default test run;
* ``<!-- readme-test: reduce OLD => NEW; ... -->`` — the default run replaces each ``OLD`` by
  ``NEW`` (fewer requests, a trace window) so that the commands and their flags are checked
  in seconds; the tests marked ``slow`` (``pytest -m slow``) run the block as written and
  check its numbers;
* ``<!-- readme-test: skip REASON -->`` — not run here (an install, a server); REASON says
  which test covers it.

A block's claims follow it as ``<!-- readme-check: DIR KEY=VALUE ... [tol=P%] -->``: each
``VALUE`` (a number as the prose writes it, optionally with a unit ``ms`` or ``%``, or a
quoted string) must appear in the prose around the block *and* match ``KEY`` of
``DIR/summary.json`` (its ``metrics``) or ``DIR/plan.json`` (a dotted path) after a full-size
run, within ``tol`` (default 5 %; the simulator is deterministic, the tolerance is for the
rounding of the prose). A new block without a marker fails the test.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARKER = re.compile(r"<!--\s*readme-test:\s*(run|reduce|skip)\b(.*?)-->", re.S)
CHECK = re.compile(r"<!--\s*readme-check:\s*(\S+)\s+(.*?)-->", re.S)
UNITS = {"ms": 1e-3, "%": 1e-2, "s": 1.0, "": 1.0}


@dataclass
class Claim:
    key: str
    text: str
    """As the prose writes it (``41 ms``, ``6.63``, ``"2× h100 TP1"``)."""
    value: float | str


LANGS = ("bash", "python")
"""The fenced blocks that run (``text`` blocks, pictures and outputs, do not)."""


@dataclass
class Block:
    line: int
    kind: str
    arg: str
    script: str
    prose: str
    """The paragraph before the block, the block, and the text up to the next heading or
    shell block after it (output blocks included), without HTML comments: where its claims
    must be stated."""
    checks: list[tuple[str, list[Claim], float]] = field(default_factory=list)
    lang: str = "bash"

    @property
    def name(self) -> str:
        return f"README line {self.line}"

    def reduced(self) -> str:
        script = self.script
        for pair in self.arg.split(";"):
            if "=>" in pair:
                old, new = (s.strip() for s in pair.split("=>", 1))
                assert old in script, f"{self.name}: reduce: {old!r} is not in the block"
                script = script.replace(old, new)
        return script


def _claims(text: str) -> tuple[list[Claim], float]:
    tol = 0.05
    out = []
    for m in re.finditer(r'(\S+?)=("[^"]*"|[-\d.,]+(?:ms|%|s)?)', text):
        key, raw = m.groups()
        if key == "tol":
            tol = float(raw.rstrip("%")) / 100
            continue
        if raw.startswith('"'):
            out.append(Claim(key, raw.strip('"'), raw.strip('"')))
            continue
        num = re.match(r"([-\d.,]+)(ms|%|s)?$", raw)
        assert num is not None
        number, unit = num.group(1), num.group(2) or ""
        text_form = f"{number} {unit}".strip() if unit in ("ms", "s") else number + unit
        out.append(Claim(key, text_form, float(number.replace(",", "")) * UNITS[unit]))
    return out, tol


def parse_readme(text: str) -> list[Block]:
    """Every ```bash and ```python block with its marker, prose and checks."""
    blocks = []
    fences = list(re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S))
    for i, m in enumerate(fences):
        lang = m.group(1)
        if lang not in LANGS:
            continue
        line = text.count("\n", 0, m.start()) + 1
        before = text[max(0, m.start() - 400) : m.start()]
        marker = next(reversed(list(MARKER.finditer(before))), None)
        if marker is None or before[marker.end() :].strip():
            raise AssertionError(f"README line {line}: a {lang} block without a readme-test marker")
        prev_end = fences[i - 1].end() if i else 0
        later = [f.start() for f in fences[i + 1 :] if f.group(1) in LANGS]
        nxt = later[0] if later else len(text)
        heading = text.find("\n#", m.end())
        stop = min(nxt, heading) if heading != -1 else nxt
        prose = text[max(prev_end, m.start() - 1500) : stop]
        prose = re.sub(r"<!--.*?-->", "", prose, flags=re.S)  # the claims, not the checks
        block = Block(line, marker.group(1), marker.group(2).strip(), m.group(2), prose, lang=lang)
        for c in CHECK.finditer(text[m.end() : stop]):
            claims, tol = _claims(c.group(2))
            block.checks.append((c.group(1), claims, tol))
        blocks.append(block)
    return blocks


BLOCKS = parse_readme(README.read_text())


def _lookup(run_dir: Path, key: str) -> object:
    summary, plan = run_dir / "summary.json", run_dir / "plan.json"
    doc = json.loads((summary if summary.is_file() else plan).read_text())
    if summary.is_file() and key in doc.get("metrics", {}):
        return doc["metrics"][key]
    node: object = doc
    for part in key.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]  # type: ignore[index]
    return node


def _scratch(tmp_path: Path) -> dict[str, str]:
    """A scratch directory with ``docs/`` and a ``tidal`` on PATH that runs this checkout."""
    os.symlink(ROOT / "docs", tmp_path / "docs")
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "tidal"
    code = "import sys; sys.argv[0] = 'tidal'; from tidal.cli import main; main()"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{code}" "$@"\n')
    shim.chmod(0o755)
    from tidal.core.errors import TidalError
    from tidal.workload.paths import traces_dir

    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    # the scratch directory is outside the checkout: name the traces found from here (none
    # found: the traces bundled with the package)
    with contextlib.suppress(TidalError):
        env["TIDAL_TRACES_DIR"] = str(traces_dir())
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


def _run(block: Block, script: str, tmp_path: Path) -> None:
    env = _scratch(tmp_path)
    python = block.lang == "python"
    argv = [sys.executable, "-c", script] if python else ["bash", "-e", "-c", script]
    res = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0, f"{block.name}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"


def _check(block: Block, tmp_path: Path) -> None:
    for run_dir, claims, tol in block.checks:
        for c in claims:
            got = _lookup(tmp_path / run_dir, c.key)
            where = f"{block.name}: {run_dir} {c.key}"
            if isinstance(c.value, str):
                assert got == c.value, f"{where}: {got!r}, the README says {c.value!r}"
            else:
                assert isinstance(got, int | float), f"{where}: {got!r}"
                assert got == pytest.approx(c.value, rel=tol), (
                    f"{where} is {got:.4g} now; the README says {c.text} (±{tol:.0%})"
                )


def test_every_claim_is_stated_in_the_prose_beside_its_block() -> None:
    """The checks and the prose agree: a number edited in one but not the other fails."""
    for block in BLOCKS:
        flat = re.sub(r"\s+", " ", block.prose)
        for _, claims, _ in block.checks:
            for c in claims:
                assert c.text in flat, f"{block.name}: the prose does not state {c.text!r}"


def test_every_block_is_marked_and_skips_say_why() -> None:
    assert len(BLOCKS) >= 8
    for block in BLOCKS:
        if block.kind == "skip":
            assert block.arg, f"{block.name}: a skip must say why"
        if block.checks:
            assert block.kind != "skip", f"{block.name}: claims beside a block never run"


def test_python_blocks_are_marked_and_the_api_example_runs_here() -> None:
    """A ```python block needs a marker like a shell block; the README's Python API example
    is one the default run executes."""
    with pytest.raises(AssertionError, match="a python block without a readme-test marker"):
        parse_readme("Some prose.\n\n```python\nprint(1)\n```\n")
    [block] = parse_readme("<!-- readme-test: run -->\n```python\nprint(1)\n```\n")
    assert (block.lang, block.kind, block.script) == ("python", "run", "print(1)\n")
    assert parse_readme("```text\nengine loop\n```\n") == []  # pictures are not run
    assert any(b.lang == "python" and b.kind == "run" for b in BLOCKS)


FAST = [b for b in BLOCKS if b.kind in ("run", "reduce")]


@pytest.mark.parametrize("block", FAST, ids=lambda b: b.name)
def test_readme_block_runs(block: Block, tmp_path: Path) -> None:
    """``run`` blocks as written (and their numbers); ``reduce`` blocks reduced."""
    if block.lang == "bash" and shutil.which("bash") is None:  # pragma: no cover
        pytest.skip("needs bash")
    _run(block, block.reduced() if block.kind == "reduce" else block.script, tmp_path)
    if block.kind == "run":
        _check(block, tmp_path)


SLOW = [b for b in BLOCKS if b.kind == "reduce"]


@pytest.mark.slow
@pytest.mark.parametrize("block", SLOW, ids=lambda b: b.name)
def test_readme_block_at_full_size(block: Block, tmp_path: Path) -> None:
    """The reduced blocks as written, and the numbers the README states for them."""
    _run(block, block.script, tmp_path)
    _check(block, tmp_path)
