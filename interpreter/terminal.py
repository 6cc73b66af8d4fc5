"""Text an agent wrote, as an operator's terminal shows it: control characters visible.

The code held for approval, a replayed or rebuilt cell's first line, the differences
replay finds in outputs: an agent wrote them, and a prompt injection can turn an agent
against the person reading them. Written raw, an escape sequence in a comment moves the
cursor, erases lines and writes others (a different rule, harmless code) before the
operator decides, sets the window title, or writes the clipboard (OSC 52); a carriage
return or a bidirectional override makes a line read otherwise than it runs. The text
views of the CLI print such text through :func:`visible`, which shows each of those
characters as its Python escape (``\\x1b``, ``\\r``, ``\\u202e``), so the operator sees
that it is there. (Model-facing text drops them instead: ``client.render.clean``; the
JSON views escape them already.)
"""

from __future__ import annotations

import unicodedata

#: Unicode categories a terminal may act on rather than show: controls (C0, DEL, C1:
#: ESC, CSI, OSC, carriage return, backspace), format characters (bidirectional
#: embeddings, overrides and isolates, zero-width characters) and line and paragraph
#: separators.
_ACTING = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _shown(char: str, keep: str) -> str:
    if char in keep or unicodedata.category(char) not in _ACTING:
        return char
    return char.encode("unicode_escape").decode("ascii")


def visible(text: str, *, lines: bool = False) -> str:
    """``text`` with every character a terminal would act on written as its escape;
    tabs stay, and so do newlines when ``lines`` (text of several lines)."""
    keep = "\t\n" if lines else "\t"
    if text.isprintable():
        return text  # the common case: nothing to escape
    return "".join(_shown(c, keep) for c in text)
