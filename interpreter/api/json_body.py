"""A request's JSON body, read into a model: strict, bounded, and cheap to refuse.

Before the body is parsed, two checks bound what parsing it can cost, whatever its size:
its nesting (deep nesting exhausts parsers' recursion) and the number of values it holds.
JSON's empty arrays and short strings take two to five bytes each and become Python
objects of fifty or more, so a body of a few megabytes could otherwise cost the broker a
gigabyte. Both checks run at C speed and in time linear in the body's size: escapes are
taken out with ``bytes.replace``, then strings with a regular expression that cannot
backtrack, and what is left is counted with ``bytes`` methods.

Both checks and the parse are plain functions, so a handler runs those of a large body
(over :data:`OFF_LOOP_BYTES`) in a worker thread: a notebook of tens of megabytes does not
hold up other requests on the event loop.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from interpreter.errors import ValidationFailed

M = TypeVar("M", bound=BaseModel)

MAX_JSON_DEPTH = 64
#: Values (objects, arrays, strings, numbers, literals) a body may hold. A notebook of
#: 64 MiB of output, its text in lines as nbformat writes it, holds some hundred thousand.
MAX_JSON_VALUES = 2_000_000
#: Bodies larger than this are decoded in a worker thread (:func:`decode`).
OFF_LOOP_BYTES = 256 << 10

#: A JSON string once its escaped backslashes and quotes are gone (:func:`_without_strings`).
_STRING = re.compile(rb'"[^"]*"')
_STRUCTURE = b"[]{}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _STRUCTURE)
#: +1 for an opening bracket, -1 for a closing one.
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def _unescaped(raw: bytes) -> bytes:
    """``raw`` without its escaped backslashes and quotes: escapes are read in pairs from
    the left, so taking out the first and then the second leaves only the quotes that open
    and close strings (exact for valid JSON; anything else, the parse refuses)."""
    return raw.replace(b"\\\\", b"").replace(b'\\"', b"")


def _without_strings(raw: bytes) -> bytes:
    """``raw`` with each JSON string's content removed, in time linear in its size (a
    pattern that skipped escapes itself would try again from each quote of an
    unterminated string: quadratic)."""
    return _STRING.sub(b'""', _unescaped(raw))


def depth_ok(raw: bytes) -> bool:
    """Whether ``raw`` nests arrays and objects at most :data:`MAX_JSON_DEPTH` deep."""
    return _depth_ok(_without_strings(raw))


def values_in(raw: bytes) -> int:
    """How many values ``raw`` holds, if it is JSON (an object's member counts once, its
    key not apart): the top-level one, and in each array or object that is not empty one
    more than it has commas."""
    return _values(_without_strings(raw))


def _depth_ok(outside: bytes) -> bool:
    brackets = outside.translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) <= MAX_JSON_DEPTH


def _values(outside: bytes) -> int:
    rest = outside.translate(None, b" \t\r\n")
    empty = rest.count(b"[]") + rest.count(b"{}")
    return 1 + rest.count(b",") + rest.count(b"[") + rest.count(b"{") - empty


class DuplicateKey(ValueError):
    """A JSON object names one key twice (which one would win is up to the parser)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise DuplicateKey(key)
        obj[key] = value
    return obj


def describe_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "body"
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field; remove it"
        parts.append(f"{loc}: {msg}")
    return "Invalid request: " + "; ".join(parts)


def decode(raw: bytes, model: type[M], *, optional: bool = False) -> M:
    """Validate the JSON body ``raw`` against ``model``; ValidationFailed (422) on anything
    wrong. An empty body is ``model()`` when ``optional``."""
    if not raw.strip():
        if optional:
            return model()
        raise ValidationFailed("A JSON body is required.")
    unescaped = _unescaped(raw)
    # Values first, strings among them (each is a value or a key of one) before they are
    # cut out: within that bound, so are the matches to cut and the brackets to walk.
    too_many = ValidationFailed(
        f"The JSON body holds more than {MAX_JSON_VALUES:,} values; send less at once."
    )
    if unescaped.count(b'"') > 4 * MAX_JSON_VALUES:
        raise too_many
    outside = _STRING.sub(b'""', unescaped)
    if _values(outside) > MAX_JSON_VALUES:
        raise too_many
    if not _depth_ok(outside):
        raise ValidationFailed(f"JSON nested deeper than {MAX_JSON_DEPTH} levels.")
    try:
        parsed = json.loads(raw, object_pairs_hook=_unique_keys)
    except DuplicateKey as exc:
        raise ValidationFailed(
            f"Duplicate key '{exc.key[:100]}' in a JSON object; give each key once."
        ) from None
    except (ValueError, RecursionError) as exc:
        text = str(exc)
        if "int_max_str_digits" in text:
            # Python's own advice ("use sys.set_int_max_str_digits()") is not the client's.
            text = "a number of more than 4300 digits"
        raise ValidationFailed(f"Malformed JSON: {text[:200]}") from exc
    if not isinstance(parsed, dict):
        raise ValidationFailed("The JSON body must be an object.")
    try:
        return model.model_validate(parsed)
    except ValidationError as exc:
        raise ValidationFailed(describe_validation(exc)) from exc
