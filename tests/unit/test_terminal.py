"""What an operator's terminal is given of an agent's text: control characters escaped."""

from __future__ import annotations

import pytest

from interpreter.terminal import visible


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text, é 日本 😀", "plain text, é 日本 😀"),
        ("a\tb", "a\tb"),
        ("#\x1b[A\x1b[2K\x1b[Gfake", "#\\x1b[A\\x1b[2K\\x1b[Gfake"),  # CSI: up, erase
        ("\x1b]52;c;Y2xpcA==\x07", "\\x1b]52;c;Y2xpcA==\\x07"),  # OSC 52: the clipboard
        ("safe\rrm -rf", "safe\\rrm -rf"),
        ("\x9b2J\x85", "\\x9b2J\\x85"),  # C1: CSI, NEL
        ("\x00\x08\x7f", "\\x00\\x08\\x7f"),
        ("admin\u202e\u2066", "admin\\u202e\\u2066"),  # bidirectional override, isolate
        ("zero\u200bwidth\u2028", "zero\\u200bwidth\\u2028"),
        ("a\nb", "a\\nb"),
    ],
)
def test_each_character_a_terminal_acts_on_is_shown_as_its_escape(text: str, shown: str) -> None:
    assert visible(text) == shown


def test_text_of_several_lines_keeps_its_newlines_only() -> None:
    assert visible("one\ntwo\r\n\x1b[1m", lines=True) == "one\ntwo\\r\n\\x1b[1m"
