"""A notebook sent in a request: larger than other JSON bodies may be, still bounded.

A notebook with a few plots is over a megabyte, the limit of the other JSON bodies
(``max_body_bytes``). Creating a session ``from_notebook`` and rebuilding one take it up
to ``max_notebook_body_bytes``; past that, the 413 names the setting. What the broker
holds of such bodies at once is bounded too (``max_large_bodies_bytes``).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from pydantic import ValidationError

from interpreter.client import BadRequestError, Client
from interpreter.errors import LargeBodiesBusy, PayloadTooLarge
from interpreter.settings import Settings
from tests.conftest import Server, own_server, run

#: The other JSON bodies' limit here (the default), and the notebooks'.
BODY_LIMIT = 1 << 20
NOTEBOOK_LIMIT = 3 << 20


def _notebook(printed: int) -> dict[str, Any]:
    """Two code cells, as the service records them: each printed ``printed`` characters."""
    cells = [
        {
            "cell_type": "code",
            "id": f"c{i}",
            "metadata": {},
            "execution_count": i + 1,
            "outputs": [{"output_type": "stream", "name": "stdout", "text": "x" * printed}],
            "source": source,
        }
        for i, source in enumerate(["base = 40", "answer = base + 2"])
    ]
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}


@pytest.fixture(scope="module")
def limited() -> Iterator[Server]:
    with own_server(
        "interp-nb-bodies-",
        max_body_bytes=BODY_LIMIT,
        max_notebook_body_bytes=NOTEBOOK_LIMIT,
        pool_size=0,
    ) as srv:
        yield srv


def _answer(api: httpx.Client, sid: str) -> str:
    result = run(api, sid, "answer")
    assert result["status"] == "ok", result
    text: str = result["outputs"][0]["data"]["text/plain"]
    return text


def test_a_notebook_over_the_json_limit_rebuilds_and_creates_a_session(limited: Server) -> None:
    nb = _notebook(700_000)  # about 1.4 MB of JSON: over max_body_bytes
    with Client(limited.url, api_key=limited.api_key) as client, limited.client() as api:
        with client.create_session() as session:
            info = session.rebuild(nb)
            report = info.rebuild
            assert report is not None and report.cells_ran == 2 and not report.failed, report
            assert _answer(api, session.id) == "42"
        created = client.create_session(from_notebook=nb)
        try:
            report = created.info.rebuild
            assert report is not None and report.cells_ran == 2 and not report.failed, report
            assert _answer(api, created.id) == "42"
        finally:
            created.close()


def test_a_body_past_the_limits_is_refused_with_the_setting_and_the_session_goes_on(
    limited: Server,
) -> None:
    with (
        Client(limited.url, api_key=limited.api_key) as client,
        limited.client() as api,
        client.create_session() as session,
    ):
        run(api, session.id, "kept = 'still here'")
        # Past the notebook limit: refused as it arrives, whatever route takes it.
        too_big = _notebook(1_600_000)  # about 3.2 MB
        with pytest.raises(BadRequestError) as refused:
            session.rebuild(too_big)
        assert "INTERP_MAX_NOTEBOOK_BODY_BYTES" in str(refused.value)
        resp = api.post("/v1/sessions", json={"from_notebook": too_big})
        assert resp.status_code == PayloadTooLarge.status, resp.text
        assert "INTERP_MAX_NOTEBOOK_BODY_BYTES" in resp.json()["error"]["message"]
        # The other JSON bodies keep their own limit.
        resp = api.post(f"/v1/sessions/{session.id}/execute", json={"code": "#" * BODY_LIMIT})
        assert resp.status_code == PayloadTooLarge.status, resp.text
        assert "INTERP_MAX_BODY_BYTES" in resp.json()["error"]["message"]
        assert run(api, session.id, "kept")["outputs"][0]["data"]["text/plain"] == ("'still here'")


#: What the broker holds of large bodies at once in :func:`budgeted`: one of about 2.4 MB
#: and one of about 1.4 MB do not fit together; each fits alone.
BUDGET = 3_500 << 10


@pytest.fixture(scope="module")
def budgeted() -> Iterator[Server]:
    with own_server(
        "interp-nb-budget-",
        max_body_bytes=BODY_LIMIT,
        max_notebook_body_bytes=NOTEBOOK_LIMIT,
        max_large_bodies_bytes=BUDGET,
        max_upload_bytes=4 << 20,
        pool_size=0,
    ) as srv:
        yield srv


def _held(api: httpx.Client) -> float:
    """The ``interp_large_body_bytes`` gauge."""
    for line in api.get("/metrics").text.splitlines():
        if line.startswith("interp_large_body_bytes "):
            return float(line.split()[1])
    raise AssertionError("no interp_large_body_bytes in /metrics")


def _held_becomes(api: httpx.Client, value: int) -> None:
    deadline = time.monotonic() + 10
    while _held(api) != value and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _held(api) == value


def _start_rebuild(server: Server, sid: str, body: bytes) -> socket.socket:
    """A rebuild whose headers and first half of ``body`` are sent; the rest is not."""
    parts = urlsplit(server.url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=60)
    sock.sendall(
        f"POST /v1/sessions/{sid}/rebuild HTTP/1.1\r\nHost: x\r\n".encode()
        + f"Authorization: Bearer {server.api_key}\r\nContent-Type: application/json\r\n".encode()
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body[: len(body) // 2]
    )
    return sock


def _assert_busy(resp: httpx.Response) -> None:
    assert resp.status_code == LargeBodiesBusy.status, resp.text
    error = resp.json()["error"]
    assert error["type"] == LargeBodiesBusy.code
    assert "INTERP_MAX_LARGE_BODIES_BYTES" in error["message"]
    assert int(resp.headers["Retry-After"]) >= 1


def test_large_bodies_share_a_budget_and_each_gives_its_share_back(budgeted: Server) -> None:
    big = json.dumps({"notebook": _notebook(1_200_000)}).encode()  # about 2.4 MB
    small = _notebook(700_000)  # about 1.4 MB: over max_body_bytes, so counted too
    with budgeted.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        try:
            first = _start_rebuild(budgeted, sid, big)
            _held_becomes(api, len(big))  # counted as announced, before it has all arrived
            # Another large body does not fit beside it, announced or chunked...
            _assert_busy(api.post(f"/v1/sessions/{sid}/rebuild", json={"notebook": small}))
            chunked = (
                json.dumps({"notebook": small}).encode()[i : i + 65536]
                for i in range(0, 2_000_000, 65536)
            )
            _assert_busy(api.post(f"/v1/sessions/{sid}/rebuild", content=chunked))
            # ...while ordinary bodies are not counted, nor uploads (they go to disk).
            assert run(api, sid, "40 + 2")["outputs"][0]["data"]["text/plain"] == "42"
            upload = api.put(f"/v1/sessions/{sid}/files/big.bin", content=b"u" * (3 << 20))
            assert upload.status_code == 201, upload.text
            # The first body, completed, is answered, and gives its share back.
            first.sendall(big[len(big) // 2 :])
            first.settimeout(120)
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += first.recv(65536)
            first.close()
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
            _held_becomes(api, 0)
            resp = api.post(f"/v1/sessions/{sid}/rebuild", json={"notebook": small})
            assert resp.status_code == 200, resp.text
            # So does a body whose client went away before sending all of it.
            gone = _start_rebuild(budgeted, sid, big)
            _held_becomes(api, len(big))
            gone.close()
            _held_becomes(api, 0)
            resp = api.post(f"/v1/sessions/{sid}/rebuild", json={"notebook": small})
            assert resp.status_code == 200, resp.text
            assert _answer(api, sid) == "42"
        finally:
            api.delete(f"/v1/sessions/{sid}")


def test_a_notebook_limit_above_the_budget_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="max_notebook_body_bytes"):
        Settings(data_dir=tmp_path, max_notebook_body_bytes=8 << 20, max_large_bodies_bytes=4 << 20)
    # Unset, the notebook limit follows a smaller budget.
    assert Settings(data_dir=tmp_path, max_large_bodies_bytes=4 << 20).max_notebook_body_bytes == (
        4 << 20
    )
