"""A workspace file larger than one download is read in parts: the file route answers one
``Range: bytes=`` range (206, 416 past the end), the download limit applies to the part
asked for, the SDK reads a part, and the tools read only what they show (a real broker,
local backend, whose downloads are limited to 1 MiB here: reading a file whole would fail).
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterator

import httpx
import pytest
from PIL import Image

from interpreter.client import Client
from interpreter.tools import ToolExecutor
from interpreter.tools import logic as tool_logic
from tests.conftest import Server, own_server

LIMIT = 1 << 20
#: 100,000 numbered lines with two-byte characters: 1.2 MB, over LIMIT.
TEXT = "".join(f"é{i:06d} ü\n" for i in range(100_000))
DATA = TEXT.encode()


@pytest.fixture(scope="module")
def limited() -> Iterator[Server]:
    with own_server(
        "interp-file-ranges-", max_download_bytes=LIMIT, max_upload_bytes=4 * LIMIT, pool_size=0
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def session(limited: Server) -> Iterator[tuple[Client, str]]:
    with (
        Client(limited.url, api_key=limited.api_key) as client,
        client.create_session() as session,
    ):
        session.upload("big.txt", DATA)
        session.upload("empty.txt", b"")
        yield client, session.id


def test_the_file_route_answers_one_byte_range(
    limited: Server, session: tuple[Client, str]
) -> None:
    _, sid = session
    url = f"/v1/sessions/{sid}/files/big.txt"
    with limited.client() as api:
        whole = api.get(url)
        assert whole.status_code == 413, whole.text
        assert "Range" in whole.json()["error"]["message"]
        part = api.get(url, headers={"Range": "bytes=1000-1999"})
        assert part.status_code == 206, part.text
        assert part.headers["Content-Range"] == f"bytes 1000-1999/{len(DATA)}"
        assert part.headers["Accept-Ranges"] == "bytes"
        assert part.content == DATA[1000:2000]
        tail = api.get(url, headers={"Range": "bytes=-10"})
        assert tail.status_code == 206 and tail.content == DATA[-10:]
        # The limit applies to the part asked for.
        too_much = api.get(url, headers={"Range": f"bytes=0-{LIMIT}"})
        assert too_much.status_code == 413, too_much.text
        assert "INTERP_MAX_DOWNLOAD_BYTES" in too_much.json()["error"]["message"]
        past = api.get(url, headers={"Range": f"bytes={len(DATA)}-"})
        assert past.status_code == 416, past.text
        assert past.headers["Content-Range"] == f"bytes */{len(DATA)}"
        assert "outside the file" in past.json()["error"]["message"]
        # A file has no validator: If-Range asks for the whole file (here past the limit).
        validated = api.get(url, headers={"Range": "bytes=0-9", "If-Range": '"x"'})
        assert validated.status_code == 413, validated.text
        empty = api.get(f"/v1/sessions/{sid}/files/empty.txt")
        assert empty.status_code == 200 and empty.content == b""


def test_head_answers_as_get_would_without_the_bytes(
    limited: Server, session: tuple[Client, str]
) -> None:
    _, sid = session
    with limited.client() as api:
        small = api.head(f"/v1/sessions/{sid}/files/empty.txt")
        assert small.status_code == 200 and small.content == b""
        assert small.headers["Content-Length"] == "0"
        url = f"/v1/sessions/{sid}/files/big.txt"
        part = api.head(url, headers={"Range": "bytes=-10"})
        assert part.status_code == 206 and part.content == b""
        assert part.headers["Content-Length"] == "10"
        assert (
            part.headers["Content-Range"] == f"bytes {len(DATA) - 10}-{len(DATA) - 1}/{len(DATA)}"
        )
        assert api.head(url).status_code == 413  # as a GET of the whole file
        assert api.head(f"/v1/sessions/{sid}/files/missing.txt").status_code == 404
        health = api.head("/healthz")
        assert health.status_code == 200 and health.content == b""


def test_the_sdk_reads_part_of_a_file(session: tuple[Client, str]) -> None:
    client, sid = session
    s = client.get_session(sid)
    assert s.download("big.txt", offset=5, length=20) == DATA[5:25]
    assert s.download("big.txt", offset=len(DATA) - 100) == DATA[-100:]


def test_read_file_reads_the_head_and_the_tail_of_a_large_file(
    session: tuple[Client, str],
) -> None:
    client, sid = session
    executor = ToolExecutor(client)
    result = executor.execute(
        {"name": "read_file", "arguments": {"path": "big.txt", "session_id": sid}}
    )
    assert not result.is_error, result.text
    text = result.text
    assert text.startswith(f"big.txt: {len(DATA)} bytes, shown in part.\n")
    shown = text.split("\n", 1)[1]
    head, _, tail = shown.partition("\n[... ")
    cut, _, tail = tail.partition(" ...]\n")
    # The first 2/3 and last 1/3 of 20,000 characters, whole characters, and how many
    # bytes lie between them.
    assert head == TEXT[: len(head)] and len(head) == 13_333
    assert tail == TEXT[-len(tail) :] and len(tail) == 6_667
    assert cut.startswith(f"{len(DATA) - len(head.encode()) - len(tail.encode())} bytes omitted")
    empty = executor.execute(
        {"name": "read_file", "arguments": {"path": "empty.txt", "session_id": sid}}
    )
    assert empty.text == "empty.txt is empty."


def test_tools_refuse_files_too_large_to_show_without_reading_them(
    session: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, sid = session
    s = client.get_session(sid)
    executor = ToolExecutor(client)
    picture = io.BytesIO()  # a real one: read_file checks an image before it shows it
    noise = random.Random(7).randbytes(40 * 40 * 3)  # does not compress below 1000 bytes
    Image.frombytes("RGB", (40, 40), noise).save(picture, "PNG")
    png = picture.getvalue()
    assert len(png) > 1000
    s.upload("plot.png", png)
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}
    s.upload("old.ipynb", json.dumps(nb).encode())
    monkeypatch.setattr(tool_logic, "FILE_IMAGE_BYTES", 1000)
    monkeypatch.setattr(tool_logic, "NOTEBOOK_READ_BYTES", 50)

    def call(name: str, path: str) -> str:
        result = executor.execute({"name": name, "arguments": {"path": path, "session_id": sid}})
        return result.text

    assert call("read_file", "plot.png") == (
        f"plot.png: image/png, {len(png)} bytes: too large to show (at most 1000 bytes); "
        "make a smaller copy with run_code."
    )
    assert call("rebuild_from_notebook", "old.ipynb").startswith(
        f"Error: old.ipynb is {len(json.dumps(nb))} bytes; rebuild_from_notebook reads a notebook "
        "of at most 50 bytes."
    )
    monkeypatch.setattr(tool_logic, "FILE_IMAGE_BYTES", 1 << 20)
    shown = executor.execute(
        {"name": "read_file", "arguments": {"path": "plot.png", "session_id": sid}}
    )
    assert shown.images[0].data == png
    s.upload("blob.bin", b"\x00\x01" * 600_000)  # over the download limit
    assert call("read_file", "blob.bin") == (
        "blob.bin is a binary file of 1200000 bytes; inspect it with run_code."
    )


def test_a_download_answers_http_clients_as_before(
    limited: Server, session: tuple[Client, str]
) -> None:
    # A small file whole, with its length, and the header that says ranges are served.
    _, sid = session
    with limited.client() as api:
        api.put(f"/v1/sessions/{sid}/files/s.txt", content=b"hello")
        resp = api.get(f"/v1/sessions/{sid}/files/s.txt")
    assert resp.status_code == 200 and resp.content == b"hello"
    assert resp.headers["Content-Length"] == "5" and resp.headers["Accept-Ranges"] == "bytes"
    assert isinstance(resp, httpx.Response)
