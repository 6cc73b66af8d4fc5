"""The tools as a stateless MCP client reads them: the same tools, in which ``session_id``
carries the state (there is no current session), and the idle timeout told in words."""

from __future__ import annotations

import argparse
import copy
import json

import anyio
import jsonschema
import pytest

from interpreter.cli_mcp import _idle_seconds
from interpreter.client import APIError
from interpreter.mcp_sessions import (
    STATELESS_IDLE_TIMEOUT_S,
    StatelessRequests,
    duration,
    stateless_tools,
)
from interpreter.tools import TOOLS, TextPart, ToolCall

#: The tools that act on an existing session, so need one named when there is no current one.
NEEDS_SESSION = {
    "close_session",
    "read_file",
    "list_files",
    "restart",
    "rebuild_from_notebook",
    "get_notebook",
}


def test_the_same_tools_where_only_the_session_words_differ() -> None:
    before = copy.deepcopy(TOOLS)
    stateless = stateless_tools()
    assert before == TOOLS  # the tools of clients with a current session are untouched
    assert [t.name for t in stateless] == [t.name for t in TOOLS]
    for spec, told in zip(TOOLS, stateless, strict=True):
        jsonschema.Draft202012Validator.check_schema(told.parameters)
        props, told_props = spec.parameters["properties"], told.parameters["properties"]
        assert list(told_props) == list(props), spec.name
        for name in props:
            if name != "session_id":
                assert told_props[name] == props[name], (spec.name, name)
        required = set(told.parameters.get("required", []))
        assert required - set(spec.parameters.get("required", [])) == (
            {"session_id"} if spec.name in NEEDS_SESSION else set()
        ), spec.name


def test_no_word_promises_a_current_session() -> None:
    text = json.dumps([(t.description, t.parameters) for t in stateless_tools()])
    for promise in (
        "Omit it to use the current session",
        "the current one for the other tools",
        "close the current session",
        "Closing the current session",
        "State persists between calls",
        "which one is current",
    ):
        assert promise not in text, promise
    tools = {t.name: t for t in stateless_tools()}
    run_code = tools["run_code"]
    assert "a call without session_id starts a new, empty session" in run_code.description
    said = run_code.parameters["properties"]["session_id"]["description"]
    assert "its result gives the session_id to pass next time" in said
    assert "after 10 minutes in which no code runs in it" in said
    assert "session_id" in tools["upload_file"].description


def test_the_idle_timeout_is_said_as_configured() -> None:
    assert STATELESS_IDLE_TIMEOUT_S == 600
    said = stateless_tools(90)[0].parameters["properties"]["session_id"]["description"]
    assert "after 90 seconds in which" in said


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (600, "10 minutes"),
        (60, "1 minute"),
        (90, "90 seconds"),
        (1, "1 second"),
        (2.5, "2.5 seconds"),
        (7200, "2 hours"),
        (5400, "90 minutes"),
    ],
)
def test_durations_in_words(seconds: float, words: str) -> None:
    assert duration(seconds) == words


@pytest.mark.parametrize("text", ["0", "-5", "0.5", "nan", "inf", "604801", "ten"])
def test_the_idle_timeout_option_refuses_what_the_service_would(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        _idle_seconds(text)


def test_the_idle_timeout_option_takes_seconds() -> None:
    assert _idle_seconds("30") == 30.0
    assert _idle_seconds("604800") == 604800.0


class _FullService:
    """A service at its session cap: every call is refused with too_many_sessions."""

    base_url = "http://127.0.0.1:1"

    async def _call(self, call: object) -> object:
        raise APIError(
            "This API key already has 32 live or starting sessions (the maximum); delete some.",
            status=429,
            code="too_many_sessions",
        )


def test_at_the_session_cap_a_stateless_client_is_not_sent_to_list_sessions() -> None:
    """list_sessions lists nothing to a stateless client: the cap's answer names what it
    can do instead, and that its sessions close by themselves."""
    requests = StatelessRequests(_FullService(), 90)  # type: ignore[arg-type]
    call = ToolCall("run_code", {"code": "1"})
    result = anyio.run(requests.execute, call)
    text = "".join(p.text for p in result.parts if isinstance(p, TextPart))
    assert result.is_error and "(too_many_sessions)" in text, text
    assert "list_sessions" not in text, text
    assert "close_session and the session_id a result gave" in text, text
    assert "after 90 seconds in which no code runs" in text, text
    assert requests.started == set()
