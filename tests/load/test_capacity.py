"""Capacity under concurrent creation (docs/security.md R-10): sessions being created count
once against the caps, from before anything awaits, so concurrent creations fill the cap
exactly, the global one and each API key's; the rest get 429 ``too_many_sessions`` with
``Retry-After``, and a deletion frees its place at once."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import zip_longest
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import KEY, OTHER_KEY
from tests.faults.conftest import Broker

CAP = 5
PER_KEY = 3


def burst(broker: Broker, requests: list[tuple[str, dict[str, Any]]]) -> list[httpx.Response]:
    """Send every (API key, body) creation at once; the answers in order."""

    def create(request: tuple[str, dict[str, Any]]) -> httpx.Response:
        key, body = request
        with broker.client(key=key) as api:
            return api.post("/v1/sessions", json=body)

    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(create, requests))


def assert_refused(answers: list[httpx.Response], says: str) -> None:
    for over in answers:
        assert over.status_code == 429, over.text
        assert over.json()["error"]["type"] == "too_many_sessions", over.text
        assert says in over.json()["error"]["message"], over.text
        assert int(over.headers["Retry-After"]) > 0


def new(api: httpx.Client) -> dict[str, Any]:
    return {}


def fork(api: httpx.Client) -> dict[str, Any]:
    """A copy of a session of the same key (rebuilt from it: reading the source awaits)."""
    resp = api.post("/v1/sessions", json={})
    assert resp.status_code == 201, resp.text
    return {"from_session": resp.json()["id"]}


@pytest.mark.parametrize("kind", [new, fork], ids=["new", "fork"])
def test_concurrent_creations_fill_the_cap_exactly(
    tmp_path: Path, kind: Callable[[httpx.Client], dict[str, Any]]
) -> None:
    broker = Broker("local", tmp_path / "data", ("--max-sessions", str(CAP))).start()
    try:
        with broker.client() as api:
            body = kind(api)
            room = CAP - len(api.get("/v1/sessions").json()["sessions"])
        answers = burst(broker, [(KEY, body)] * 4 * CAP)
        assert [r.status_code for r in answers].count(201) == room, [r.text for r in answers]
        assert_refused([r for r in answers if r.status_code != 201], f"maximum of {CAP} sessions")
        with broker.client() as api:
            sessions = api.get("/v1/sessions").json()["sessions"]
            assert len(sessions) == CAP
            assert_refused([api.post("/v1/sessions", json={})], f"maximum of {CAP} sessions")
            assert api.delete(f"/v1/sessions/{sessions[0]['id']}").status_code == 204
            assert api.post("/v1/sessions", json={}).status_code == 201
    finally:
        broker.stop()


@pytest.mark.parametrize("kind", [new, fork], ids=["new", "fork"])
def test_concurrent_creations_with_one_key_stop_at_its_cap(
    tmp_path: Path, kind: Callable[[httpx.Client], dict[str, Any]]
) -> None:
    """The per-key cap (``max_sessions_per_key``) under a burst: one key gets exactly its
    cap, the rest 429; another key's creations in the same burst all succeed (the global
    cap is far); a deletion frees a place of its key."""
    extra = ("--max-sessions", str(4 * PER_KEY), "--max-sessions-per-key", str(PER_KEY))
    broker = Broker("local", tmp_path / "data", (*extra, "--api-key", OTHER_KEY)).start()
    try:
        with broker.client() as api:
            body = kind(api)
            room = PER_KEY - len(api.get("/v1/sessions").json()["sessions"])
        mine = [(KEY, body)] * (room + 2 * PER_KEY)
        theirs: list[tuple[str, dict[str, Any]]] = [(OTHER_KEY, {})] * PER_KEY
        # Interleaved, so that both keys' creations are under way at once.
        requests = [r for pair in zip_longest(mine, theirs) for r in pair if r is not None]
        got: dict[str, list[httpx.Response]] = {KEY: [], OTHER_KEY: []}
        for (key, _), answer in zip(requests, burst(broker, requests), strict=True):
            got[key].append(answer)
        assert [a.status_code for a in got[OTHER_KEY]] == [201] * PER_KEY
        assert [a.status_code for a in got[KEY]].count(201) == room, [a.text for a in got[KEY]]
        assert_refused(
            [a for a in got[KEY] if a.status_code != 201], f"This API key already has {PER_KEY}"
        )
        with broker.client() as api:
            sessions = api.get("/v1/sessions").json()["sessions"]
            assert len(sessions) == PER_KEY
            assert_refused(
                [api.post("/v1/sessions", json={})], f"This API key already has {PER_KEY}"
            )
            assert api.delete(f"/v1/sessions/{sessions[0]['id']}").status_code == 204
            assert api.post("/v1/sessions", json={}).status_code == 201
        with broker.client(key=OTHER_KEY) as other:
            assert len(other.get("/v1/sessions").json()["sessions"]) == PER_KEY
    finally:
        broker.stop()
