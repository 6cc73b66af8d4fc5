"""SDK against an in-memory stand-in of the HTTP API (httpx.MockTransport), sync and async."""

from __future__ import annotations

import base64
import builtins
import json
import pickle
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from interpreter.client import (
    APIError,
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    BusyError,
    Client,
    ConflictError,
    ConnectionFailed,
    DoneEvent,
    ErrorEvent,
    ExecutionError,
    NotFoundError,
    OutputEvent,
    ServerError,
    StderrEvent,
    StdoutEvent,
)

KEY = "secret-key"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC).isoformat()


def _error(status: int, code: str, message: str, **headers: str) -> httpx.Response:
    return httpx.Response(
        status, json={"error": {"type": code, "message": message}}, headers=headers
    )


class FakeService:
    """Just enough of API v1 to exercise every SDK call, with a log of what was asked."""

    def __init__(self) -> None:
        self.sessions: dict[str, dict[str, Any]] = {}
        self.files: dict[tuple[str, str], bytes] = {}
        self.requests: list[httpx.Request] = []
        self.counter = 0

    def session_json(self, sid: str) -> dict[str, Any]:
        return {
            "id": sid,
            "status": self.sessions[sid]["status"],
            "backend": "local",
            "created_at": NOW,
            "last_activity_at": NOW,
            "execution_count": self.sessions[sid]["count"],
            "metadata": self.sessions[sid]["metadata"],
            "rebuild": self.sessions[sid].get("rebuild"),
        }

    def execution(self, sid: str, code: str) -> dict[str, Any]:
        self.sessions[sid]["count"] += 1
        n = self.sessions[sid]["count"]
        base: dict[str, Any] = {
            "id": f"ex{n}",
            "session_id": sid,
            "execution_count": n,
            "code": code,
            "status": "ok",
            "started_at": NOW,
            "duration_ms": 3.5,
            "generation": self.sessions[sid].get("generation", 1),
        }
        if code.startswith("raise"):
            tb = ["Traceback (most recent call last):", "ValueError: bad"]
            return base | {
                "status": "error",
                "stderr": "",
                "error": {"ename": "ValueError", "evalue": "bad", "traceback": tb},
            }
        if code == "sleep":
            return base | {"status": "timeout", "state_lost": True, "reason": "timeout"}
        if code == "plot":
            ref = {
                "id": "a" * 64,
                "mime": "image/png",
                "size": len(PNG),
                "url": f"/v1/sessions/{sid}/artifacts/{'a' * 64}",
            }
            chart = {"kind": "line", "title": "t", "series": []}
            return base | {
                "outputs": [
                    {
                        "type": "display_data",
                        "artifacts": [ref],
                        "data": {"text/plain": "<Figure>", "application/vnd.chart+json": chart},
                    },
                ]
            }
        return base | {
            "stdout": f"ran {code}\n",
            "outputs": [{"type": "execute_result", "data": {"text/plain": "42"}, "artifacts": []}],
        }

    def sse(self, execution: dict[str, Any]) -> bytes:
        parts = [": keep-alive\n\n"]
        if execution.get("stdout"):
            half = len(execution["stdout"]) // 2
            for chunk in (execution["stdout"][:half], execution["stdout"][half:]):
                parts.append(f"event: stdout\ndata: {json.dumps({'text': chunk})}\n\n")
        parts.append(f"event: stderr\r\ndata: {json.dumps({'text': 'warn'})}\r\n\r\n")
        for output in execution.get("outputs", []):
            parts.append(f"event: output\ndata: {json.dumps(output)}\n\n")
        if execution.get("error"):
            parts.append(f"event: error\ndata: {json.dumps(execution['error'])}\n\n")
        parts.append("event: future-thing\ndata: {}\n\n")
        parts.append(f"event: done\ndata: {json.dumps(execution)}\n\n")
        return "".join(parts).encode()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.headers.get("authorization") != f"Bearer {KEY}":
            return _error(401, "unauthorized", "Missing or invalid API key.")
        path = unquote(request.url.path)
        method = request.method
        if path == "/healthz":
            return httpx.Response(200, json={"status": "ok"})
        if path == "/v1/sessions" and method == "POST":
            body = json.loads(request.content or b"{}")
            if "bogus" in body:
                return _error(422, "validation_error", "bogus: extra fields not permitted")
            self.counter += 1
            sid = f"s{self.counter}"
            self.sessions[sid] = {
                "status": "idle",
                "count": 0,
                "metadata": body.get("metadata", {}),
            }
            if "from_session" in body:
                self.sessions[sid]["rebuild"] = {
                    "source": f"session:{body['from_session']}",
                    "cells_total": 2,
                    "cells_ran": 2,
                    "failed": [],
                }
            return httpx.Response(201, json=self.session_json(sid))
        if path == "/v1/sessions" and method == "GET":
            return httpx.Response(
                200, json={"sessions": [self.session_json(s) for s in self.sessions]}
            )
        m = re.fullmatch(r"/v1/sessions/([^/]+)(?:/(.*))?", path)
        if not m or m.group(1) not in self.sessions:
            return _error(404, "session_not_found", "Session not found.")
        sid, rest = m.group(1), m.group(2) or ""
        state = self.sessions[sid]
        if rest == "" and method == "GET":
            return httpx.Response(200, json=self.session_json(sid))
        if rest == "" and method == "DELETE":
            if state["status"] == "closed":
                return _error(409, "session_closed", "Session is closed.")
            state["status"] = "closed"
            return httpx.Response(204)
        if rest == "execute":
            code = json.loads(request.content)["code"]
            if code == "busy":
                return _error(429, "session_busy", "Queue full.", **{"Retry-After": "2"})
            if code == "crash":
                return httpx.Response(502, text="<html>Bad Gateway</html>")
            execution = self.execution(sid, code)
            if request.headers.get("accept") == "text/event-stream":
                if code in ("resume", "broken", "cutdone"):
                    state["pending"] = execution
                    state["polls"] = 0
                    first = b'event: stdout\ndata: {"text":"x"}\n\n'
                    if code == "cutdone":  # the connection drops inside the final event
                        first += b'event: done\ndata: {"id": "ex'

                    def body() -> Iterator[bytes]:
                        yield first
                        if code == "broken":
                            raise httpx.ReadError("connection reset", request=request)

                    return httpx.Response(
                        200,
                        content=body() if code == "broken" else first,
                        headers={
                            "content-type": "text/event-stream",
                            "X-Execution-Id": execution["id"],
                        },
                    )
                if code == "cut":
                    return httpx.Response(
                        200,
                        content=b'event: stdout\ndata: {"text":"x"}\n\n',
                        headers={"content-type": "text/event-stream"},
                    )
                return httpx.Response(
                    200, content=self.sse(execution), headers={"content-type": "text/event-stream"}
                )
            return httpx.Response(200, json=execution)
        if rest.startswith("executions/") and rest.endswith("/events"):
            return _error(404, "not_found", "No route.")  # a service from before resuming
        if rest.startswith("executions/"):
            state["polls"] += 1
            pending = dict(state["pending"])
            if state["polls"] < 3:  # still running for the first two polls
                pending["status"] = "running"
            return httpx.Response(200, json=pending)
        if rest in ("interrupt", "restart"):
            if rest == "restart" and request.content:
                assert json.loads(request.content) == {"recover": True}
                state["rebuild"] = {"source": f"session:{sid}", "cells_ran": 1}
            return httpx.Response(200, json=self.session_json(sid))
        if rest.startswith("artifacts/"):
            return httpx.Response(200, content=PNG, headers={"content-type": "image/png"})
        if rest == "notebook":
            return httpx.Response(
                200, json={"nbformat": 4, "nbformat_minor": 5, "cells": [], "metadata": {}}
            )
        if rest == "files" and method == "GET":
            entries = [
                {
                    "name": p.rsplit("/", 1)[-1],
                    "path": p,
                    "type": "file",
                    "size": len(d),
                    "modified_at": NOW,
                }
                for (s, p), d in self.files.items()
                if s == sid
            ]
            return httpx.Response(
                200, json={"path": request.url.params.get("path", ""), "entries": entries}
            )
        if rest.startswith("files/"):
            fpath = rest[len("files/") :]
            if method == "PUT":
                self.files[(sid, fpath)] = request.content
                return httpx.Response(201)
            if (sid, fpath) not in self.files:
                return _error(404, "file_not_found", f"No file {fpath!r}.")
            if method == "DELETE":
                del self.files[(sid, fpath)]
                return httpx.Response(204)
            return httpx.Response(200, content=self.files[(sid, fpath)])
        return _error(404, "not_found", "No route.")


@pytest.fixture
def fake() -> FakeService:
    return FakeService()


@pytest.fixture
def client(fake: FakeService) -> Client:
    # Retries have their own tests (test_client_retry.py); here each error shows at once.
    transport = httpx.MockTransport(fake)
    return Client("http://svc.test", api_key=KEY, transport=transport, max_retries=0)


# ------------------------------------------------------------------------------- sync


def test_session_context_manager_runs_code_and_deletes_on_exit(
    client: Client, fake: FakeService
) -> None:
    with client.create_session(metadata={"task": "t"}) as session:
        assert session.info.metadata == {"task": "t"}
        result = session.run("x")
        assert result.ok and result.status == "ok"
        assert result.text == "42"
        assert result.stdout == "ran x\n"
        assert result.execution_count == 1
        assert result.error is None
    assert fake.requests[-1].method == "DELETE"
    assert fake.sessions[session.id]["status"] == "closed"
    session.close()  # closing twice is harmless (409 session_closed is swallowed)


def test_bearer_key_and_user_agent_are_sent(client: Client, fake: FakeService) -> None:
    client.list_sessions()
    req = fake.requests[-1]
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert req.headers["user-agent"].startswith("interp-sdk/")


def test_user_code_error_is_data_unless_raise_on_error(client: Client) -> None:
    session = client.create_session()
    result = session.run("raise ValueError('bad')")
    assert result.status == "error" and not result.ok
    assert result.error is not None and result.error.ename == "ValueError"
    with pytest.raises(ExecutionError) as info:
        session.run("raise ValueError('bad')", raise_on_error=True)
    err = info.value
    assert (err.ename, err.evalue, err.status) == ("ValueError", "bad", "error")
    assert err.traceback[-1] == "ValueError: bad"
    assert str(err) == "ValueError: bad"
    assert pickle.loads(pickle.dumps(err)).ename == "ValueError"


def test_timeout_raises_execution_error_with_status_as_name(client: Client) -> None:
    session = client.create_session()
    result = session.run("sleep", timeout_s=1)
    assert result.status == "timeout" and result.state_lost
    assert (result.reason, result.generation) == ("timeout", 1)
    assert (session.run("x").reason, session.run("x").generation) == (None, 1)
    with pytest.raises(ExecutionError) as info:
        result.raise_for_error()
    assert info.value.ename == "timeout"


def test_run_sends_timeout_and_waits_without_read_limit(client: Client, fake: FakeService) -> None:
    session = client.create_session()
    session.run("x", timeout_s=2.5)
    req = fake.requests[-1]
    assert json.loads(req.content) == {"code": "x", "timeout_s": 2.5}
    assert req.extensions["timeout"]["read"] is None
    client.list_sessions()
    assert fake.requests[-1].extensions["timeout"]["read"] == 30.0


def test_artifacts_can_be_read_and_saved(client: Client, tmp_path: Path) -> None:
    session = client.create_session()
    result = session.run("plot")
    assert result.text is None
    assert [a.mime for a in result.images] == ["image/png"]
    image = result.images[0]
    assert image.read() == PNG
    assert image.save(tmp_path / "p.png").read_bytes() == PNG
    saved = image.save(tmp_path)
    assert saved.parent == tmp_path and saved.suffix == ".png"
    assert result.charts == [{"kind": "line", "title": "t", "series": []}]
    assert session.artifact(image.ref) == PNG


@pytest.mark.parametrize(
    ("code", "status", "cls", "code_name"),
    [
        ("busy", 429, BusyError, "session_busy"),
        ("crash", 502, ServerError, "http_error"),
    ],
)
def test_service_errors_map_to_exception_classes(
    client: Client, code: str, status: int, cls: type[APIError], code_name: str
) -> None:
    session = client.create_session()
    with pytest.raises(cls) as info:
        session.run(code)
    assert info.value.status == status
    assert info.value.code == code_name


def test_busy_carries_retry_after_and_message(client: Client) -> None:
    session = client.create_session()
    with pytest.raises(BusyError) as info:
        session.run("busy")
    assert info.value.retry_after == 2.0
    assert info.value.message == "Queue full."
    assert "session_busy" in str(info.value)
    again = pickle.loads(pickle.dumps(info.value))
    assert isinstance(again, BusyError) and again.retry_after == 2.0


def test_not_found_unauthorized_bad_request_conflict(fake: FakeService) -> None:
    transport = httpx.MockTransport(fake)
    bad = Client("http://svc.test", api_key="wrong", transport=transport)
    with pytest.raises(AuthenticationError, match="invalid API key"):
        bad.list_sessions()
    with Client("http://svc.test", api_key=KEY, transport=transport) as good:
        with pytest.raises(NotFoundError) as info:
            good.get_session("nope")
        assert info.value.code == "session_not_found"
        with pytest.raises(BadRequestError):
            good._call(_bogus_create())
        session = good.create_session()
        good.delete_session(session.id)
        with pytest.raises(ConflictError):
            good.delete_session(session.id)


def _bogus_create() -> Any:
    from interpreter.client import protocol as proto

    call = proto.create_session()
    return proto.Call(call.method, call.url, call.parse, json={"bogus": 1})


def test_unreachable_service_raises_connection_failed() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = Client("http://svc.test", transport=httpx.MockTransport(refuse), max_retries=0)
    with pytest.raises(ConnectionFailed, match=r"cannot talk to http://svc\.test"):
        client.list_sessions()


def test_malformed_success_body_raises_connection_failed() -> None:
    def garbage(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"sessions": "nope"})

    client = Client("http://svc.test", transport=httpx.MockTransport(garbage))
    with pytest.raises(ConnectionFailed, match="unexpected answer"):
        client.list_sessions()


def test_stream_yields_typed_events_in_order(client: Client) -> None:
    session = client.create_session()
    events = list(session.stream("abcd"))
    kinds = [type(e) for e in events]
    assert kinds == [StdoutEvent, StdoutEvent, StderrEvent, OutputEvent, DoneEvent]
    assert "".join(e.text for e in events if isinstance(e, StdoutEvent)) == "ran abcd\n"
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert done.result.text == "42" and done.execution.status == "ok"


def test_stream_reports_error_event(client: Client, fake: FakeService) -> None:
    session = client.create_session()
    events = list(session.stream("raise"))
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert errors and errors[0].error.ename == "ValueError"
    assert fake.requests[-1].headers["accept"] == "text/event-stream"


def test_stream_http_error_before_first_event_raises(client: Client) -> None:
    session = client.create_session()
    with pytest.raises(BusyError):
        list(session.stream("busy"))


def test_stream_cut_short_raises_connection_failed(client: Client) -> None:
    session = client.create_session()
    seen: list[object] = []
    with pytest.raises(ConnectionFailed, match="ended before"):
        for event in session.stream("cut"):
            seen.append(event)
    assert seen == [StdoutEvent("x")]


@pytest.mark.parametrize("code", ["resume", "broken", "cutdone"])
def test_broken_stream_resumes_by_polling_the_execution(
    client: Client, fake: FakeService, code: str
) -> None:
    session = client.create_session()
    events = list(session.stream(code))
    assert events[0] == StdoutEvent("x")
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.execution.status == "ok"
    assert done.result.text == "42"
    polls = [r for r in fake.requests if "/executions/" in r.url.path]
    assert [r.url.path.endswith("/events") for r in polls] == [True, False, False, False]


def test_files_upload_download_list_delete(client: Client, tmp_path: Path) -> None:
    session = client.create_session()
    session.upload("data/my file é.csv", "a,b\n1,2\n")
    local = tmp_path / "raw.bin"
    local.write_bytes(b"\x00\x01")
    assert session.upload_file(local) == "raw.bin"
    with local.open("rb") as fh:
        session.upload("copy.bin", fh)
    listing = session.list()
    assert sorted(e.path for e in listing.entries) == ["copy.bin", "data/my file é.csv", "raw.bin"]
    assert session.download("data/my file é.csv") == b"a,b\n1,2\n"
    assert session.download("raw.bin", dest=tmp_path / "out.bin") == b"\x00\x01"
    assert (tmp_path / "out.bin").read_bytes() == b"\x00\x01"
    session.delete_file("raw.bin")
    with pytest.raises(NotFoundError):
        session.download("raw.bin")


def test_list_files_is_the_readme_name_and_list_its_alias(
    client: Client, fake: FakeService
) -> None:
    session = client.create_session()
    session.upload("d/a.txt", "1")
    assert [e.path for e in session.list_files().entries] == ["d/a.txt"]
    session.list_files("d")
    assert fake.requests[-1].url.params["path"] == "d"
    assert session.list("d") == session.list_files("d")


def test_execute_and_create_carry_an_idempotency_key_per_call(
    client: Client, fake: FakeService
) -> None:
    session = client.create_session()
    created = fake.requests[-1].headers["idempotency-key"]
    session.run("x")
    session.run("x")
    list(session.stream("x"))
    keys = [r.headers["idempotency-key"] for r in fake.requests if r.url.path.endswith("/execute")]
    assert len(set([created, *keys])) == 4  # a fresh key for every logical call
    session.run("x", idempotency_key="mine")
    assert fake.requests[-1].headers["idempotency-key"] == "mine"  # the caller's is kept
    session.refresh()
    session.interrupt()
    assert "idempotency-key" not in fake.requests[-2].headers  # nor on GET
    assert "idempotency-key" not in fake.requests[-1].headers  # nor where it is not honoured


def test_file_paths_are_percent_encoded(client: Client, fake: FakeService) -> None:
    session = client.create_session()
    session.upload("a dir/x?y#z.txt", b"1")
    raw = fake.requests[-1].url.raw_path.decode()
    assert raw == f"/v1/sessions/{session.id}/files/a%20dir/x%3Fy%23z.txt"
    with pytest.raises(ValueError):
        session.upload("/", b"")


def test_interrupt_restart_recover_fork_notebook(client: Client, fake: FakeService) -> None:
    session = client.create_session()
    assert session.interrupt().id == session.id
    assert session.restart().rebuild is None
    assert fake.requests[-1].content == b""
    info = session.restart(recover=True)
    assert info.rebuild is not None and info.rebuild.cells_ran == 1
    fork = session.fork()
    assert fork.id != session.id
    assert fork.info.rebuild is not None and fork.info.rebuild.source == f"session:{session.id}"
    assert session.notebook()["nbformat"] == 4
    assert session.refresh().status == "idle"
    assert client.get_session(session.id).id == session.id
    assert client.health() == {"status": "ok"}


def test_environment_supplies_url_and_key(
    fake: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTERP_URL", "http://from-env.test/")
    monkeypatch.setenv("INTERP_API_KEY", KEY)
    with Client(transport=httpx.MockTransport(fake)) as client:
        assert client.base_url == "http://from-env.test"
        client.list_sessions()
    assert fake.requests[-1].url.host == "from-env.test"


def test_base_url_path_prefix_is_kept(fake: FakeService) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        request.url = request.url.copy_with(path=request.url.path.removeprefix("/prefix"))
        return fake(request)

    with Client(
        "http://svc.test/prefix", api_key=KEY, transport=httpx.MockTransport(handler)
    ) as client:
        session = client.create_session()
        image = session.run("plot").images[0]
        assert image.read() == PNG
    assert seen[-1].startswith("/prefix/v1/sessions/")


# ------------------------------------------------------------------------------ async


@pytest.fixture
def aclient(fake: FakeService) -> AsyncClient:
    transport = httpx.MockTransport(fake)
    return AsyncClient("http://svc.test", api_key=KEY, transport=transport, max_retries=0)


async def test_async_session_runs_streams_and_deletes(
    aclient: AsyncClient, fake: FakeService, tmp_path: Path
) -> None:
    async with aclient:
        async with aclient.create_session() as session:
            result = await session.run("x")
            assert result.text == "42" and result.stdout == "ran x\n"
            plot = await session.run("plot")
            assert await plot.images[0].read() == PNG
            path = await plot.images[0].save(tmp_path / "a.png")
            assert path.read_bytes() == PNG
            events = [e async for e in session.stream("abcd")]
            assert isinstance(events[-1], DoneEvent) and events[-1].result.text == "42"
            assert [type(e) for e in events[:3]] == [StdoutEvent, StdoutEvent, StderrEvent]
        assert fake.sessions[session.id]["status"] == "closed"


async def test_async_awaitable_session_files_and_errors(aclient: AsyncClient) -> None:
    async with aclient:
        session = await aclient.create_session()
        await session.upload("f.txt", "hello")
        assert await session.download("f.txt") == b"hello"
        assert [e.name for e in (await session.list()).entries] == ["f.txt"]
        assert [e.name for e in (await session.list_files()).entries] == ["f.txt"]
        timed_out = await session.run("sleep")
        assert (timed_out.reason, timed_out.generation) == ("timeout", 1)
        with pytest.raises(ExecutionError):
            await session.run("raise", raise_on_error=True)
        with pytest.raises(BusyError):
            await session.run("busy")
        with pytest.raises(ConnectionFailed):
            async for _ in session.stream("cut"):
                pass
        resumed = [e async for e in session.stream("resume")]
        assert isinstance(resumed[-1], DoneEvent) and resumed[-1].result.text == "42"
        info = await session.restart(recover=True)
        assert info.rebuild is not None
        assert (await session.notebook())["nbformat"] == 4
        assert [s.id for s in await aclient.list_sessions()] == [session.id]
        await session.close()
        with pytest.raises(NotFoundError):
            await aclient.get_session("missing")


def test_sdk_imports_neither_server_nor_docker_code() -> None:
    """The SDK (and the tools, replay and CLI client on top) must install without them."""
    import subprocess
    import sys

    code = (
        "import sys, interpreter.client, interpreter.tools, interpreter.replay, "
        "interpreter.cli_client\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'tornado', 'docker', 'jupyter_client', 'zmq', 'nbformat', 'mcp'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_every_sdk_name_the_readme_uses_exists() -> None:
    """The README's SDK paragraph names only methods and attributes that exist, in both
    clients."""
    import inspect

    import interpreter.client as sdk
    from interpreter.client import AsyncRunResult, AsyncSession, RunResult, Session

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    paragraph = readme.split("- **Python SDK**", 1)[1].split("\n- **MCP**", 1)[0]
    names: set[str] = set()
    for token in re.findall(r"`([^`]+)`", paragraph):
        if "-" in token:  # a header name: Retry-After
            continue
        if m := re.match(r"\.?([A-Za-z_]\w*)", token):
            names.add(m.group(1))
        names |= set(re.findall(r"(\w+)=", token))  # keyword arguments: restart(recover=True)
    names -= {"interpreter", "GET", "PUT", "DELETE", "INTERP_MAX_RETRIES"}
    names -= {n for n in names if hasattr(builtins, n)}  # Python's own: ValueError
    assert {"list_files", "reason", "generation", "max_retries"} <= names
    arguments = {
        name
        for f in (Session.run, Session.stream, Session.restart, Client, AsyncClient)
        for name in inspect.signature(f).parameters
    }
    pairs = [(Client, AsyncClient), (Session, AsyncSession), (RunResult, AsyncRunResult)]
    for sync, async_ in pairs:
        for name in names:
            if hasattr(sync, name):
                assert hasattr(async_, name), f"{async_.__name__} lacks {name}"
    missing = [
        n
        for n in sorted(names)
        if not any(hasattr(t, n) for t in (Client, Session, RunResult, sdk)) and n not in arguments
    ]
    assert missing == []


def test_execute_options_and_error_details_cross_the_wire() -> None:
    from interpreter.client import ConflictError
    from interpreter.client import protocol as proto

    call = proto.execute("s_1", "x", on_disconnect="interrupt", if_busy="reject")
    assert call.json == {"code": "x", "on_disconnect": "interrupt", "if_busy": "reject"}
    assert proto.execute("s_1", "x").json == {"code": "x"}
    body = {
        "error": {
            "type": "session_running",
            "message": "busy",
            "execution_id": "ex_1",
            "running_for_s": 1.5,
        }
    }
    error = proto.error_from_response(httpx.Response(409, json=body))
    assert isinstance(error, ConflictError) and error.code == "session_running"
    assert error.details == {"execution_id": "ex_1", "running_for_s": 1.5}
    assert pickle.loads(pickle.dumps(error)).details == error.details
