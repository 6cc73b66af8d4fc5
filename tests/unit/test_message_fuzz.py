"""Kernel messages of any shape, signed with the key (code in the kernel holds it), read as
the broker reads them (docs/security.md H-34): either refused as malformed, or recorded
without an exception, into notebook outputs that are valid nbformat. Hypothesis draws the
messages: known message types with contents of any JSON, some with the keys the broker
looks for.

The run is derandomized, so a failure reproduces; ``INTERP_FUZZ_EXAMPLES=4000`` draws more
(the same way each time for a given number).
"""

from __future__ import annotations

import json
import os
from typing import Any

import nbformat
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jupyter_client.session import Session

from interpreter.execution import ExecutionRecorder
from interpreter.wire import BrokerSession

KEY = b"fuzz-key"
PARENT = "request-1"
IOPUB_TYPES = [
    "status",
    "execute_input",
    "stream",
    "display_data",
    "execute_result",
    "update_display_data",
    "clear_output",
    "error",
    "comm_msg",
]
#: Keys the broker reads in some content; drawn often so that parsing goes deep.
KEYS = [
    "name",
    "text",
    "data",
    "metadata",
    "transient",
    "display_id",
    "execution_state",
    "execution_count",
    "ename",
    "evalue",
    "traceback",
    "wait",
    "status",
    "text/plain",
    "image/png",
    "text/html",
    "application/json",
]

#: Examples per test (message lists, replies).
EXAMPLES = int(os.environ.get("INTERP_FUZZ_EXAMPLES", "300"))

#: Text, some with a lone surrogate (a JSON ``\\ud800`` escape decodes to one).
texts = st.text(max_size=30) | st.builds(
    lambda head, odd, tail: head + odd + tail,
    st.text(max_size=10),
    st.sampled_from(["\ud800", "\udfff", "\ud83d"]),
    st.text(max_size=10),
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | texts,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | texts, inner, max_size=5)
    ),
    max_leaves=25,
)
contents = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=6) | json_values
headers = st.fixed_dictionaries(
    {
        "msg_id": st.text(max_size=8),
        "msg_type": st.sampled_from(IOPUB_TYPES),
        "version": st.just("5.3"),
    },
    optional={"date": json_values},
)
parents = st.just({"msg_id": PARENT}) | json_values


def signed(header: Any, parent: Any, metadata: Any, content: Any) -> list[bytes]:
    """The frames, signed; packed as any JSON writer may (``NaN`` and ``Infinity`` too)."""
    parts = [json.dumps(part).encode() for part in (header, parent, metadata, content)]
    return [Session(key=KEY).sign(parts), *parts]


def read(frames: list[bytes]) -> dict[str, Any] | None:
    """The message as the broker reads it; None when refused as malformed."""
    try:
        return BrokerSession(key=KEY).deserialize(frames)
    except (TypeError, ValueError, KeyError):
        return None


def valid_outputs(rec: ExecutionRecorder) -> None:
    """The outputs are valid nbformat and can be written as the notebook is written
    (strict JSON, UTF-8)."""
    cell = nbformat.v4.new_code_cell("x", outputs=rec.notebook_outputs())
    nbformat.validate(nbformat.v4.new_notebook(cells=[cell]))
    json.dumps(cell, allow_nan=False, ensure_ascii=False).encode("utf-8")


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(st.tuples(headers, parents, json_values, contents), min_size=1, max_size=6))
def test_any_signed_iopub_messages_are_refused_or_recorded_validly(
    messages: list[tuple[Any, Any, Any, Any]],
) -> None:
    rec = ExecutionRecorder(PARENT, hard_limit=10_000, rich_limit=10_000)
    for header, parent, metadata, content in messages:
        msg = read(signed(header, parent, metadata, content))
        if msg is None:
            continue
        assert all(isinstance(msg[p], dict) for p in ("header", "parent_header", "metadata"))
        rec.feed_iopub(msg)
    valid_outputs(rec)


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True)
@given(json_values, contents)
def test_any_signed_reply_is_refused_or_recorded_validly(metadata: Any, content: Any) -> None:
    rec = ExecutionRecorder(PARENT, hard_limit=10_000, rich_limit=10_000)
    header = {"msg_id": "r", "msg_type": "execute_reply", "version": "5.3"}
    msg = read(signed(header, {"msg_id": PARENT}, metadata, content))
    if msg is not None:
        rec.feed_reply(msg)
        valid_outputs(rec)
