"""Property-based fuzzing of HTTP API v1 with schemathesis, against our own OpenAPI document.

A real broker (local backend) serves the document at ``/v1/openapi.json``; the schema is
loaded from there (``docs/openapi.json`` names the operations at collection time, and is the
fallback if the server serves no document). Every operation gets a ``positive`` test
(requests the schema allows) and, where the document constrains something a request sends
besides its path, a ``negative`` one (wrong types, unknown fields, values out of range, ...).
Each request must get:

- no 5xx, and a status code and content type that the document lists for the operation;
- a body that matches the documented response schema (a streamed execution: well-framed
  SSE events, ``done`` last);
- for a request the schema forbids, a 4xx;
- for any error, the contract of the design: ``{"error": {"type", "message"}}`` as JSON,
  with no traceback or host path in it;
- with a valid key, a refusal of the same request without it (``ignored_auth``);
- no error in the server's log.

Path parameters mostly point at real objects (one session, its execution, artifact and
files), so that bodies and queries reach the handlers instead of stopping at a 404. Kernel
starts are the expensive part (about 0.7 s each): ``POST /v1/sessions`` and restarts get
few examples, and the sessions the fuzzing creates are deleted at the end. Afterwards the
service must still be healthy and the fuzzed session must still compute ``1 + 1``.

A few inputs are added by hand: ones Hypothesis practically never generates (a 200 kB
environment variable) or cannot send through schemathesis at all (a path that is not
UTF-8 once percent-decoded).

Why not schemathesis's pytest plugin: ``schemathesis.pytest.from_fixture`` (the way to load
a schema from a server that a fixture starts) sets pytest's private ``Item._nodeid``, which
pytest 9 no longer has. So each test builds its Hypothesis test from
``APIOperation.as_strategy()`` itself.

The run is derandomized, so a failure reproduces. For a deeper or different run:
``INTERP_FUZZ_EXAMPLES=200`` (examples per cheap operation, default 50) and/or
``--hypothesis-seed=N`` (explores other inputs, reproducibly).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import KEY, REPO, Server, start_server

pytestmark = pytest.mark.slow

DOC = json.loads((REPO / "docs" / "openapi.json").read_text())
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
AUTH = {"Authorization": f"Bearer {KEY}"}
EXAMPLES = int(os.environ.get("INTERP_FUZZ_EXAMPLES", "50"))
#: Positive examples of the operations that start or restart a kernel.
EXPENSIVE = {"POST /v1/sessions": 4, "POST /v1/sessions/{session_id}/restart": 6}
#: Negative examples of session creation (a few still start a kernel: schemathesis cannot
#: always make an optional body invalid).
NEGATIVE_CREATES = 10
#: What a request the schema forbids may get (413: a string over its maxLength can make
#: the body larger than the service accepts; 403: operator routes refuse the agent's key
#: before they read the request).
REJECTED = ["400", "401", "403", "404", "405", "409", "410", "413", "422", "429"]
SSE_EVENTS = {"stdout", "stderr", "output", "clear", "error", "done"}
#: A 1x1 PNG: displayed once, it becomes the session's artifact.
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def _negatable(path: str, operation: dict[str, Any]) -> bool:
    """Whether the document constrains anything a request sends besides its path.

    Path parameters are plain strings, so only a JSON body or a typed or constrained query
    or header parameter can be made invalid (elsewhere schemathesis finds nothing to break).
    """
    if "application/json" in operation.get("requestBody", {}).get("content", {}):
        return True
    parameters = DOC["paths"][path].get("parameters", []) + operation.get("parameters", [])
    for parameter in parameters:
        schema = parameter.get("schema", {})
        if parameter["in"] in ("query", "header") and (
            schema.get("type", "string") != "string" or set(schema) - {"type", "description"}
        ):
            return True
    return False


CASES = [
    pytest.param(f"{method.upper()} {path}", mode, id=f"{mode.value}-{method.upper()} {path}")
    for path, item in DOC["paths"].items()
    for method, operation in item.items()
    if method in HTTP_METHODS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or _negatable(path, operation)
]


class ErrorLog(logging.Handler):
    """Collects what the in-process server logs at ERROR or above."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []
        self.reported: set[int] = set()

    def emit(self, record: logging.LogRecord) -> None:
        if record.name != "interpreter.access":  # a 5xx's access line: the checks see it
            self.records.append(record)

    def since(self, start: int) -> str:
        """The records from index ``start`` on, as text; they count as reported."""
        parts = []
        for record in self.records[start:]:
            self.reported.add(id(record))
            text = f"{record.levelname} {record.name}: {record.getMessage()}"
            if record.exc_info:
                text += "\n" + "".join(traceback.format_exception(*record.exc_info))
            parts.append(text)
        return "\n".join(parts)


@dataclass
class Target:
    """The server under test and the real objects path parameters point at."""

    server: Server
    schema: Any
    ids: dict[str, str]
    victim: str
    log: ErrorLog
    keep: set[str] = field(default_factory=set)

    def client(self) -> httpx.Client:
        return self.server.client(timeout=60)


def _load_schema(url: str) -> Any:
    try:
        schema = schemathesis.openapi.from_url(f"{url}/v1/openapi.json", timeout=30)
    except schemathesis.errors.LoaderError:
        schema = schemathesis.openapi.from_path(REPO / "docs" / "openapi.json")
    schema.config.update(base_url=url)
    # The key goes with every request; generated (broken) credentials would only test the
    # 401 path over and over. `ignored_auth` still checks that a request without it fails.
    schema.config.generation.update(with_security_parameters=False)
    schema.config.checks.negative_data_rejection.expected_statuses = REJECTED
    return schema


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    data_dir = Path(tempfile.mkdtemp(prefix="interp-fuzz-"))
    server = start_server("local", data_dir)
    log = ErrorLog()
    logging.getLogger().addHandler(log)
    try:
        with server.client(timeout=60) as client:
            sid, victim = (client.post("/v1/sessions", json={}).json()["id"] for _ in range(2))
            for name in ("data.txt", "scratch.txt"):
                put = client.put(f"/v1/sessions/{sid}/files/{name}", content=b"hello")
                assert put.status_code == 201, put.text
            code = f"display({{'image/png': '{PNG}'}}, raw=True)"
            resp = client.post(f"/v1/sessions/{sid}/execute", json={"code": code})
            assert resp.status_code == 200, resp.text
            execution = resp.json()
        ids = {
            "session_id": sid,
            "execution_id": execution["id"],
            "artifact_id": execution["outputs"][0]["artifacts"][0]["id"],
            "path": "data.txt",
            "approval_id": "ap_none",  # operator routes: the agent's key gets 403
        }
        yield Target(server, _load_schema(server.url), ids, victim, log, {sid, victim})
        with server.client() as client:
            for session in client.get("/v1/sessions").json()["sessions"]:
                client.delete(f"/v1/sessions/{session['id']}")
    finally:
        logging.getLogger().removeHandler(log)
        server.thread.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


# -- checks of our own (schemathesis calls them with its context, the response and the case)


def error_contract(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every 4xx/5xx is ``{"error": {"type", "message"}}`` JSON that leaks nothing."""
    if response.status_code < 400:
        return None
    if case.method.upper() == "HEAD":  # headers only: an error says its status
        assert not response.content, "a HEAD answer with a body"
        return None
    content_type = (response.headers.get("content-type") or [""])[0]
    assert content_type.startswith("application/json"), (
        f"{response.status_code} error with Content-Type {content_type!r}, not JSON"
    )
    try:
        body = json.loads(response.content)
    except ValueError as exc:
        raise AssertionError(f"{response.status_code} error body is not JSON: {exc}") from None
    error = body.get("error") if isinstance(body, dict) else None
    assert isinstance(error, dict), f"error body without an 'error' object: {body!r:.300}"
    for key in ("type", "message"):
        value = error.get(key)
        assert isinstance(value, str) and value, f"error.{key} missing or empty: {body!r:.300}"
    text = response.content.decode("utf-8", "replace")
    assert "Traceback" not in text and "/interpreter/" not in text, f"error leaks: {text:.300}"
    return None


def sse_contract(ctx: Any, response: Any, case: Any) -> bool | None:
    """A streamed execution: well-framed events with JSON data, one ``done``, last.

    (schemathesis would check each event against the ``{"type": "string"}`` that the
    document gives the whole stream, so streamed responses get this check instead.)
    """
    content_type = (response.headers.get("content-type") or [""])[0]
    if response.status_code != 200 or not content_type.startswith("text/event-stream"):
        return None
    events = []
    # Only CR, LF and CRLF end an SSE line (not the other breaks str.splitlines knows).
    text = response.content.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            fields[name] = fields[name] + "\n" + value if name in fields else value
        if fields:
            events.append(fields)
    assert events, "empty event stream"
    for event in events:
        assert event.get("event") in SSE_EVENTS, f"unknown event: {event!r:.300}"
        json.loads(event.get("data", ""))
    names = [event["event"] for event in events]
    assert names[-1] == "done" and names.count("done") == 1, f"events: {names}"
    done = json.loads(events[-1]["data"])
    assert {"id", "session_id", "status"} <= set(done), f"done is no Execution: {done!r:.300}"
    return None


def _checks(mode: GenerationMode, stream: bool = False) -> list[Callable[..., bool | None]]:
    checks: list[Callable[..., bool | None]] = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        sse_contract if stream else response_schema_conformance,
        error_contract,
    ]
    checks.append(ignored_auth if mode is GenerationMode.POSITIVE else negative_data_rejection)
    return checks


def _call(target: Target, case: Any, checks: list[Callable[..., bool | None]]) -> None:
    """Send the case and check the answer; what the server logged meanwhile must be empty."""
    seen = len(target.log.records)
    try:
        case.call_and_validate(headers=AUTH, checks=checks, timeout=60)
    except BaseException as exc:
        logged = target.log.since(seen)
        if logged:
            exc.add_note(f"The server logged during this request:\n{logged}")
        raise
    logged = target.log.since(seen)
    assert not logged, f"The server logged an error:\n{logged}\n\n{case.as_curl_command()}"


# -- generated requests ----------------------------------------------------------------------


def _operation(target: Target, label: str) -> Any:
    method, path = label.split(" ", 1)
    try:
        return target.schema[path][method]
    except LookupError:
        pytest.fail(f"{label} is in docs/openapi.json but the server does not document it")


def _real_ids(target: Target, label: str) -> dict[str, str]:
    path = label.split(" ", 1)[1]
    names = [p["name"] for p in DOC["paths"][path].get("parameters", []) if p["in"] == "path"]
    ids = {name: target.ids[name] for name in names}
    if label == "DELETE /v1/sessions/{session_id}":
        ids["session_id"] = target.victim  # deleting the fuzzed session would end the run
    if label == "DELETE /v1/sessions/{session_id}/files/{path}":
        ids["path"] = "scratch.txt"
    return ids


def _strategy(target: Target, label: str, mode: GenerationMode) -> Any:
    """Mostly requests about real objects; some about the real session only; some about none."""
    operation = _operation(target, label)
    ids = _real_ids(target, label)
    if not ids:
        return operation.as_strategy(generation_mode=mode)
    variants: list[dict[str, str] | None] = [ids, ids]
    if len(ids) > 1:
        variants.append({"session_id": ids["session_id"]})
    variants.append(None)
    return st.one_of(
        [operation.as_strategy(generation_mode=mode, path_parameters=v) for v in variants]
    )


def _examples(label: str, mode: GenerationMode) -> int:
    if mode is GenerationMode.NEGATIVE:
        return min(EXAMPLES, NEGATIVE_CREATES) if label == "POST /v1/sessions" else EXAMPLES
    return min(EXAMPLES, EXPENSIVE.get(label, EXAMPLES))


@pytest.mark.parametrize(("label", "mode"), CASES)
def test_fuzz(
    target: Target, label: str, mode: GenerationMode, request: pytest.FixtureRequest
) -> None:
    streamable = label == "POST /v1/sessions/{session_id}/execute"
    #: An execution's events are always a stream.
    always_streamed = label.endswith("/events")

    @settings(
        max_examples=_examples(label, mode),
        deadline=None,
        database=None,
        derandomize=request.config.getoption("hypothesis_seed", None) is None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        case=_strategy(target, label, mode),
        stream=st.booleans() if streamable else st.just(always_streamed),
    )
    def run(case: Any, stream: bool) -> None:
        if stream:
            case.headers = {**(case.headers or {}), "Accept": "text/event-stream"}
        _call(target, case, _checks(mode, stream))

    run()


# -- inputs added by hand ------------------------------------------------------------------

#: Requests Hypothesis practically never makes, checked like the generated ones.
EXPLICIT = [
    pytest.param(
        "POST /v1/sessions",
        {"body": {"env": {"BIG": "x" * 200_000}}},
        id="create-env-value-over-exec-limit",
    ),
    pytest.param(
        "PUT /v1/sessions/{session_id}/files/{path}",
        {"path_parameters": {"path": "x" * 300}, "body": b"data"},
        id="upload-name-over-255-bytes",
    ),
    pytest.param(
        "POST /v1/sessions/{session_id}/execute",
        {"body": {"code": "x = 1", "timeout_s": 5e-324}},
        id="execute-smallest-positive-timeout",
    ),
]


@pytest.mark.parametrize(("label", "fields"), EXPLICIT)
def test_explicit_inputs(target: Target, label: str, fields: dict[str, Any]) -> None:
    operation = _operation(target, label)
    path_parameters = {**_real_ids(target, label), **fields.get("path_parameters", {})}
    raw = isinstance(fields["body"], bytes)
    case = operation.Case(
        path_parameters=path_parameters or None,
        body=fields["body"],
        media_type="application/octet-stream" if raw else "application/json",
    )
    _call(target, case, _checks(GenerationMode.POSITIVE))


def _http_exchange(sock: socket.socket, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send one HTTP/1.1 request on ``sock`` and read its response (Content-Length framed)."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} bytes of a response head")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed in the middle of a response body")
        body += chunk
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize("route", ["files/%ff", "files/ok%C3%28", "artifacts/%ff"])
def test_undecodable_path_gets_an_error_and_keeps_the_connection(
    target: Target, route: str
) -> None:
    """A path that is not UTF-8 once decoded: a 4xx JSON error, and keep-alive still works.

    (A server that closes a kept-alive connection without saying ``Connection: close``
    makes a pooling client, such as our SDK's httpx, fail its next request with a reset.)
    """
    url = urlsplit(target.server.url)
    sid = target.ids["session_id"]

    def request(path: str) -> bytes:
        return (
            f"GET {path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {KEY}\r\n\r\n"
        ).encode()

    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        status, headers, body = _http_exchange(sock, request(f"/v1/sessions/{sid}/{route}"))
        assert 400 <= status < 500, (status, body)
        assert headers.get("content-type", "").startswith("application/json"), headers
        error = json.loads(body)["error"]
        assert error["type"] and error["message"], body
        if headers.get("connection", "").lower() == "close":
            return  # announced: a client opens a new connection
        try:
            status, _, body = _http_exchange(sock, request("/healthz"))
        except OSError as exc:
            pytest.fail(
                f"after the {error} answer the server dropped the kept-alive connection "
                f"without 'Connection: close' ({exc!r})"
            )
        assert status == 200, body


# -- afterwards ------------------------------------------------------------------------------


def test_service_healthy_after_fuzzing(target: Target) -> None:
    with target.client() as client:
        health = client.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok", health.text
        sid = target.ids["session_id"]
        resp = client.post(f"/v1/sessions/{sid}/execute", json={"code": "1 + 1"})
        assert resp.status_code == 200, resp.text
        result = resp.json()
        assert result["status"] == "ok", result
        assert result["outputs"][0]["data"]["text/plain"] == "2", result
        # The sessions the fuzzing created: deleted, and closed afterwards.
        created = [
            s["id"]
            for s in client.get("/v1/sessions").json()["sessions"]
            if s["id"] not in target.keep and s["status"] != "closed"
        ]
        for created_id in created:
            assert client.delete(f"/v1/sessions/{created_id}").status_code == 204
        after = client.get("/v1/sessions").json()["sessions"]
        assert all(s["status"] == "closed" for s in after if s["id"] in created), after
    # Errors logged outside any request (by a background task, say) fail here.
    unreported = [r for r in target.log.records if id(r) not in target.log.reported]
    logged = "\n".join(f"{r.levelname} {r.name}: {r.getMessage()}" for r in unreported)
    assert not logged, f"The server logged errors outside the requests above:\n{logged}"
