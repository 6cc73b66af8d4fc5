"""The SDK's reading of event streams (through httpx-sse) and its event decoder."""

from __future__ import annotations

import httpx
import pytest
from httpx_sse import EventSource, ServerSentEvent, SSEError

from interpreter.client import ClearOutputEvent, ConnectionFailed, OutputEvent, StdoutEvent
from interpreter.client.protocol import decode_event, error_from_response
from interpreter.models import Execution


def read_all(text: str, chunk: int = 3) -> list[tuple[str, str, str]]:
    """(event, data, id) of every event of a body that arrives in small pieces."""
    raw = text.encode()
    body = [raw[i : i + chunk] for i in range(0, len(raw), chunk)]
    resp = httpx.Response(
        200, content=iter(body), headers={"content-type": "text/event-stream; charset=utf-8"}
    )
    return [(e.event, e.data, e.id) for e in EventSource(resp).iter_sse()]


def test_named_events_and_comments() -> None:
    events = read_all(': ping\n\nevent: stdout\ndata: {"text": "a"}\n\n: ping\n\n')
    assert events == [("stdout", '{"text": "a"}', "")]


def test_multiline_data_is_joined_with_newlines() -> None:
    assert read_all("data: one\ndata: two\n\n") == [("message", "one\ntwo", "")]


def test_space_after_colon_is_optional_and_only_one_is_removed() -> None:
    assert read_all("event:x\ndata:  two spaces\n\n") == [("x", " two spaces", "")]


def test_crlf_and_cr_lines_and_ids() -> None:
    assert read_all("id: 7\r\ndata: x\r\n\r\nevent: y\rdata: z\r\r", chunk=1) == [
        ("message", "x", "7"),
        ("y", "z", "7"),  # the last event id is kept, as the standard says
    ]


def test_event_without_data_decodes_to_nothing_and_retry_is_ignored() -> None:
    events = [ServerSentEvent(e, d, i) for e, d, i in read_all("event: done\nretry: 10\n\n")]
    assert [decode_event(e) for e in events] == [None]
    assert read_all("retry: 10\ndata: y\n\n") == [("message", "y", "")]


def test_an_event_cut_off_by_the_end_of_the_stream_is_not_dispatched() -> None:
    # A half-written event is dropped (the WHATWG rule); the SDK then resumes by polling
    # the execution: tests/unit/test_client.py::test_broken_stream_resumes_by_polling_the_execution.
    assert read_all('event: stdout\ndata: {"text": "a"}\n\nevent: done\ndata: {}') == [
        ("stdout", '{"text": "a"}', "")
    ]


def test_a_body_that_is_not_an_event_stream_is_a_transport_error() -> None:
    resp = httpx.Response(200, content=b"<html>", headers={"content-type": "text/html"})
    with pytest.raises(SSEError, match="text/html"):
        list(EventSource(resp).iter_sse())
    assert issubclass(SSEError, httpx.HTTPError)  # so the clients raise ConnectionFailed


def test_decode_known_unknown_and_malformed_events() -> None:
    assert decode_event(ServerSentEvent("stdout", '{"text": "hi"}')) == StdoutEvent("hi")
    assert decode_event(ServerSentEvent("clear", '{"wait": true}')) == ClearOutputEvent(True)
    out = decode_event(ServerSentEvent("output", '{"type": "display_data", "data": {}}'))
    assert isinstance(out, OutputEvent) and out.output.type == "display_data"
    done = decode_event(ServerSentEvent("done", '{"id": "e", "session_id": "s", "status": "ok"}'))
    assert isinstance(done, Execution) and done.status == "ok"
    assert decode_event(ServerSentEvent("progress", '{"pct": 5}')) is None
    with pytest.raises(ConnectionFailed, match="malformed 'stdout'"):
        decode_event(ServerSentEvent("stdout", "not json"))
    with pytest.raises(ConnectionFailed):
        decode_event(ServerSentEvent("done", '{"status": "ok"}'))


def test_error_body_that_is_not_ours_keeps_the_text() -> None:
    import httpx

    resp = httpx.Response(503, text="upstream down", request=httpx.Request("GET", "http://x"))
    err = error_from_response(resp)
    assert err.status == 503 and err.message == "upstream down" and err.code == "http_error"
    empty = httpx.Response(418, request=httpx.Request("GET", "http://x"))
    assert error_from_response(empty).message == "I'm a teapot"
