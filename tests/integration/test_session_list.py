"""``GET /v1/sessions`` lists by state and in pages: a key's closed sessions stay on record
for good, and the whole list was the only answer (query parameters were ignored); the
SDK and the ``list_sessions`` tool ask for open ones (a real broker, local backend)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from interpreter.client import Client
from interpreter.tools import ToolExecutor
from tests.conftest import Server, own_server


@pytest.fixture(scope="module")
def listed() -> Iterator[tuple[Server, list[str]]]:
    """Five sessions of the key, oldest first; the second and the fourth closed."""
    with own_server("interp-session-list-", pool_size=0) as srv, srv.client() as api:
        ids = [api.post("/v1/sessions", json={}).json()["id"] for _ in range(5)]
        for closed in (ids[1], ids[3]):
            assert api.delete(f"/v1/sessions/{closed}").status_code == 204
        yield srv, ids
        for sid in ids:
            api.delete(f"/v1/sessions/{sid}")


def test_sessions_are_listed_by_state_and_in_pages(listed: tuple[Server, list[str]]) -> None:
    srv, ids = listed
    with srv.client() as api:

        def names(**params: object) -> tuple[list[str], str | None]:
            body = api.get("/v1/sessions", params=params).json()
            return [s["id"] for s in body["sessions"]], body["next"]

        assert names() == (ids, None)
        assert names(state="open") == ([ids[0], ids[2], ids[4]], None)
        assert names(state="closed") == ([ids[1], ids[3]], None)
        pages, after = [], None
        while True:
            page, after = names(limit=2, **({"after": after} if after else {}))
            pages.append(page)
            if after is None:
                break
        assert pages == [ids[:2], ids[2:4], ids[4:]]
        assert names(state="open", limit=1, after=ids[0]) == ([ids[2]], ids[2])
        for bad in ({"state": "idle"}, {"limit": 0}, {"limit": "many"}, {"limit": 1001}):
            refused = api.get("/v1/sessions", params=bad)
            assert refused.status_code == 422, (bad, refused.text)
    with srv.client(srv.other_key) as other:
        # Another key's session is no cursor (nor does it say whether it exists).
        refused = other.get("/v1/sessions", params={"after": ids[0]})
        assert refused.status_code == 400 and "not one of your sessions" in refused.text


def test_the_sdk_and_the_tool_list_open_sessions(listed: tuple[Server, list[str]]) -> None:
    srv, ids = listed
    with Client(srv.url, api_key=srv.api_key) as client:
        assert [s.id for s in client.list_sessions("open")] == [ids[0], ids[2], ids[4]]
        assert [s.id for s in client.list_sessions()] == ids
        text = ToolExecutor(client).execute({"name": "list_sessions", "arguments": {}}).text
    assert [line.split()[0] for line in text.splitlines()] == [ids[0], ids[2], ids[4]]
