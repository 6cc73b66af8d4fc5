"""HTTP byte ranges (RFC 9110 §14): the one ``Range: bytes=...`` form a download answers.

Only a single range is served (``bytes=START-END``, ``bytes=START-``, ``bytes=-SUFFIX``);
a header that is not a byte range, or asks for several, is ignored and the whole body is
sent, as the RFC allows. A range that starts past the end is refused (416). Positions
are ASCII digits of any length: one past any file's end counts as "past the end".
"""

from __future__ import annotations

import re

from interpreter.errors import RangeNotSatisfiable

_SINGLE = re.compile(r"[ \t]*bytes[ \t]*=[ \t]*([0-9]*)[ \t]*-[ \t]*([0-9]*)[ \t]*", re.IGNORECASE)
#: Larger than any file: longer positions are read as this (``int`` refuses > 4300 digits).
_HUGE = 10**18


def byte_range(header: str | None, size: int, what: str = "artifact") -> tuple[int, int] | None:
    """The inclusive ``(first, last)`` byte positions ``header`` asks for in a body of
    ``size`` bytes (``what``: named in the error), or None for the whole body.

    Raises:
        RangeNotSatisfiable: the range lies wholly past the end (or asks for zero bytes).
    """
    if not header:
        return None
    match = _SINGLE.fullmatch(header)
    if match is None:
        return None
    first_text, last_text = match.groups()
    if not first_text and not last_text:
        return None
    if not first_text:  # the last N bytes
        suffix = _position(last_text)
        if suffix == 0 or size == 0:
            raise _unsatisfiable(header, size, what)
        return max(size - suffix, 0), size - 1
    first = _position(first_text)
    last = _position(last_text) if last_text else None
    if last is not None and last < first:
        return None  # not a valid range: ignored
    if first >= size:
        raise _unsatisfiable(header, size, what)
    return first, size - 1 if last is None else min(last, size - 1)


def _position(digits: str) -> int:
    significant = digits.lstrip("0") or "0"
    return _HUGE if len(significant) > 18 else int(significant)


def _unsatisfiable(header: str, size: int, what: str) -> RangeNotSatisfiable:
    shown = header.strip()
    if len(shown) > 100:
        shown = shown[:100] + "..."
    return RangeNotSatisfiable(f"Range {shown!r} is outside the {what}, which has {size} bytes.")
