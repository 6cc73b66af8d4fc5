"""The checks a JSON body passes before it is parsed: nesting and number of values."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from interpreter.api import json_body
from interpreter.errors import ValidationFailed

#: Text that looks like structure when read outside its string.
TRICKY = st.text(alphabet='[]{}"\\,:ab\n\u00e9', max_size=8)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TRICKY,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TRICKY, inner, max_size=3),
    max_leaves=40,
)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


def _values(value: Any) -> int:
    if isinstance(value, list):
        return 1 + sum(map(_values, value))
    if isinstance(value, dict):
        return 1 + sum(map(_values, value.values()))
    return 1


def _nested(depth: int, value: Any) -> Any:
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


@settings(max_examples=300)
@given(JSON, st.integers(min_value=0, max_value=80))
def test_the_depth_check_agrees_with_the_parsed_value(inner: Any, extra: int) -> None:
    value = _nested(extra, inner)
    raw = json.dumps(value, ensure_ascii=False).encode()
    assert json_body.depth_ok(raw) == (_depth(value) <= json_body.MAX_JSON_DEPTH)


@settings(max_examples=300)
@given(JSON)
def test_the_count_of_values_is_what_the_body_holds(value: Any) -> None:
    for raw in (json.dumps(value), json.dumps(value, indent=1, ensure_ascii=False)):
        assert json_body.values_in(raw.encode()) == _values(value)


class Body(BaseModel):
    model_config = ConfigDict(extra="allow")


def test_a_body_of_too_many_values_is_refused_before_it_is_parsed() -> None:
    many = b'{"a": [' + b"[]," * json_body.MAX_JSON_VALUES + b"[]]}"
    with pytest.raises(ValidationFailed, match="more than 2,000,000 values"):
        json_body.decode(many, Body)
    # As many bytes in a few long strings (a notebook's images) pass.
    few = b'{"a": ["' + b"x" * len(many) + b'"]}'
    assert len(json_body.decode(few, Body).model_extra["a"][0]) == len(many)  # type: ignore[index]


def test_nesting_past_the_limit_is_refused_and_brackets_in_strings_do_not_count() -> None:
    deep = json.dumps(_nested(json_body.MAX_JSON_DEPTH + 1, 1)).encode()
    with pytest.raises(ValidationFailed, match="nested deeper than 64"):
        json_body.decode(deep, Body)
    inside = json.dumps({"code": "[" * 1000 + '\\"{' * 100}).encode()
    assert json_body.decode(inside, Body).model_extra == {"code": "[" * 1000 + '\\"{' * 100}


def test_an_unterminated_string_of_escapes_is_read_once() -> None:
    # A pattern that skipped escapes itself tried again from each of these quotes: a
    # megabyte of them took hours. The escapes go first now, and the body is malformed.
    for body in (b'"' + b'\\"' * (1 << 19), b'{"a": "' + b'\\\\\\"' * (1 << 18)):
        with pytest.raises(ValidationFailed, match="Malformed JSON"):
            json_body.decode(body, Body)


def test_a_number_too_long_to_read_is_said_so_without_pythons_advice() -> None:
    body = b'{"timeout_s": ' + b"9" * 5000 + b"}"
    with pytest.raises(ValidationFailed) as info:
        json_body.decode(body, Body)
    assert info.value.message == "Malformed JSON: a number of more than 4300 digits"
