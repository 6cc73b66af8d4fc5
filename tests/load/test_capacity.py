"""Capacity under concurrent creation (docs/security.md R-10): sessions being created count
once against the caps, so concurrent creations fill the cap exactly; one more gets 429
``too_many_sessions`` with ``Retry-After``, and a deletion frees its place at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.faults.conftest import Broker

CAP = 5


def test_concurrent_creations_fill_the_cap_exactly(tmp_path: Path) -> None:
    broker = Broker("local", tmp_path / "data", ("--max-sessions", str(CAP))).start()
    try:

        def create(_: int) -> int:
            with broker.client() as api:
                return api.post("/v1/sessions", json={}).status_code

        with ThreadPoolExecutor(CAP) as pool:
            codes = list(pool.map(create, range(CAP)))
        assert codes == [201] * CAP
        with broker.client() as api:
            over = api.post("/v1/sessions", json={})
            assert over.status_code == 429, over.text
            assert over.json()["error"]["type"] == "too_many_sessions"
            assert int(over.headers["Retry-After"]) > 0
            sid = api.get("/v1/sessions").json()["sessions"][0]["id"]
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
            assert api.post("/v1/sessions", json={}).status_code == 201
    finally:
        broker.stop()
