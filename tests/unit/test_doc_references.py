"""Every hardening item (``H-nn``), promise (``R-nn``) and decision (``decision N``) that
the code and tests cite is defined in ``docs/security.md``, so that a reader of the
repository alone can look each one up."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SECURITY = REPO / "docs" / "security.md"
SOURCES = ("interpreter", "kernels", "tests", "scripts", "benchmarks", "examples", "images", ".ci")
CITATION = re.compile(r"\b([HR]-\d{2})\b|\bdecision (\d+)\b", re.IGNORECASE)


def defined(text: str) -> set[str]:
    """Ids a document defines: bold ``**H-nn``/``**R-nn`` items and its numbered decisions."""
    ids = set(re.findall(r"\*\*([HR]-\d{2})\b", text))
    decisions = text.split("## 7. Decisions taken", 1)
    if len(decisions) == 2:
        ids |= {f"decision {n}" for n in re.findall(r"^(\d+)\. \*\*", decisions[1], re.M)}
    return ids


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of a file's comments and strings (Python), or comment lines (others)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".py":
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        return [
            (tok.start[0], tok.string)
            for tok in tokens
            if tok.type in (tokenize.COMMENT, tokenize.STRING)
        ]
    return [
        (n, line) for n, line in enumerate(text.splitlines(), 1) if line.lstrip().startswith("#")
    ]


def citations(text: str) -> list[str]:
    found = []
    for match in CITATION.finditer(text):
        item, decision = match.groups()
        found.append(item.upper() if item else f"decision {decision}")
    return found


def source_files() -> list[Path]:
    files = []
    for top in SOURCES:
        for path in sorted((REPO / top).rglob("*")):
            if path.is_file() and (
                path.suffix in (".py", ".sh")
                or path.parent.name == "scripts"
                or path.name in ("Dockerfile", "run")
            ):
                files.append(path)
    return [p for p in files if p != Path(__file__)]


def test_every_citation_resolves() -> None:
    known = defined(SECURITY.read_text(encoding="utf-8"))
    unresolved = [
        f"{path.relative_to(REPO)}:{line}: {cited}"
        for path in source_files()
        for line, text in prose(path)
        for cited in citations(text)
        if cited not in known
    ]
    assert unresolved == []


def test_citations_are_found_at_all() -> None:
    cited = {c for path in source_files() for _, text in prose(path) for c in citations(text)}
    assert {"H-24", "R-07", "decision 4"} <= cited


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("# docs/security.md H-24 and R-07", ["H-24", "R-07"]),
        ("(docs/security.md decision 4)", ["decision 4"]),
        ("x = 'H-99 is bogus'", ["H-99"]),
        ("no citation, ABH-12X", []),
    ],
)
def test_the_citation_pattern(text: str, found: list[str]) -> None:
    assert citations(text) == found


def test_a_bogus_citation_is_reported() -> None:
    known = defined("**H-01 MUST: x**\n## 7. Decisions taken\n\n1. **One.**\n")
    assert known == {"H-01", "decision 1"}
    assert [c for c in citations("see H-02 and decision 2") if c not in known] == [
        "H-02",
        "decision 2",
    ]
