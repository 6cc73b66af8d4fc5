"""Refusals that name the fix that works, against a real broker (local backend), for each
reader: an HTTP client, an SDK user, a person at the shell, a model (found by an outside
agent tester).

A ``timeout_s`` over 86400 was refused with the request model's bound ("less than or
equal to 86400"), and 86400 then with the server's maximum (3600): two refusals for one
mistake. A key sent without ``Bearer`` was "Missing API key", and the SDK and ``interp``
passed the HTTP header advice to users who give their key as ``api_key=`` or
``--api-key``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import anyio
import httpx
import pytest

from interpreter.client import AsyncClient, AuthenticationError, Client
from interpreter.tools import ToolExecutor
from tests.conftest import REPO, Server

NO_KEY_SDK = (
    "This service needs an API key and none was sent: pass api_key= to Client or "
    "AsyncClient, or set INTERP_API_KEY."
)


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


def test_a_key_without_the_bearer_scheme_is_told_to_add_it(local_server: Server) -> None:
    key = local_server.api_key
    with httpx.Client(base_url=local_server.url, timeout=30) as http:
        for header in (key, f"Token {key}", f"Basic {key}"):
            resp = http.post("/v1/sessions", headers={"Authorization": header})
            assert resp.status_code == 401, resp.text
            message = resp.json()["error"]["message"]
            assert message == (
                "The Authorization header does not use the Bearer scheme: send "
                "'Authorization: Bearer <key>' (the word Bearer, a space, then the key)."
            )
            assert key not in resp.text
        resp = http.post("/v1/sessions", headers={"Authorization": "Bearer"})
        assert resp.status_code == 401
        assert "has no key after 'Bearer'" in resp.json()["error"]["message"]
        resp = http.post("/v1/sessions")
        assert resp.status_code == 401
        assert resp.json()["error"]["message"] == (
            "Missing API key: send 'Authorization: Bearer <key>'."
        )


def test_the_sdk_tells_its_user_how_to_give_a_key(
    local_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INTERP_API_KEY", raising=False)
    with (
        Client(local_server.url, max_retries=0) as client,
        pytest.raises(AuthenticationError) as missing,
    ):
        client.create_session()
    assert missing.value.message == NO_KEY_SDK
    assert missing.value.status == 401 and missing.value.code == "unauthorized"
    assert missing.value.details["api_key_sent"] is False

    async def from_async() -> AuthenticationError:
        async with AsyncClient(local_server.url, max_retries=0) as client:
            try:
                await client.list_sessions()
            except AuthenticationError as exc:
                return exc
        raise AssertionError("no key, yet no refusal")

    assert anyio.run(from_async).message == NO_KEY_SDK
    # A key it sent and the service refused: the service's words, which are right.
    with (
        Client(local_server.url, api_key="not-a-key-here", max_retries=0) as client,
        pytest.raises(AuthenticationError) as wrong,
    ):
        client.create_session()
    assert wrong.value.message == "Invalid API key." and "api_key_sent" not in wrong.value.details


def test_interp_tells_its_user_how_to_give_a_key(local_server: Server) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERP_")}
    env["INTERP_URL"] = local_server.url
    done = subprocess.run(
        [sys.executable, "-m", "interpreter", "sessions"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done
    assert done.stderr == (
        "interp: this service needs an API key and none was sent: give --api-key KEY or set "
        "INTERP_API_KEY (unauthorized, HTTP 401)\n"
    )
