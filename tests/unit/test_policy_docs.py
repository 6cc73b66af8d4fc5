"""The README's example policy loads, and its table of evasions matches the tested one."""

from __future__ import annotations

import re

from interpreter.policy.loader import parse
from tests.conftest import REPO

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
