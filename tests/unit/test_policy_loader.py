"""The policy file: TOML checked against the schema, errors naming the line, hot reload."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from interpreter.policy.loader import PolicyFileError, PolicyWatcher, load, parse

GOOD = """\
[approvals]
expire_after_s = 300

[policies.default]
default = "allow"

[[policies.default.rules]]
id = "no-subprocess"
decision = "deny"
message = "subprocess is not allowed for this key; use pandas to read the file"
match.imports = ["subprocess"]
"""


def test_a_good_file_loads() -> None:
    pf = parse(GOOD)
    assert pf.approvals.expire_after_s == 300
    assert pf.policies["default"].rules[0].id == "no-subprocess"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            GOOD.replace('decision = "deny"', 'decision = "maybe"'),
            "line 9: policies.default.rules.0.decision",
        ),
        (
            GOOD.replace('match.imports = ["subprocess"]', 'match.imports = "subprocess"'),
            "line 11: ",
        ),
        (
            GOOD.replace("expire_after_s = 300", "expire_after = 300"),
            "line 2: approvals.expire_after: unknown field",
        ),
        (GOOD.replace('default = "allow"', "default = allow"), "line 5"),
        # A misspelt required field: the unknown name, not the missing one ("Field
        # required (and 1 more)" hid the typo).
        (
            GOOD.replace('default = "allow"', 'defualt = "allow"'),
            "policies.default.defualt: unknown field; did you mean 'default'?",
        ),
        ('[policies.other]\ndefault = "allow"\n', "[policies.default] is required"),
    ],
)
def test_errors_name_the_line_and_the_problem(text: str, expected: str) -> None:
    with pytest.raises(PolicyFileError) as info:
        parse(text, "p.toml")
    message = str(info.value)
    assert message.startswith("p.toml: ") and "\n" not in message
    assert expected in message


def test_an_unreadable_file_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(PolicyFileError, match="cannot read the policy file"):
        load(tmp_path / "missing.toml")


async def test_hot_reload_takes_good_edits_and_keeps_the_last_good_policy(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(GOOD)
    watcher = PolicyWatcher(load(path), interval_s=60)
    first = watcher.current.sha256

    def edit(text: str, bump: int) -> None:
        path.write_text(text)
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump))

    edit(GOOD.replace('decision = "deny"', 'decision = "nonsense"'), 10**9)
    assert not await watcher.check()
    assert watcher.current.sha256 == first
    assert watcher.error is not None and "line 9" in watcher.error
    assert watcher.status()["error"] == watcher.error

    edit(GOOD.replace('decision = "deny"', 'decision = "approve"'), 2 * 10**9)
    assert await watcher.check()
    assert watcher.error is None
    assert watcher.policy.policies["default"].rules[0].decision == "approve"
    assert not await watcher.check()  # unchanged: nothing to do
    await asyncio.sleep(0)


async def test_an_edit_that_keeps_size_and_mtime_is_loaded_and_no_change_is_quiet(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two edits within one tick of the file system's clock, or a tool that restores the
    mtime, leave size and mtime as they were: the content decides."""
    path = tmp_path / "policy.toml"
    path.write_text(GOOD)
    watcher = PolicyWatcher(load(path), interval_s=60)
    before = path.stat()
    same_size = GOOD.replace('decision = "deny"', 'decision = "allow"').replace("pandas", "panda")
    assert len(same_size) == len(GOOD)
    path.write_text(same_size)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns
    assert await watcher.check()
    assert watcher.policy.policies["default"].rules[0].decision == "allow"
    # Nothing changed since: no reload, no log line, however often it is polled.
    caplog.clear()
    with caplog.at_level("INFO", logger="interpreter.policy.loader"):
        for _ in range(3):
            assert not await watcher.check()
    assert caplog.records == []
    # A refused edit is logged once, not at every poll.
    path.write_text(GOOD.replace('decision = "deny"', 'decision = "nope"'))
    with caplog.at_level("INFO", logger="interpreter.policy.loader"):
        for _ in range(3):
            assert not await watcher.check()
    assert len(caplog.records) == 1 and watcher.error is not None
