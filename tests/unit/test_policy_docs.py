"""The README's example policy loads, and its table of evasions matches the tested one."""

from __future__ import annotations

import re

from interpreter.policy.loader import parse
from tests.conftest import REPO
from tests.unit.test_policy_facts import EVASIONS

README = (REPO / "README.md").read_text(encoding="utf-8")


def _section() -> str:
    start = README.index("## Policies and approvals")
    return README[start : README.index("\n## ", start + 5)]


def test_the_readme_policy_example_loads() -> None:
    blocks = re.findall(r"```toml\n(.*?)```", _section(), flags=re.DOTALL)
    assert len(blocks) == 1
    policy = parse(blocks[0], "README.md")
    assert policy.policies["default"].rules[0].message.startswith("subprocess is not allowed")
    assert policy.policies["tight"].limits.max_executions_per_minute == 30


def test_the_readme_says_a_policy_is_not_a_sandbox() -> None:
    assert "**A policy is not a sandbox.**" in _section()
    assert "test_known_evasions_are_not_caught" in _section()


def _evasion_table() -> dict[str, str]:
    """The README's table of evasions: first cell -> second cell."""
    section = _section()
    table = section[section.index("### What a policy does not catch") :]
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]
    cells = [[c.strip() for c in row.strip("|").split(" | ")] for row in rows]
    return {c[0]: c[1] for c in cells}


def test_the_readme_evasion_table_is_the_tested_one_row_by_row() -> None:
    table = _evasion_table()
    assert set(table) == {row for row, *_ in EVASIONS}
    for row, _code, _wanted, unknown in EVASIONS:
        reported = table[row]
        if unknown:
            assert all(f"unknown: {kind}" in reported for kind in unknown), row
        else:
            assert reported.startswith("nothing"), row
