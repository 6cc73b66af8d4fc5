"""Refusals that name the fix that works, against a real broker (local backend), for each
reader: an HTTP client, a model (found by an outside agent tester).

A ``timeout_s`` over 86400 was refused with the request model's bound ("less than or
equal to 86400"), and 86400 then with the server's maximum (3600): two refusals for one
mistake.
"""

from __future__ import annotations

import contextlib

from interpreter.client import Client
from interpreter.tools import ToolExecutor
from tests.conftest import Server


def test_a_timeout_over_the_maximum_is_told_the_servers_maximum_at_once(
    local_server: Server,
) -> None:
    with local_server.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        try:
            for asked in (3601, 86400, 86401, 1e9, 1e308):
                resp = api.post(
                    f"/v1/sessions/{sid}/execute", json={"code": "1", "timeout_s": asked}
                )
                assert resp.status_code == 422, resp.text
                assert resp.json()["error"] == {
                    "type": "validation_error",
                    "message": f"timeout_s {asked:g} exceeds the server maximum 3600; "
                    "give at most 3600.",
                }
            ran = api.post(f"/v1/sessions/{sid}/execute", json={"code": "1", "timeout_s": 3600})
            assert ran.status_code == 200 and ran.json()["status"] == "ok"
            # Still a positive number of seconds.
            for bad in (0, -1, "soon"):
                resp = api.post(f"/v1/sessions/{sid}/execute", json={"code": "1", "timeout_s": bad})
                assert resp.status_code == 422 and "timeout_s" in resp.text
        finally:
            api.delete(f"/v1/sessions/{sid}")
    with (
        Client(local_server.url, api_key=local_server.api_key) as client,
        contextlib.closing(ToolExecutor(client)) as executor,
    ):
        call = {"type": "tool_use", "id": "t", "name": "run_code"}
        result = executor.execute({**call, "input": {"code": "1", "timeout_s": 100000}})
        assert result.is_error
        assert result.text == (
            "Error: timeout_s 100000 exceeds the server maximum 3600; give at most 3600. "
            "(validation_error)"
        )
