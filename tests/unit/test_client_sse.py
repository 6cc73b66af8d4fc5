"""The SDK's sans-I/O pieces: the SSE decoder and the event decoder."""

from __future__ import annotations

import pytest

from interpreter.client import ClearOutputEvent, ConnectionFailed, OutputEvent, StdoutEvent
from interpreter.client._sse import ServerSentEvent, SSEDecoder
from interpreter.client.protocol import decode_event, error_from_response
from interpreter.models import Execution


def feed_all(text: str) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events = [e for line in text.splitlines() if (e := decoder.feed(line)) is not None]
    last = decoder.flush()
    return events + ([last] if last is not None else [])


def test_named_events_and_comments() -> None:
    events = feed_all(': ping\n\nevent: stdout\ndata: {"text": "a"}\n\n: ping\n\n')
    assert events == [ServerSentEvent("stdout", '{"text": "a"}')]


def test_multiline_data_is_joined_with_newlines() -> None:
    assert feed_all("data: one\ndata: two\n\n") == [ServerSentEvent("message", "one\ntwo")]


def test_space_after_colon_is_optional_and_only_one_is_removed() -> None:
    assert feed_all("event:x\ndata:  two spaces\n\n") == [ServerSentEvent("x", " two spaces")]


def test_crlf_lines_and_ids() -> None:
    decoder = SSEDecoder()
    assert decoder.feed("id: 7\r\n") is None
    assert decoder.feed("data: x\r\n") is None
    assert decoder.feed("\r\n") == ServerSentEvent("message", "x", "7")


def test_event_without_data_is_dropped_and_retry_ignored() -> None:
    assert feed_all("event: nothing\nretry: 10\n\ndata: y\n\n") == [ServerSentEvent("message", "y")]


def test_last_event_without_blank_line_is_flushed() -> None:
    assert feed_all("event: done\ndata: {}") == [ServerSentEvent("done", "{}")]


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
