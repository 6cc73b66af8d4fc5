"""HTTP edges a tester found answered with 500s or tracebacks in the broker's log.

A broker of its own (local backend, in this process, so ``caplog`` sees its log) and raw
sockets where the request is malformed on purpose: non-ASCII digits in ``Content-Length``,
``Range`` and ``?after=``; unknown methods; lone surrogates in session metadata (also in
a record stored by an older version); download names outside Latin-1; a file that shrinks
while it is sent; the artifacts' ETag; a body given to ``interrupt``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urlsplit

import httpx
import pytest
import tornado.httpserver
import tornado.netutil
import tornado.web
from werkzeug.http import parse_options_header  # Flask's parser (installed by schemathesis)

from interpreter.api.base import BaseHandler
from interpreter.broker import owner_of
from interpreter.store import SessionRecord
from tests.conftest import KEY, Server, run, start_server
from tests.conftest import test_settings as settings_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    data_dir = Path(tempfile.mkdtemp(prefix="interp-http-edges-"))
    server = start_server("local", data_dir)
    yield server
    server.thread.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def api(srv: Server) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client


@pytest.fixture(scope="module")
def sid(srv: Server) -> Iterator[str]:
    with srv.client() as client:
        session_id: str = client.post("/v1/sessions", json={}).json()["id"]
        yield session_id
        client.delete(f"/v1/sessions/{session_id}")


@pytest.fixture(scope="module")
def artifacts(srv: Server, sid: str) -> list[dict[str, Any]]:
    """Two HTML artifacts (an HTML output this large is kept as an artifact)."""
    with srv.client() as client:
        ex = run(
            client,
            sid,
            "from IPython.display import HTML, display\n"
            "display(HTML('<p>' + 'a' * 70000 + '</p>'))\n"
            "display(HTML('<p>' + 'b' * 70000 + '</p>'))",
        )
    refs = [out["artifacts"][0] for out in ex["outputs"]]
    assert len(refs) == 2 and refs[0]["id"] != refs[1]["id"]
    return refs


def raw_request(srv: Server, request: bytes, *, timeout: float = 20) -> bytes:
    """Send ``request`` as is on a new connection; the answer, read until it closes."""
    parts = urlsplit(srv.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def problems(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The broker's log records at ERROR or above, and any with a traceback."""
    return [
        f"{r.levelname} {r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.ERROR or r.exc_info
    ]


def wait_for(predicate: Callable[[], Any], timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)
    return value


# -------------------------------------------------------------- numbers in headers


@pytest.mark.parametrize("auth", [True, False], ids=["key", "no-key"])
@pytest.mark.parametrize("path", ["/v1/sessions", "/v1/nope"])
def test_content_length_of_non_ascii_digits_is_400_not_500(
    srv: Server, caplog: pytest.LogCaptureFixture, auth: bool, path: str
) -> None:
    caplog.set_level(logging.INFO)
    key = f"Authorization: Bearer {KEY}\r\n" if auth else ""
    for length in ("\xb2", "\xb9\xb2"):  # superscript two; superscript one, two
        answer = raw_request(
            srv,
            f"GET {path} HTTP/1.1\r\nHost: x\r\n{key}Content-Length: {length}\r\n"
            "Connection: close\r\n\r\n".encode("latin-1"),
        )
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 "), answer[:300]
        assert b'"bad_request"' in body and b"Content-Length" in body, body
    assert problems(caplog) == []


def test_a_content_length_of_thousands_of_digits_is_413(
    srv: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    answer = raw_request(
        srv,
        f"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Length: {'9' * 5000}\r\nConnection: close\r\n\r\n".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
    assert b'"payload_too_large"' in answer
    assert problems(caplog) == []


def test_range_positions_of_any_length_are_answered_per_rfc_9110(
    api: httpx.Client, artifacts: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    ref = artifacts[0]
    size, huge = ref["size"], "9" * 4301
    whole = api.get(ref["url"]).content
    assert len(whole) == size

    to_huge_end = api.get(ref["url"], headers={"Range": f"bytes=0-{huge}"})
    assert to_huge_end.status_code == 206, to_huge_end.text[:200]
    assert to_huge_end.headers["Content-Range"] == f"bytes 0-{size - 1}/{size}"
    assert to_huge_end.content == whole

    huge_suffix = api.get(ref["url"], headers={"Range": f"bytes=-{huge}"})
    assert huge_suffix.status_code == 206
    assert huge_suffix.content == whole

    from_huge_start = api.get(ref["url"], headers={"Range": f"bytes={huge}-"})
    assert from_huge_start.status_code == 416
    assert from_huge_start.json()["error"]["type"] == "range_not_satisfiable"
    assert from_huge_start.headers["Content-Range"] == f"bytes */{size}"
    assert len(from_huge_start.text) < 1000  # the refused header is not echoed whole

    # Arabic-Indic digits are no byte positions: not a byte range, so the whole body.
    arabic = api.get(ref["url"], headers={"Range": "bytes=\u0660-\u0669".encode()})
    assert arabic.status_code == 200
    assert arabic.content == whole
    assert problems(caplog) == []


def test_event_ids_are_ascii_digits_only(api: httpx.Client, sid: str) -> None:
    execution_id = run(api, sid, "1 + 1")["id"]
    events = f"/v1/sessions/{sid}/executions/{execution_id}/events"
    refused = api.get(events, params={"after": "\u0661\u0662"})  # Arabic-Indic 12
    assert refused.status_code == 400, refused.text
    assert "ASCII digits" in refused.json()["error"]["message"]
    refused = api.get(events, params={"after": "\xb2"})  # superscript two
    assert refused.status_code == 400, refused.text
    resumed = api.get(events, params={"after": "0"})
    assert resumed.status_code == 200
    assert "event: done" in resumed.text


# ------------------------------------------------------------------ unknown methods


@pytest.mark.parametrize("method", ["FOO", "PROPFIND", "TRACE"])
def test_an_unknown_method_is_405_with_its_access_line_and_no_error_logged(
    srv: Server, api: httpx.Client, caplog: pytest.LogCaptureFixture, method: str
) -> None:
    caplog.set_level(logging.INFO)
    rid = f"unknown-method-{method}"
    answer = raw_request(
        srv,
        f"{method} /v1/sessions HTTP/1.1\r\nHost: x\r\nX-Request-Id: {rid}\r\n"
        "Connection: close\r\n\r\n".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 405 "), answer[:300]
    assert b'"method_not_allowed"' in answer
    (line,) = wait_for(
        lambda: [
            r
            for r in caplog.records
            if r.name == "interpreter.access" and getattr(r, "request_id", None) == rid
        ]
    )
    assert (line.method, line.route, line.status) == ("other", "/v1/sessions", 405)
    assert getattr(line, "session_id", None) is None
    assert problems(caplog) == []
    scraped = api.get("/metrics").text
    assert 'interp_http_requests_total{method="other",route="/v1/sessions",status="405"}' in (
        scraped
    )


# ------------------------------------------------------------------ session metadata


@pytest.mark.parametrize(
    "metadata",
    [
        {"label": "\ud800"},
        {"label": "ok", "nested": {"deeper": ["fine", "a\udfffb"]}},
        {"\ud800": "x"},
        {"outer": {"\udc00": 1}},
    ],
    ids=["value", "nested-value", "key", "nested-key"],
)
def test_metadata_with_a_lone_surrogate_is_422_and_creates_nothing(
    api: httpx.Client, caplog: pytest.LogCaptureFixture, metadata: dict[str, Any]
) -> None:
    caplog.set_level(logging.INFO)
    before = api.get("/v1/sessions")
    assert before.status_code == 200
    # json.dumps escapes the surrogate (\ud800), as a client's JSON would carry it.
    resp = api.post(
        "/v1/sessions",
        content=json.dumps({"metadata": metadata}).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert resp.status_code == 422, resp.text
    err = resp.json()["error"]
    assert err["type"] == "validation_error"
    assert "metadata" in err["message"] and "valid Unicode" in err["message"]
    after = api.get("/v1/sessions")
    assert after.status_code == 200
    assert len(after.json()["sessions"]) == len(before.json()["sessions"])
    assert problems(caplog) == []


def test_metadata_of_any_valid_unicode_is_kept(api: httpx.Client) -> None:
    metadata = {"отчёт": "数据 \U0001f600", "nested": {"list": ["\u00e9", 1, None, True]}}
    resp = api.post("/v1/sessions", json={"metadata": metadata})
    assert resp.status_code == 201, resp.text
    sid = resp.json()["id"]
    try:
        assert resp.json()["metadata"] == metadata
        assert api.get(f"/v1/sessions/{sid}").json()["metadata"] == metadata
    finally:
        api.delete(f"/v1/sessions/{sid}")


def test_a_record_stored_with_bad_metadata_is_served_with_replacement_characters(
    srv: Server, api: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    """An older version stored such metadata (and answered 500 for it from then on)."""
    caplog.set_level(logging.INFO)
    now = datetime.now(UTC)
    record = SessionRecord(
        id="s_stored_surrogates",
        owner=owner_of(KEY),
        status="closed",
        backend="local",
        created_at=now,
        last_activity_at=now,
        metadata={"label": "a\ud800b", "\udfff": {"list": ["\udc00"]}},
        closed_reason="deleted",
    )
    srv.thread.broker.store.insert_session(record)
    row = srv.thread.broker.store._db.execute(
        "SELECT metadata_json FROM sessions WHERE id = ?", (record.id,)
    ).fetchone()
    assert "\\ud800" in row[0]  # stored as an older version stored it

    expected = {"label": "a\ufffdb", "\ufffd": {"list": ["\ufffd"]}}
    listed = api.get("/v1/sessions")
    assert listed.status_code == 200, listed.text
    (mine,) = [s for s in listed.json()["sessions"] if s["id"] == record.id]
    assert mine["metadata"] == expected
    one = api.get(f"/v1/sessions/{record.id}")
    assert one.status_code == 200, one.text
    assert one.json()["metadata"] == expected
    assert problems(caplog) == []


# -------------------------------------------------------------------- download names


@pytest.mark.parametrize(
    ("name", "fallback"),
    [
        ("отчёт.csv", "_____.csv"),
        ("数据.txt", "__.txt"),
        ("caf\u00e9 menu.txt", "cafe_menu.txt"),
        ("\u0639\u0631\u0628\u064a.json", "____.json"),
        ("emoji\U0001f600.txt", "emoji_.txt"),
        ("plain-name_1.txt", "plain-name_1.txt"),
    ],
)
def test_a_download_named_outside_latin_1_gets_an_ascii_fallback_and_the_exact_name(
    api: httpx.Client, sid: str, caplog: pytest.LogCaptureFixture, name: str, fallback: str
) -> None:
    caplog.set_level(logging.INFO)
    url = f"/v1/sessions/{sid}/files/{quote(name)}"
    assert api.put(url, content=b"a,b\n1,2\n").status_code == 201
    resp = api.get(url)
    assert resp.status_code == 200, resp.text
    assert resp.content == b"a,b\n1,2\n"
    (value,) = [v for k, v in resp.headers.raw if k.lower() == b"content-disposition"]
    assert value.isascii(), value  # as sent
    # As a client that knows RFC 6266 reads it (filename* first): the exact name.
    assert parse_options_header(value.decode()) == ("attachment", {"filename": name})
    # As one that reads only filename: the ASCII stand-in.
    assert re.search(r'filename="([^"]*)"', value.decode()).group(1) == fallback  # type: ignore[union-attr]
    assert problems(caplog) == []


def test_a_fullwidth_name_is_downloadable(api: httpx.Client, sid: str) -> None:
    fullwidth_a = "\uff21.txt"
    url = f"/v1/sessions/{sid}/files/{quote(fullwidth_a)}"
    assert api.put(url, content=b"x").status_code == 201
    resp = api.get(url)
    assert resp.status_code == 200, resp.text
    assert 'filename="A.txt"' in resp.headers["Content-Disposition"]


def test_a_long_name_keeps_its_extension_in_the_fallback(api: httpx.Client, sid: str) -> None:
    name = "\u00e9" * 120 + ".parquet"  # 248 bytes: a name may have 255
    url = f"/v1/sessions/{sid}/files/{quote(name)}"
    assert api.put(url, content=b"x").status_code == 201
    resp = api.get(url)
    assert resp.status_code == 200, resp.text
    value = resp.headers["Content-Disposition"]
    assert parse_options_header(value)[1]["filename"] == name
    short = re.search(r'filename="([^"]*)"', value).group(1)  # type: ignore[union-attr]
    assert short == "e" * (100 - len(".parquet")) + ".parquet"


# ------------------------------------------------------------ a file that shrinks


def test_a_file_that_shrinks_while_sent_ends_the_connection_with_one_warning(
    srv: Server, api: httpx.Client, sid: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    size = 32 << 20  # far more than the socket buffers hold while the client waits
    run(api, sid, f"open('shrinks.bin', 'wb').write(b'x' * {size})")
    parts = urlsplit(srv.url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=60)
    # Fixed (no autotuning while the client does not read): at most a few MiB in flight.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 << 10)
    try:
        sock.sendall(
            f"GET /v1/sessions/{sid}/files/shrinks.bin HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {KEY}\r\nX-Request-Id: shrinking-1\r\n\r\n".encode()
        )
        received = sock.recv(4096)  # the file is open and being sent
        assert received.startswith(b"HTTP/1.1 200 "), received[:200]
        assert f"Content-Length: {size}".encode() in received
        run(api, sid, "import os; os.truncate('shrinks.bin', 1000)")
        while chunk := sock.recv(1 << 16):
            received += chunk
    finally:
        sock.close()
    body = received.partition(b"\r\n\r\n")[2]
    assert len(body) < size  # cut short: the connection was closed
    (warning,) = wait_for(
        lambda: [r for r in caplog.records if "changed while being sent" in r.getMessage()]
    )
    assert warning.levelno == logging.WARNING and not warning.exc_info
    assert "shrinking-1" in warning.getMessage()
    wait_for(lambda: [r for r in caplog.records if getattr(r, "request_id", None) == "shrinking-1"])
    assert problems(caplog) == []


class _SendsAnEmptiedFile(BaseHandler):
    """Opens a file of 10 bytes, empties it, then sends it: the race of a file rewritten
    between its size being read and its first byte."""

    async def get(self) -> None:
        fh = await asyncio.to_thread(_open_then_empty, Path(self.get_query_argument("file")))
        await self.send_file(fh, 10)


def _open_then_empty(path: Path) -> IO[bytes]:
    fh = path.open("rb")
    path.write_bytes(b"")
    return fh


def test_a_file_emptied_before_its_first_byte_is_sent_answers_409(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    target = tmp_path / "emptied.bin"
    target.write_bytes(b"0123456789")
    settings = settings_for(tmp_path / "data")
    app = tornado.web.Application(
        [("/", _SendsAnEmptiedFile, {"broker": None, "settings": settings})]
    )

    async def fetch() -> httpx.Response:
        sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
        server = tornado.httpserver.HTTPServer(app)
        server.add_sockets(sockets)
        port = sockets[0].getsockname()[1]
        try:
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}) as client:
                return await client.get(f"http://127.0.0.1:{port}/", params={"file": str(target)})
        finally:
            server.stop()

    resp = asyncio.run(fetch())
    assert resp.status_code == 409, resp.text
    assert resp.json()["error"]["type"] == "conflict"
    assert "changed while it was being read" in resp.json()["error"]["message"]
    assert problems(caplog) == []


# ------------------------------------------------------------------- artifact ETag


def test_artifacts_carry_their_id_as_strong_etag_on_get_and_head(
    api: httpx.Client, artifacts: list[dict[str, Any]]
) -> None:
    for ref in artifacts:
        etag = f'"{ref["id"]}"'
        head, get = api.head(ref["url"]), api.get(ref["url"])
        assert head.status_code == get.status_code == 200
        assert head.headers["ETag"] == get.headers["ETag"] == etag
        assert int(head.headers["Content-Length"]) == len(get.content) == ref["size"]


def test_artifact_conditional_requests(api: httpx.Client, artifacts: list[dict[str, Any]]) -> None:
    ref, other = artifacts
    etag, other_etag = f'"{ref["id"]}"', f'"{other["id"]}"'
    for method in ("GET", "HEAD"):
        same = api.request(method, ref["url"], headers={"If-None-Match": etag})
        assert same.status_code == 304, same.text
        assert same.content == b"" and same.headers["ETag"] == etag
        listed = api.request(method, ref["url"], headers={"If-None-Match": f"{other_etag}, {etag}"})
        assert listed.status_code == 304
        star = api.request(method, ref["url"], headers={"If-None-Match": "*"})
        assert star.status_code == 304
        changed = api.request(method, ref["url"], headers={"If-None-Match": other_etag})
        assert changed.status_code == 200
        # Before the fix every artifact's HEAD carried the SHA-1 of an empty body.
        empty = api.request(
            method,
            ref["url"],
            headers={"If-None-Match": '"da39a3ee5e6b4b0d3255bfef95601890afd80709"'},
        )
        assert empty.status_code == 200

    ranged = api.get(ref["url"], headers={"Range": "bytes=0-9", "If-Range": etag})
    assert ranged.status_code == 206 and len(ranged.content) == 10
    stale = api.get(ref["url"], headers={"Range": "bytes=0-9", "If-Range": other_etag})
    assert stale.status_code == 200 and len(stale.content) == ref["size"]


# --------------------------------------------------------------------- interrupt body


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"execution_id": "ex_doesnotexist"}', "execution_id: unknown field"),
        (b'{"generation": 1}', "generation: unknown field"),
        (b"this is not json", "Malformed JSON"),
        (b"[]", "must be an object"),
    ],
)
def test_interrupt_refuses_a_body_and_interrupts_nothing(
    api: httpx.Client, sid: str, body: bytes, says: str
) -> None:
    resp = api.post(
        f"/v1/sessions/{sid}/interrupt",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert resp.status_code == 422, resp.text
    message = resp.json()["error"]["message"]
    assert says in message and "?execution_id=" in message


def test_interrupt_accepts_no_body_or_an_empty_object(api: httpx.Client, sid: str) -> None:
    assert api.post(f"/v1/sessions/{sid}/interrupt").status_code == 200
    assert api.post(f"/v1/sessions/{sid}/interrupt", json={}).status_code == 200
