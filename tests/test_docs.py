"""The repository explains itself: everything a source file (``src/``, ``bench/``) cites under
``docs/`` exists (the numbered section or the ``#anchor`` too), nothing cites the workshop folder
outside the repository or a machine's absolute ``/work/`` path, and the relative links of the
repository's markdown (and their anchors) resolve in a fresh clone without any sibling folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tidal"
DOC_PATH = re.compile(r"(?<![\w/])docs/[\w./-]*\w")
"""A path under the repository's docs/ (not a URL route such as ``/docs/oauth2-redirect``)."""
SECTION = re.compile(
    r"docs/([\w/.-]+\.md)`{0,2}'?s? ?(?:§ ?(\d+(?:\.\d+)?)|(Appendix [A-Z]))(?:,? (Q\d+)\b)?"
)
"""A numbered section of a note under docs/ (``docs/research/ebplus.md`` §2.5,
``docs/DESIGN.md`` §1), and an open question of it (``docs/research/ebplus.md`` §7 Q4)."""
ANCHOR = re.compile(r"(?<![\w/])docs/([\w/.-]+\.md)#([\w-]+)")
OUTSIDE = re.compile(r"shared/(?!traces\b)[\w./-]+")
"""``shared/traces`` is a data directory the workload loader searches at run time (not a
citation)."""
WORKPLACE = re.compile(r"(?<![\w.])/work/[\w./+-]*")
"""An absolute path of one machine (a fresh clone has no such folder)."""
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
LINK_ANCHOR = re.compile(r"\]\(([^)#\s]*)#([^)\s]+)\)")
MARKDOWN = ["README.md", "BENCHMARKS.md", "docs", "bench"]


def _sources() -> list[Path]:
    """The Python files whose docstrings and comments may cite docs/: the package and the
    benchmark scripts."""
    return sorted([*SRC.rglob("*.py"), *(ROOT / "bench").glob("*.py")])


def _markdown(doc: str) -> list[Path]:
    path = ROOT / doc
    if doc.endswith(".md"):
        return [path]
    depth = "**/*.md" if doc == "docs" else "*.md"  # bench/results: measured tables, not prose
    return sorted(path.glob(depth))


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(note: Path) -> set[str]:
    """Every heading's anchor in ``note``; a repeated heading also gets ``-1``, ``-2``…"""
    seen: dict[str, int] = {}
    out = set()
    fence = False
    for line in note.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"#{1,6} (.+?)#*$", line)
        if m:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _headings(note: Path) -> set[str]:
    """Section numbers (``2``, ``2.5``) and appendix names of a research note's headings."""
    out = set()
    for line in note.read_text().splitlines():
        m = re.match(r"#+ (?:(\d+(?:\.\d+)?)\.? |(Appendix [A-Z])\.)", line)
        if m:
            out.add(m.group(1) or m.group(2))
    return out


def test_every_docs_path_cited_in_the_sources_exists():
    missing = {
        f"{p.relative_to(ROOT)}: {ref}"
        for p in _sources()
        for ref in DOC_PATH.findall(p.read_text())
        if not (ROOT / ref.rstrip(".")).exists()
    }
    assert not missing, sorted(missing)


REPO_PATH = re.compile(r"(?<![\w/.])(?:bench|tests)/[\w./-]*\w")
"""A file of the repository outside docs/ that a source cites (``bench/robustness.py``; a
function as ``bench/roofline_fit.tp_capped``)."""


def _exists(ref: str) -> bool:
    """``ref`` is a path of the checkout, or ``FILE.function`` of a Python file defining it."""
    if (ROOT / ref).exists():
        return True
    stem, _, name = ref.rpartition(".")
    py = ROOT / f"{stem}.py"
    found = py.is_file() and re.search(rf"^def {name}\b", py.read_text(), re.M) is not None
    return bool(stem) and found


def test_every_repository_path_cited_in_the_sources_exists():
    missing = {
        f"{p.relative_to(ROOT)}: {ref}"
        for p in SRC.rglob("*.py")
        for ref in REPO_PATH.findall(p.read_text())
        if not _exists(ref.rstrip("."))
    }
    assert not missing, sorted(missing)


def test_every_cited_research_section_exists():
    missing = set()
    for p in _sources():
        for note, number, appendix, question in SECTION.findall(p.read_text()):
            path = ROOT / "docs" / note
            ok = path.exists() and (number or appendix) in _headings(path)
            if ok and question:  # an open question is listed as ``**Q4**``
                ok = f"**{question}**" in path.read_text()
            if not ok:
                missing.add(f"{p.relative_to(ROOT)}: docs/{note} {number or appendix} {question}")
    assert not missing, sorted(missing)


def test_no_source_cites_the_workshop_outside_the_repository():
    cites = {
        f"{p.relative_to(ROOT)}: {m}" for p in _sources() for m in OUTSIDE.findall(p.read_text())
    }
    assert not cites, sorted(cites)


def test_every_cited_anchor_exists():
    missing = {
        f"{p.relative_to(ROOT)}: docs/{note}#{anchor}"
        for p in _sources()
        for note, anchor in ANCHOR.findall(p.read_text())
        if not (ROOT / "docs" / note).exists() or anchor not in _anchors(ROOT / "docs" / note)
    }
    assert not missing, sorted(missing)


def test_no_source_names_a_machine_path():
    """Not ``/work/…``: a default path to a peer tool or data set is relative to the checkout
    or comes from the environment."""
    cites = {
        f"{p.relative_to(ROOT)}: {m}" for p in _sources() for m in WORKPLACE.findall(p.read_text())
    }
    assert not cites, sorted(cites)


@pytest.mark.parametrize("doc", MARKDOWN)
def test_relative_markdown_links_resolve(doc):
    broken = []
    for f in _markdown(doc):
        for target in LINK.findall(f.read_text()):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            if not (f.parent / target).exists():
                broken.append(f"{f.relative_to(ROOT)} → {target}")
    assert not broken, broken


@pytest.mark.parametrize("doc", MARKDOWN)
def test_markdown_anchors_resolve(doc):
    """``[x](NOTE.md#section)`` and ``[x](#section)``: the heading exists."""
    broken = []
    for f in _markdown(doc):
        for target, anchor in LINK_ANCHOR.findall(f.read_text()):
            if re.match(r"[a-z]+:", target) or not (target == "" or target.endswith(".md")):
                continue
            note = f if target == "" else f.parent / target
            if not note.exists() or anchor not in _anchors(note):
                broken.append(f"{f.relative_to(ROOT)} → {target}#{anchor}")
    assert not broken, broken


@pytest.mark.parametrize("doc", MARKDOWN)
def test_markdown_cites_nothing_outside_the_clone(doc):
    """No workshop note (``shared/research/…``) and no machine path (``/work/…``); the traces
    folder beside the checkout (``../shared/traces``) is data the loader finds, not a citation."""
    cites = [
        f"{f.relative_to(ROOT)}: {m}"
        for f in _markdown(doc)
        for pattern in (OUTSIDE, WORKPLACE)
        for m in pattern.findall(f.read_text())
    ]
    assert not cites, cites


def test_the_checks_catch_what_they_are_for(tmp_path):
    """The patterns find a dangling path, a missing section and a workshop citation."""
    text = (
        "see ``docs/research/ebplus.md`` §2.5 and docs/research/nope.md §1 at /docs/route; "
        "formulas in shared/research/x.md; traces in shared/traces"
    )
    assert DOC_PATH.findall(text) == ["docs/research/ebplus.md", "docs/research/nope.md"]
    sections = [("research/ebplus.md", "2.5", "", ""), ("research/nope.md", "1", "", "")]
    assert SECTION.findall(text) == sections
    assert OUTSIDE.findall(text) == ["shared/research/x.md"]
    note = tmp_path / "n.md"
    note.write_text("# T\n## 2. A\n### 2.5 B\n## Appendix B. C\n")
    assert _headings(note) == {"2", "2.5", "Appendix B"}
    assert SECTION.findall("(docs/DESIGN.md §2)") == [("DESIGN.md", "2", "", "")]
    assert SECTION.findall("(``docs/research/ebplus.md`` §7 Q4)") == [
        ("research/ebplus.md", "7", "", "Q4")
    ]
    cited = "see docs/design/x.md#the-guard, /work/vidur-peer and ../vidur-peer; a/work/b"
    assert ANCHOR.findall(cited) == [("design/x.md", "the-guard")]
    assert WORKPLACE.findall(cited) == ["/work/vidur-peer"]
    links = "[a](x.md#top) [b](#here) [c](https://h.io/#x) [d](y.md)"
    assert LINK_ANCHOR.findall(links) == [("x.md", "top"), ("", "here"), ("https://h.io/", "x")]
    note.write_text(
        "# The guard (session 24, issue 18 item 4)\n## `peak_keep_s`: 60 s\n## A\n## A\n"
        "```\n# not a heading\n```\n"
    )
    assert REPO_PATH.findall("(``bench/roofline_fit.tp_capped``, tests/x/test_y.py).") == [
        "bench/roofline_fit.tp_capped",
        "tests/x/test_y.py",
    ]
    assert _exists("bench/roofline_fit.tp_capped")
    assert not _exists("bench/roofline_fit.nope")
    slugs = {"the-guard-session-24-issue-18-item-4", "peak_keep_s-60-s", "a", "a-1"}
    assert _anchors(note) == slugs
