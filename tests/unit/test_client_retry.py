"""The SDK's retries, against a real HTTP server on loopback that answers from a script.

Each test lists the answers the server gives, in order (a status with headers, or a
connection closed without an answer), and then checks what the client sent and when.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from interpreter.client import (
    AsyncClient,
    BusyError,
    Client,
    ConnectionFailed,
    DoneEvent,
    ServerError,
    StdoutEvent,
)
from interpreter.client._retry import RetryPolicy
from interpreter.client.protocol import parse_retry_after

NOW = "2024-05-01T12:00:00+00:00"
SESSION = {
    "id": "s1",
    "status": "idle",
    "backend": "local",
    "created_at": NOW,
    "last_activity_at": NOW,
    "generation": 1,
}
EXECUTION = {
    "id": "ex1",
    "session_id": "s1",
    "execution_count": 1,
    "status": "ok",
    "generation": 1,
    "outputs": [{"type": "execute_result", "data": {"text/plain": "2"}, "artifacts": []}],
}
#: Fast backoff, so that only a Retry-After makes a test wait.
FAST = 0.01

DROP = "drop"  # close the connection without answering


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def error(status: int, code: str, **headers: str) -> Reply:
    return Reply(status, {"error": {"type": code, "message": f"{code} now"}}, headers)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    at: float


class ScriptedServer:
    """A real HTTP/1.1 server on a free loopback port that answers from a script."""

    def __init__(self) -> None:
        self.script: list[Reply | str] = []
        self.seen: list[Seen] = []
        self.default = Reply(200, SESSION)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                outer.seen.append(
                    Seen(
                        self.command,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        time.monotonic(),
                    )
                )
                reply = outer.script.pop(0) if outer.script else outer.default
                if reply == DROP:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                assert isinstance(reply, Reply)
                if isinstance(reply.body, bytes):
                    payload = reply.body
                    ctype = reply.headers.get("Content-Type", "text/event-stream")
                else:
                    payload = json.dumps(reply.body).encode() if reply.body is not None else b""
                    ctype = "application/json"
                self.send_response(reply.status)
                for name, value in {"Content-Type": ctype, **reply.headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = _any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer()
    yield srv
    srv.close()


def free_port() -> int:
    """A loopback port with nothing listening on it (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class CountingTransport(httpx.HTTPTransport):
    """The real transport, counting the requests it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.count += 1
        return super().handle_request(request)


def session_of(client: Client) -> Any:
    from interpreter.client import Session
    from interpreter.models import Session as Info

    return Session(client, Info.model_validate(SESSION))


# ---------------------------------------------------------------------------- waiting


def test_503_with_retry_after_waits_that_long_then_succeeds(server: ScriptedServer) -> None:
    server.script = [error(503, "kernel_start_failed", **{"Retry-After": "1"})]
    with Client(server.url, retry_backoff=FAST) as client:
        session = client.create_session()
    assert session.id == "s1"
    first, second = server.seen
    assert 0.9 <= second.at - first.at < 3.0  # the service's Retry-After, not the backoff


def test_429_is_retried_even_where_a_repeat_is_unsafe(server: ScriptedServer) -> None:
    # interrupt is not idempotent, but a 429 means the service did nothing.
    server.script = [error(429, "session_busy", **{"Retry-After": "0"})]
    with Client(server.url, retry_backoff=FAST) as client:
        assert session_of(client).interrupt().id == "s1"
    assert [s.path for s in server.seen] == ["/v1/sessions/s1/interrupt"] * 2


@pytest.mark.parametrize("kind", ["too_many_large_bodies", "too_many_uploads"])
def test_a_503_given_before_acting_is_retried_even_where_a_repeat_is_unsafe(
    server: ScriptedServer, kind: str
) -> None:
    # A rebuild is an unkeyed POST; these 503s come before the service reads the body.
    server.script = [error(503, kind, **{"Retry-After": "0"})]
    with Client(server.url, retry_backoff=FAST) as client:
        session_of(client).rebuild(
            {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}
        )
    assert [s.path for s in server.seen] == ["/v1/sessions/s1/rebuild"] * 2


@pytest.mark.parametrize("status", [502, 503, 504])
def test_gateway_errors_are_retried_for_safe_calls_only(
    server: ScriptedServer, status: int
) -> None:
    server.script = [error(status, "upstream"), error(status, "upstream")]
    with Client(server.url, retry_backoff=FAST) as client:
        assert client.get_session("s1").id == "s1"  # GET: retried twice, then answered
        assert len(server.seen) == 3
        server.script = [error(status, "upstream")]
        with pytest.raises(ServerError) as info:
            session_of(client).restart()  # an unkeyed POST may have acted: not repeated
        assert info.value.status == status
    assert len(server.seen) == 4


def test_retries_stop_after_max_retries_with_the_last_error(server: ScriptedServer) -> None:
    server.script = [error(503, "backend_unavailable")] * 4
    client = Client(server.url, retry_backoff=FAST, max_retries=2)
    with client, pytest.raises(ServerError) as info:
        client.list_sessions()
    assert info.value.code == "backend_unavailable" and len(server.seen) == 3


def test_max_retries_zero_sends_once(server: ScriptedServer) -> None:
    server.script = [error(429, "session_busy", **{"Retry-After": "0"})]
    with Client(server.url, max_retries=0) as client, pytest.raises(BusyError) as info:
        client.list_sessions()
    assert info.value.retry_after == 0 and len(server.seen) == 1


def test_a_retry_after_too_long_to_wait_is_raised_at_once(server: ScriptedServer) -> None:
    server.script = [error(429, "too_many_sessions", **{"Retry-After": "3600"})]
    with Client(server.url) as client, pytest.raises(BusyError) as info:
        client.create_session()
    assert info.value.retry_after == 3600 and len(server.seen) == 1


def test_other_errors_are_not_retried(server: ScriptedServer) -> None:
    server.script = [error(500, "internal_error"), error(507, "audit_degraded")]
    with Client(server.url, retry_backoff=FAST) as client:
        with pytest.raises(ServerError):
            client.list_sessions()
        with pytest.raises(ServerError):
            session_of(client).run("1 + 1")
    assert len(server.seen) == 2


# ------------------------------------------------------------------------- connection


def test_each_wait_is_logged_with_the_call_and_why(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    # The CLI shows INFO logs: a command paused by a rate limit says why it waits.
    server.script = [error(429, "rate_limited", **{"Retry-After": "0"})]
    with caplog.at_level("INFO", "interpreter.client"), Client(server.url) as client:
        session_of(client).interrupt()
    (record,) = [r for r in caplog.records if r.name == "interpreter.client"]
    assert record.getMessage() == (
        "POST /v1/sessions/s1/interrupt: 429 rate_limited; retrying in 0.0 s (retry 1 of 2)"
    )
    caplog.clear()
    client = Client(f"http://127.0.0.1:{free_port()}", retry_backoff=FAST)
    with caplog.at_level("INFO", "interpreter.client"), client, pytest.raises(ConnectionFailed):
        client.create_session()
    messages = [r.getMessage() for r in caplog.records if r.name == "interpreter.client"]
    assert len(messages) == 2 and all(": ConnectError; retrying in" in m for m in messages)


def test_connection_refused_is_retried_then_raises_a_clear_error() -> None:
    transport = CountingTransport()
    url = f"http://127.0.0.1:{free_port()}"
    client = Client(url, transport=transport, retry_backoff=FAST)
    with client, pytest.raises(ConnectionFailed) as info:
        client.create_session()
    assert transport.count == 3
    message = str(info.value)
    assert message.startswith(f"cannot talk to {url}:") and "after 3 attempts" in message


def test_connection_refused_with_max_retries_zero_is_tried_once() -> None:
    transport = CountingTransport()
    client = Client(f"http://127.0.0.1:{free_port()}", transport=transport, max_retries=0)
    with client, pytest.raises(ConnectionFailed) as info:
        client.health()
    assert transport.count == 1 and "attempts" not in str(info.value)


def test_a_dropped_answer_is_retried_for_safe_calls_only(server: ScriptedServer) -> None:
    server.script = [DROP]
    with Client(server.url, retry_backoff=FAST) as client:
        assert client.get_session("s1").id == "s1"
        assert len(server.seen) == 2
        server.script = [DROP]
        with pytest.raises(ConnectionFailed, match="cannot talk to"):
            session_of(client).interrupt()
    assert len(server.seen) == 3


# ---------------------------------------------------------------------- idempotency


def test_execute_retries_carry_the_same_idempotency_key(server: ScriptedServer) -> None:
    server.default = Reply(200, EXECUTION)
    server.script = [DROP, error(503, "kernel_start_failed", **{"Retry-After": "0"})]
    with Client(server.url, retry_backoff=FAST) as client:
        session = session_of(client)
        assert session.run("1 + 1").text == "2"
        keys = [s.headers["idempotency-key"] for s in server.seen]
        assert len(keys) == 3 and len(set(keys)) == 1
        session.run("1 + 1")
        assert server.seen[-1].headers["idempotency-key"] != keys[0]  # a new logical call
        server.script = [DROP]
        session.run("1 + 1", idempotency_key="caller-key")
    assert [s.headers["idempotency-key"] for s in server.seen[-2:]] == ["caller-key"] * 2


def test_create_session_retries_carry_the_same_key(server: ScriptedServer) -> None:
    server.script = [error(502, "bad_gateway"), DROP]
    with Client(server.url, retry_backoff=FAST) as client:
        client.create_session(metadata={"a": 1})
    keys = {s.headers["idempotency-key"] for s in server.seen}
    assert len(server.seen) == 3 and len(keys) == 1


def test_a_stream_request_is_retried_with_its_key(server: ScriptedServer) -> None:
    done = json.dumps(EXECUTION)
    body = f'event: stdout\ndata: {{"text": "hi"}}\n\nevent: done\ndata: {done}\n\n'.encode()
    server.script = [error(503, "kernel_start_failed", **{"Retry-After": "0"}), DROP]
    server.default = Reply(200, body, {"X-Execution-Id": "ex1"})
    with Client(server.url, retry_backoff=FAST) as client:
        events = list(session_of(client).stream("print('hi')"))
    assert events[0] == StdoutEvent("hi")
    assert isinstance(events[-1], DoneEvent) and events[-1].result.text == "2"
    assert len(server.seen) == 3
    assert len({s.headers["idempotency-key"] for s in server.seen}) == 1
    assert all(s.headers["accept"] == "text/event-stream" for s in server.seen)


# ---------------------------------------------------------------------------- async


async def test_async_execute_and_stream_retry_with_one_key(server: ScriptedServer) -> None:
    from interpreter.client import AsyncSession
    from interpreter.models import Session as Info

    server.default = Reply(200, EXECUTION)
    server.script = [error(503, "x", **{"Retry-After": "0"}), DROP]
    async with AsyncClient(server.url, retry_backoff=FAST) as client:
        session = AsyncSession(client, Info.model_validate(SESSION))
        result = await session.run("1 + 1")
        assert (result.text, result.generation) == ("2", 1)
        keys = {s.headers["idempotency-key"] for s in server.seen}
        assert len(server.seen) == 3 and len(keys) == 1
        done = json.dumps(EXECUTION)
        server.default = Reply(200, f"event: done\ndata: {done}\n\n".encode())
        server.script = [DROP]
        events = [e async for e in session.stream("1 + 1")]
        assert isinstance(events[-1], DoneEvent)
        assert (
            server.seen[-1].headers["idempotency-key"] == server.seen[-2].headers["idempotency-key"]
        )
        server.script = [error(429, "session_busy", **{"Retry-After": "0"})] * 3
        with pytest.raises(BusyError):
            await session.interrupt()
    assert len(server.seen) == 8


async def test_async_connection_refused_raises_after_retries() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with AsyncClient(url, retry_backoff=FAST) as client:
        with pytest.raises(ConnectionFailed, match="after 3 attempts"):
            await client.list_sessions()


# --------------------------------------------------------------------------- settings


def test_max_retries_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERP_MAX_RETRIES", "0")
    assert Client().retry.max_retries == 0
    assert Client(max_retries=5).retry.max_retries == 5  # the argument wins
    monkeypatch.setenv("INTERP_MAX_RETRIES", " 4 ")
    assert AsyncClient().retry.max_retries == 4
    monkeypatch.delenv("INTERP_MAX_RETRIES")
    assert Client().retry.max_retries == 2


@pytest.mark.parametrize("bad", ["-1", "two", "1.5", "٣"])
def test_a_bad_max_retries_is_a_precise_error(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("INTERP_MAX_RETRIES", bad)
    with pytest.raises(ValueError, match=r"\$INTERP_MAX_RETRIES must be a whole number"):
        Client()
    with pytest.raises(ValueError, match="max_retries must be a whole number"):
        Client(max_retries=-1)
    with pytest.raises(ValueError, match="max_retries must be a whole number"):
        AsyncClient(max_retries=True)
    with pytest.raises(ValueError, match="retry backoff"):
        Client(max_retries=1, retry_backoff=-1)


def test_an_empty_max_retries_variable_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERP_MAX_RETRIES", " ")
    assert Client().retry.max_retries == 2


def test_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    policy = RetryPolicy(backoff_s=0.5, max_backoff_s=4)
    assert [policy.backoff(n, rand=lambda: 1.0) for n in range(5)] == [0.5, 1, 2, 4, 4]
    assert [policy.backoff(n, rand=lambda: 0.0) for n in range(3)] == [0.25, 0.5, 1]


def test_retry_after_as_seconds_or_http_date() -> None:
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=7), usegmt=True)
    assert later.endswith("GMT")
    assert parse_retry_after(later, now=now) == 7
    assert parse_retry_after("Wed, 01 May 2024 11:59:00 GMT", now=now) == 0  # past: now
    assert parse_retry_after("2") == 2 and parse_retry_after("0.5") == 0.5
    assert [parse_retry_after(v) for v in (None, "soon", "-1", "nan", "inf")] == [None] * 5


def test_a_retry_after_date_is_honoured(server: ScriptedServer) -> None:
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=2), usegmt=True)
    server.script = [error(503, "shutting_down", **{"Retry-After": soon})]
    with Client(server.url, retry_backoff=FAST) as client:
        client.health()
    first, second = server.seen
    # HTTP dates have whole seconds: the wait is between 1 and 2 s.
    assert 0.9 <= second.at - first.at < 3.0
