"""The repository explains itself: everything a source file cites under ``docs/`` exists (the
section too, for the research notes), nothing cites the workshop folder outside the repository,
and the relative links of the repository's markdown resolve in a fresh clone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tidal"
DOC_PATH = re.compile(r"(?<![\w/])docs/[\w./-]*\w")
"""A path under the repository's docs/ (not a URL route such as ``/docs/oauth2-redirect``)."""
SECTION = re.compile(
    r"docs/(research/[\w.-]+\.md)`{0,2}'?s? ?(?:§ ?(\d+(?:\.\d+)?)|(Appendix [A-Z]))"
)
OUTSIDE = re.compile(r"shared/(?!traces\b)[\w./-]+")
"""``shared/traces`` is a data directory the workload loader searches at run time (not a
citation)."""
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


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


def test_every_cited_research_section_exists():
    missing = set()
    for p in _sources():
        for note, number, appendix in SECTION.findall(p.read_text()):
            path = ROOT / "docs" / note
            if not path.exists() or (number or appendix) not in _headings(path):
                missing.add(f"{p.relative_to(ROOT)}: docs/{note} {number or appendix}")
    assert not missing, sorted(missing)


def test_no_source_cites_the_workshop_outside_the_repository():
    cites = {
        f"{p.relative_to(ROOT)}: {m}" for p in _sources() for m in OUTSIDE.findall(p.read_text())
    }
    assert not cites, sorted(cites)


@pytest.mark.parametrize("doc", ["README.md", "BENCHMARKS.md", "docs"])
def test_relative_markdown_links_resolve(doc):
    files = [ROOT / doc] if doc.endswith(".md") else sorted((ROOT / doc).rglob("*.md"))
    broken = []
    for f in files:
        for target in LINK.findall(f.read_text()):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            if not (f.parent / target).exists():
                broken.append(f"{f.relative_to(ROOT)} → {target}")
    assert not broken, broken


def test_the_checks_catch_what_they_are_for(tmp_path):
    """The patterns find a dangling path, a missing section and a workshop citation."""
    text = (
        "see ``docs/research/ebplus.md`` §2.5 and docs/research/nope.md §1 at /docs/route; "
        "formulas in shared/research/x.md; traces in shared/traces"
    )
    assert DOC_PATH.findall(text) == ["docs/research/ebplus.md", "docs/research/nope.md"]
    sections = [("research/ebplus.md", "2.5", ""), ("research/nope.md", "1", "")]
    assert SECTION.findall(text) == sections
    assert OUTSIDE.findall(text) == ["shared/research/x.md"]
    note = tmp_path / "n.md"
    note.write_text("# T\n## 2. A\n### 2.5 B\n## Appendix B. C\n")
    assert _headings(note) == {"2", "2.5", "Appendix B"}
