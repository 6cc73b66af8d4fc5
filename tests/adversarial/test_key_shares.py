"""One API key cannot lock the other keys out of what they all share (found by an outside
security tester).

Connections, upload slots and the budget of large bodies were capped in all only: a key
that kept ``--max-connections`` keep-alive connections open (a request each every few
seconds) made every other key's requests and ``GET /healthz`` fail with a connection
reset; sixteen uploads trickled at a byte a second held every upload slot for the body
timeout, and every other key got ``503 too_many_uploads``. Each key now has a share of
each (429 with Retry-After past it); at the connection cap, an idle connection of the key
holding the most is closed to let a new one in; a request in progress is never cut.

Against a real broker with small caps; each wait is on something the broker says (an
answer, ``100 Continue`` once a request is past its checks, a gauge), never on time.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from interpreter.errors import KeyLargeBodiesFull, KeyUploadsFull, TooManyConnections
from tests.conftest import KEY, OTHER_KEY, Server, own_server

pytestmark = pytest.mark.timeout(300)
THIRD_KEY = "test-key-charlie"
#: The connection caps of :func:`crowded`: 20 in all, 8 for one key.
CAP, SHARE = 20, 8


@pytest.fixture
def crowded() -> Iterator[Server]:
    """A broker of its own for each test: the connections of one test are not counted in
    the next one's."""
    with own_server(
        "interp-keyshare-conns-",
        api_keys=[KEY, OTHER_KEY, THIRD_KEY],
        max_connections=CAP,
        max_connections_per_key=SHARE,
        pool_size=0,
    ) as srv:
        yield srv


class Answer:
    """An HTTP answer read off a socket."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=30)


def _head(method: str, path: str, key: str | None, length: int | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: x"]
    if key is not None:
        lines.append(f"Authorization: Bearer {key}")
    if length is not None:
        lines += [f"Content-Length: {length}", "Expect: 100-continue"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _read_answer(sock: socket.socket) -> Answer | None:
    """The next answer on ``sock`` (after any ``100 Continue``); None when the broker
    closed the connection instead."""
    data = b""
    try:
        while True:
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    return None
                data += chunk
            head, _, data = data.partition(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            if status != 100:
                break
        headers = {}
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(data) < length:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
    except OSError:  # reset by the broker
        return None
    return Answer(status, headers, data[:length])


def _ask(sock: socket.socket, path: str, key: str | None) -> Answer | None:
    """A GET on ``sock`` and its answer; None when the connection was closed."""
    try:
        sock.sendall(_head("GET", path, key))
    except OSError:
        return None
    return _read_answer(sock)


def _status(answer: Answer | None) -> int | None:
    return None if answer is None else answer.status


def _fresh(url: str, path: str, key: str | None) -> int | None:
    """The status of a GET on a new connection (None: the broker closed it)."""
    with _connect(url) as sock:
        return _status(_ask(sock, path, key))


def _continued(sock: socket.socket) -> None:
    """Wait for ``100 Continue``: the broker has authenticated the request (and taken its
    upload slot or its room for a large body, or decided to refuse it)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1)
        assert chunk, f"closed instead of 100 Continue: {data!r}"
        data += chunk
    assert data.startswith(b"HTTP/1.1 100"), data


def _busy(url: str, key: str, body: bytes) -> socket.socket:
    """A connection of ``key`` with a request in progress: the head of an execute is in,
    its body is not."""
    sock = _connect(url)
    sock.sendall(_head("POST", "/v1/sessions/nosuchsession/execute", key, len(body)))
    _continued(sock)
    return sock


EXECUTE = json.dumps({"code": "1"}).encode()


def test_a_key_keeping_connections_alive_holds_only_its_share(crowded: Server) -> None:
    url = crowded.url
    held = []
    firsts = []
    for _ in range(CAP):  # as the tester's client: every connection the broker takes
        sock = _connect(url)
        held.append(sock)
        firsts.append(_status(_ask(sock, "/v1/info", KEY)))
    # Past its share, a connection of the key either closed one of its idle ones, or
    # was answered 429 and closed (when none had been idle long enough).
    assert set(firsts) <= {200, TooManyConnections.status}, firsts
    # The other keys and the health check are served on new connections (they were
    # reset)...
    for _ in range(3):
        assert _fresh(url, "/healthz", None) == 200
        assert _fresh(url, "/v1/sessions", OTHER_KEY) == 200
        assert _fresh(url, "/v1/sessions", THIRD_KEY) == 200
    # ...while the key keeps its connections alive (a request on each): no more than its
    # share still answers, and those go on answering.
    alive = [sock for sock in held if _status(_ask(sock, "/v1/info", KEY)) == 200]
    assert 1 <= len(alive) <= SHARE, len(alive)
    assert _fresh(url, "/healthz", None) == 200
    assert all(_status(_ask(sock, "/v1/info", KEY)) == 200 for sock in alive)
    for sock in held:
        sock.close()


def test_a_key_whose_connections_are_all_busy_gets_429_past_its_share(crowded: Server) -> None:
    url = crowded.url
    busy = [_busy(url, KEY, EXECUTE) for _ in range(SHARE)]
    extra = _connect(url)
    refused = _ask(extra, "/v1/info", KEY)
    assert refused is not None and refused.status == TooManyConnections.status
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["connection"] == "close"
    error = refused.json()["error"]
    assert error["type"] == "too_many_connections"
    assert "INTERP_MAX_CONNECTIONS_PER_KEY" in error["message"], error
    assert extra.recv(1) == b""  # and closed after the answer
    extra.close()
    assert _fresh(url, "/healthz", None) == 200
    assert _fresh(url, "/v1/sessions", OTHER_KEY) == 200
    # The key's requests in progress were never cut: each is answered once its body is in.
    for sock in busy:
        sock.sendall(EXECUTE)
        answer = _read_answer(sock)
        assert answer is not None and answer.status == 404, answer and answer.body
        assert answer.json()["error"]["type"] == "session_not_found"
        sock.close()
    # With them done, the key opens new connections again.
    assert _fresh(url, "/v1/info", KEY) == 200


def test_at_the_cap_healthz_closes_an_idle_connection_of_the_key_holding_the_most(
    crowded: Server,
) -> None:
    url = crowded.url
    busy = [_busy(url, KEY, EXECUTE) for _ in range(SHARE)]
    idle: dict[str, list[socket.socket]] = {OTHER_KEY: [], THIRD_KEY: []}
    for key, count in ((OTHER_KEY, SHARE), (THIRD_KEY, CAP - 2 * SHARE)):
        for _ in range(count):
            sock = _connect(url)
            assert _status(_ask(sock, "/v1/info", key)) == 200
            idle[key].append(sock)
    # Every connection the broker takes is open; the key holding the most whose
    # connections are idle between requests gives one up for the health check.
    assert _fresh(url, "/healthz", None) == 200
    answered = {
        key: sum(_status(_ask(sock, "/v1/info", key)) == 200 for sock in socks)
        for key, socks in idle.items()
    }
    assert answered == {OTHER_KEY: SHARE - 1, THIRD_KEY: CAP - 2 * SHARE}, answered
    # The busy connections (as many, but none idle) were not the ones closed.
    for sock in busy:
        sock.sendall(EXECUTE)
        answer = _read_answer(sock)
        assert answer is not None and answer.status == 404, answer and answer.body
        sock.close()
    for socks in idle.values():
        for sock in socks:
            sock.close()


def test_at_the_cap_of_many_keys_of_one_connection_each_healthz_is_served() -> None:
    keys = [f"test-key-{i:02d}" for i in range(8)]
    with own_server("interp-keyshare-many-", api_keys=keys, max_connections=8, pool_size=0) as srv:
        held = []
        for key in keys:
            sock = _connect(srv.url)
            assert _status(_ask(sock, "/v1/info", key)) == 200
            held.append(sock)
        assert _fresh(srv.url, "/healthz", None) == 200
        alive = sum(
            _status(_ask(sock, "/v1/info", key)) == 200
            for sock, key in zip(held, keys, strict=True)
        )
        assert alive == len(keys) - 1
        for sock in held:
            sock.close()


# -- uploads and large bodies ------------------------------------------------------------


@pytest.fixture(scope="module")
def intake() -> Iterator[Server]:
    with own_server(
        "interp-keyshare-intake-",
        api_keys=[KEY, OTHER_KEY, THIRD_KEY],
        max_concurrent_uploads=4,
        max_concurrent_uploads_per_key=2,
        max_notebook_body_bytes=2 << 20,
        max_large_bodies_bytes=4 << 20,
        max_large_bodies_bytes_per_key=(5 << 20) // 2,
        pool_size=0,
    ) as srv:
        yield srv


def _gauge(api: httpx.Client, name: str) -> float:
    for line in api.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def _slow_upload(url: str, key: str, sid: str, name: str) -> socket.socket:
    """An upload whose head is in and counted (or refused), and 10 of its 1000 bytes."""
    sock = _connect(url)
    sock.sendall(_head("PUT", f"/v1/sessions/{sid}/files/{name}", key, 1000))
    _continued(sock)
    sock.sendall(b"x" * 10)
    return sock


def _finish(sock: socket.socket, rest: bytes) -> Answer:
    sock.sendall(rest)
    answer = _read_answer(sock)
    sock.close()
    assert answer is not None
    return answer


def test_one_key_trickling_uploads_holds_only_its_share_of_the_slots(intake: Server) -> None:
    url = intake.url
    with (
        intake.client(KEY) as mine,
        intake.client(OTHER_KEY) as other,
        intake.client(THIRD_KEY) as third,
    ):
        sids = {
            name: api.post("/v1/sessions", json={}).json()["id"]
            for name, api in (("mine", mine), ("other", other), ("third", third))
        }
        try:
            # As the tester's client: one key trickles as many uploads as the service takes.
            slow = [_slow_upload(url, KEY, sids["mine"], f"slow{i}.bin") for i in range(4)]
            assert _gauge(mine, "interp_uploads_receiving") == 2  # its share, not all four
            over = mine.put(f"/v1/sessions/{sids['mine']}/files/more.bin", content=b"y")
            assert over.status_code == KeyUploadsFull.status, over.text
            assert over.headers["Retry-After"] == "2"
            assert over.json()["error"]["type"] == "too_many_uploads"
            assert "INTERP_MAX_CONCURRENT_UPLOADS_PER_KEY" in over.json()["error"]["message"]
            # Another key's upload goes through meanwhile.
            ok = other.put(f"/v1/sessions/{sids['other']}/files/mine.txt", content=b"hello")
            assert ok.status_code == 201, ok.text
            # The whole cap stays: two keys at their shares fill it, and a third gets 503.
            others = [_slow_upload(url, OTHER_KEY, sids["other"], f"o{i}.bin") for i in range(2)]
            assert _gauge(mine, "interp_uploads_receiving") == 4
            full = third.put(f"/v1/sessions/{sids['third']}/files/t.bin", content=b"z")
            assert full.status_code == 503, full.text
            assert full.json()["error"]["type"] == "too_many_uploads"
            # The uploads past the share are answered 429 once their bodies are in; the
            # others are stored.
            statuses = [_finish(sock, b"x" * 990).status for sock in slow + others]
            assert statuses == [201, 201, 429, 429, 201, 201], statuses
            assert _gauge(mine, "interp_uploads_receiving") == 0
            again = third.put(f"/v1/sessions/{sids['third']}/files/t.bin", content=b"z")
            assert again.status_code == 201, again.text
        finally:
            for name, api in (("mine", mine), ("other", other), ("third", third)):
                api.delete(f"/v1/sessions/{sids[name]}")


def _notebook_body(size: int) -> bytes:
    """A rebuild's body of ``size`` bytes: a valid notebook, padded with spaces."""
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}
    body = json.dumps({"notebook": nb}).encode()
    return body + b" " * (size - len(body))


def test_one_key_announcing_large_bodies_holds_only_its_share_of_the_budget(
    intake: Server,
) -> None:
    url = intake.url
    size = (3 << 20) // 2  # over max_body_bytes: counted from its Content-Length
    body = _notebook_body(size)
    path = "/v1/sessions/nosuchsession/rebuild"
    with intake.client(KEY) as mine, intake.client(OTHER_KEY) as other:
        # As the tester's client: one key announces large bodies and sends them slowly.
        slow = []
        for _ in range(2):
            sock = _connect(url)
            sock.sendall(_head("POST", path, KEY, size))
            _continued(sock)
            slow.append(sock)
        assert _gauge(mine, "interp_large_body_bytes") == size  # its share holds one
        over = mine.post(path, content=body)
        assert over.status_code == KeyLargeBodiesFull.status, over.text
        assert int(over.headers["Retry-After"]) >= 1
        assert over.json()["error"]["type"] == "too_many_large_bodies"
        assert "INTERP_MAX_LARGE_BODIES_BYTES_PER_KEY" in over.json()["error"]["message"]
        # Another key's large body is taken meanwhile (and answered: no such session).
        theirs = other.post(path, content=body)
        assert theirs.status_code == 404, theirs.text
        statuses = [_finish(sock, body).status for sock in slow]
        assert statuses == [404, 429], statuses
        deadline = time.monotonic() + 10
        while _gauge(mine, "interp_large_body_bytes") != 0:
            assert time.monotonic() < deadline, "the held bytes were not given back"
            time.sleep(0.02)


def test_the_e2b_surface_counts_a_key_connections_against_its_share() -> None:
    with own_server(
        "interp-keyshare-e2b-",
        max_connections=CAP,
        max_connections_per_key=SHARE,
        e2b_port=0,
        pool_size=0,
    ) as srv:
        url = srv.thread.e2b_urls[0]
        body = json.dumps({"timeout": 10}).encode()
        busy = []
        for _ in range(SHARE):
            sock = _connect(url)
            head = _head("POST", "/sandboxes/nosuchsandbox/timeout", None, len(body))
            sock.sendall(head.replace(b"Host: x\r\n", f"Host: x\r\nX-API-Key: {KEY}\r\n".encode()))
            _continued(sock)
            busy.append(sock)
        with _connect(url) as extra:
            extra.sendall(
                f"GET /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: {KEY}\r\n\r\n".encode()
            )
            refused = _read_answer(extra)
            assert refused is not None and refused.status == 429, refused and refused.body
            assert refused.json()["code"] == 429
            assert "INTERP_MAX_CONNECTIONS_PER_KEY" in refused.json()["message"]
            assert extra.recv(1) == b""
        with _connect(url) as other:
            other.sendall(
                f"GET /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: {OTHER_KEY}\r\n\r\n".encode()
            )
            assert _status(_read_answer(other)) == 200
        for sock in busy:
            answer = _finish(sock, body)
            assert answer.status == 404, answer.body
