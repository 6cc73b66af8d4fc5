"""The tests that docs/security.md §3.3 names for each promise R-01..R-12 exist.

The table is read from the document; every backquoted ``tests/...`` entry must be a
directory or file of tests, or ``file::name`` (``file::Class::method``) with that name
defined at the top of the file (read with ``ast``, so nothing is imported or run): a test,
or in a ``conftest.py`` the fixture or class its tests share.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SECURITY = REPO / "docs" / "security.md"
HEADING = "### 3.3 Which tests prove each promise"
PROMISES = [f"R-{n:02d}" for n in range(1, 13)]


def mapping(text: str) -> dict[str, list[str]]:
    """Promise id -> the node ids its row names, from the §3.3 table of ``text``."""
    assert HEADING in text, f"docs/security.md has no section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n#", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        row = re.match(r"\| (R-\d{2})\b[^|]*\|(.*)\|\s*$", line)
        if row:
            assert row.group(1) not in rows, f"{row.group(1)} has two rows"
            rows[row.group(1)] = re.findall(r"`(tests/[^`]+)`", row.group(2))
    return rows


def defined_names(path: Path) -> set[str]:
    """Top-level functions and classes of ``path``, and ``Class::method`` for methods."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            names |= {
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            }
    return names


def has_tests(path: Path) -> bool:
    files = sorted(path.rglob("test_*.py")) if path.is_dir() else [path]
    return any(name.startswith("test_") for f in files for name in defined_names(f))


def missing(node: str) -> str | None:
    """Why ``node`` does not name existing tests (None when it does)."""
    file, _, name = node.partition("::")
    path = REPO / file
    if not path.exists():
        return f"{node}: no such file or directory"
    if not name:
        return None if has_tests(path) else f"{node}: holds no tests"
    if path.is_dir() or path.suffix != ".py":
        return f"{node}: not a Python file"
    if name not in defined_names(path):
        return f"{node}: {file} defines no {name}"
    if path.name != "conftest.py" and not name.split("::")[-1].startswith("test_"):
        return f"{node}: not a test"
    return None


def test_every_promise_names_tests_and_every_named_test_exists() -> None:
    rows = mapping(SECURITY.read_text(encoding="utf-8"))
    assert sorted(rows) == PROMISES
    assert [p for p, nodes in rows.items() if not nodes] == []
    assert [why for nodes in rows.values() for node in nodes if (why := missing(node))] == []


def test_a_renamed_or_removed_test_is_reported(tmp_path: Path) -> None:
    """The check itself fails for what it must catch (so the test above can fail)."""
    assert missing("tests/unit/test_promise_tests.py::test_no_such_test") is not None
    assert missing("tests/unit/no_such_file.py") is not None
    assert missing("tests/unit/test_promise_tests.py::mapping") is not None  # not a test
    assert missing("tests/faults/conftest.py::Canary::check") is None
    assert missing("tests/faults") is None
    table = (
        f"{HEADING}\n\n| Promise | Tests |\n|---|---|\n| R-01 x | `tests/a.py::t` |\n\n## next\n"
    )
    assert mapping(table) == {"R-01": ["tests/a.py::t"]}
