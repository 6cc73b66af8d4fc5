"""Auth, ownership and bad input through the API."""

from __future__ import annotations

import gzip
from collections.abc import Callable

import httpx
import pytest

from tests.conftest import OTHER_KEY, Server, run


def _paths(sid: str, artifact: str, execution: str) -> list[tuple[str, str]]:
    return [
        ("GET", f"/v1/sessions/{sid}"),
        ("DELETE", f"/v1/sessions/{sid}"),
        ("POST", f"/v1/sessions/{sid}/execute"),
        ("GET", f"/v1/sessions/{sid}/executions/{execution}"),
        ("POST", f"/v1/sessions/{sid}/interrupt"),
        ("POST", f"/v1/sessions/{sid}/restart"),
        ("GET", f"/v1/sessions/{sid}/files"),
        ("GET", f"/v1/sessions/{sid}/files/a.txt"),
        ("PUT", f"/v1/sessions/{sid}/files/b.txt"),
        ("DELETE", f"/v1/sessions/{sid}/files/a.txt"),
        ("GET", f"/v1/sessions/{sid}/notebook"),
        ("GET", f"/v1/sessions/{sid}/artifacts/{artifact}"),
    ]


def test_keys_and_ownership(
    server: Server, api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    api.put(f"/v1/sessions/{sid}/files/a.txt", content=b"secret")
    result = run(api, sid, "import matplotlib.pyplot as plt\nplt.plot([1]); plt.show()")
    artifact = result["outputs"][0]["artifacts"][0]["id"]
    paths = _paths(sid, artifact, result["id"])
    with server.client(key=None) as anonymous:
        for method, path in [*paths, ("GET", "/v1/sessions"), ("GET", "/metrics")]:
            resp = anonymous.request(method, path, json={"code": "1"})
            assert resp.status_code == 401, (method, path)
            assert resp.json()["error"]["type"] == "unauthorized"
    with server.client(key="wrong-key") as wrong:
        assert wrong.get("/v1/sessions").status_code == 401
    with server.client(key=OTHER_KEY) as other:
        for method, path in paths:
            body = {"code": "1"} if path.endswith("execute") else None
            resp = other.request(method, path, json=body)
            assert resp.status_code == 404, (method, path, resp.status_code)
        assert sid not in [s["id"] for s in other.get("/v1/sessions").json()["sessions"]]
    # Nothing was harmed by the attempts.
    assert api.get(f"/v1/sessions/{sid}/files/a.txt").content == b"secret"
    assert run(api, sid, "1 + 1")["status"] == "ok"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{not json", 422),
        (b"[1, 2]", 422),
        (b'{"code": 12}', 422),
        (b'{"code": "1", "unknown": true}', 422),
        (b'{"code": "1", "timeout_s": -1}', 422),
        (b'{"code": "1", "timeout_s": 1e12}', 422),
        (b'{"code": "1", "timeout_s": true}', 422),
        (b'{"code": "1", "timeout_s": "5"}', 422),
        (b'{"code": "a\\u0000b"}', 422),
        (b'{"code": "a\\ud800b"}', 422),
        (b'{"code": "1", "timeout_s": NaN}', 422),
        (b"[" * 10000 + b"]" * 10000, 422),
        (b"", 422),
    ],
    ids=[
        "malformed",
        "not-object",
        "wrong-type",
        "unknown-field",
        "negative-timeout",
        "absurd-timeout",
        "bool-timeout",
        "string-timeout",
        "nul",
        "lone-surrogate",
        "nan",
        "deep-nesting",
        "empty",
    ],
)
def test_bad_execute_bodies(
    api: httpx.Client, shared_session: str, body: bytes, status: int
) -> None:
    resp = api.post(
        f"/v1/sessions/{shared_session}/execute",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["type"] == "validation_error" and error["message"]
    assert "Traceback" not in resp.text and "/interpreter/" not in resp.text


def test_oversize_body_unknown_session_and_bad_create(
    api: httpx.Client, shared_session: str
) -> None:
    huge = b'{"code": "' + b"x" * (2 << 20) + b'"}'
    resp = api.post(f"/v1/sessions/{shared_session}/execute", content=huge)
    assert resp.status_code == 413
    assert resp.json()["error"]["type"] == "payload_too_large"
    missing = api.post("/v1/sessions/s_doesnotexist/execute", json={"code": "1"})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "session_not_found"
    for body in (
        {"limits": {"memory_mb": 10**9}},
        {"limits": {"cpus": 64}},
        # Under 0.01 the engine refused the container: a 503 with its raw message.
        {"limits": {"cpus": 0.0001}},
        {"env": {"PATH": "/tmp"}},
        {"nope": 1},
        {"limits": {"pids": "many"}},
    ):
        resp = api.post("/v1/sessions", json=body)
        assert resp.status_code == 422, (body, resp.text)
    # A compressed JSON body: gzip was refused as malformed JSON, other encodings ignored.
    for encoding, content in (("gzip", gzip.compress(b'{"code": "1"}')), ("br", b'{"code": "1"}')):
        resp = api.post(
            f"/v1/sessions/{shared_session}/execute",
            content=content,
            headers={"Content-Type": "application/json", "Content-Encoding": encoding},
        )
        assert resp.status_code == 415, resp.text
        assert resp.json()["error"]["type"] == "unsupported_encoding"
    assert api.get("/v1/nothing-here").status_code == 404
    assert api.patch("/v1/sessions").status_code == 405
    # The service and the session are fine afterwards.
    assert api.get("/healthz").json()["status"] == "ok"
    assert run(api, shared_session, "1")["status"] == "ok"


def test_session_env_reaches_kernel_but_broker_env_does_not(
    api: httpx.Client, new_session: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTERP_TEST_CANARY_SECRET", "do-not-leak")
    sid = new_session(env={"GREETING": "hello"})
    result = run(api, sid, "import os\nsorted(os.environ)")
    names = result["outputs"][0]["data"]["text/plain"]
    assert "GREETING" in names
    assert "CANARY" not in names and "AWS" not in names
