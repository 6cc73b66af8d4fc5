"""Reliability promises of docs/security.md: fencing (R-08), restart budget (R-03), maximum
lifetime (R-09) and idempotent creation and execution (R-10), through the HTTP API."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from interpreter.store import Store
from tests.conftest import OTHER_KEY, Server, run, start_server


def wait_for(predicate: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.1)
    return value


def error_type(resp: httpx.Response) -> str:
    body: dict[str, Any] = resp.json()
    return str(body["error"]["type"])


# ------------------------------------------------------------------------ R-08 fencing


def test_generation_counts_kernels_and_fences_stale_operations(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    session = api.get(f"/v1/sessions/{sid}").json()
    assert session["generation"] == 1
    assert run(api, sid, "x = 1")["generation"] == 1

    restarted = api.post(f"/v1/sessions/{sid}/restart?generation=1")
    assert restarted.status_code == 200, restarted.text
    assert restarted.json()["generation"] == 2

    # An agent that still believes in generation 1 must not hit the new kernel.
    for method, path in (
        ("POST", "interrupt"),
        ("POST", "restart"),
    ):
        stale = api.request(method, f"/v1/sessions/{sid}/{path}?generation=1")
        assert stale.status_code == 409, stale.text
        assert error_type(stale) == "generation_mismatch"
        assert "generation 2" in stale.json()["error"]["message"]
    stale_delete = api.delete(f"/v1/sessions/{sid}?generation=1")
    assert stale_delete.status_code == 409
    assert api.get(f"/v1/sessions/{sid}").json()["status"] == "idle"

    for bad in ("-1", "abc", "1.5", "9" * 20):
        resp = api.post(f"/v1/sessions/{sid}/interrupt", params={"generation": bad})
        assert resp.status_code == 422, (bad, resp.text)
        assert "generation" in resp.json()["error"]["message"]

    assert api.post(f"/v1/sessions/{sid}/interrupt?generation=2").status_code == 200
    assert run(api, sid, "y = 2")["generation"] == 2
    assert api.delete(f"/v1/sessions/{sid}?generation=2").status_code == 204
    closed = api.get(f"/v1/sessions/{sid}").json()
    assert closed["status"] == "closed"
    assert closed["generation"] == 2
    assert closed["closed_reason"] == "deleted"


def test_kernel_death_advances_the_generation(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    died = run(api, sid, "import os; os._exit(3)")
    assert died["status"] == "kernel_died"
    assert died["generation"] == 1
    assert api.get(f"/v1/sessions/{sid}").json()["generation"] == 2
    assert run(api, sid, "1 + 1")["generation"] == 2


# --------------------------------------------------------------- R-10 idempotent create


def test_idempotent_create_returns_the_first_session(server: Server) -> None:
    body = {"metadata": {"task": "idempotent"}}
    headers = {"Idempotency-Key": "create-0f3a"}
    with server.client() as api:
        before = {s["id"] for s in api.get("/v1/sessions").json()["sessions"]}
        first = api.post("/v1/sessions", json=body, headers=headers)
        assert first.status_code == 201, first.text
        assert "Idempotent-Replayed" not in first.headers
        sid = first.json()["id"]
        try:
            again = api.post("/v1/sessions", json=body, headers=headers)
            assert again.status_code == 201
            assert again.headers["Idempotent-Replayed"] == "true"
            assert again.json()["id"] == sid
            after = {s["id"] for s in api.get("/v1/sessions").json()["sessions"]}
            assert after - before == {sid}

            changed = api.post("/v1/sessions", json={"metadata": {}}, headers=headers)
            assert changed.status_code == 422
            assert error_type(changed) == "idempotency_key_reused"

            for bad in ("", "has space", "x" * 256, "caf\u00e9"):
                resp = api.post(
                    "/v1/sessions",
                    json=body,
                    headers={"Idempotency-Key": bad.encode("utf-8")},
                )
                assert resp.status_code == 422, (bad, resp.text)
                assert "Idempotency-Key" in resp.json()["error"]["message"]
        finally:
            api.delete(f"/v1/sessions/{sid}")
    # Keys belong to the API key that used them.
    with server.client(OTHER_KEY) as other:
        theirs = other.post("/v1/sessions", json=body, headers=headers)
        assert theirs.status_code == 201
        assert theirs.json()["id"] != sid
        assert "Idempotent-Replayed" not in theirs.headers
        other.delete(f"/v1/sessions/{theirs.json()['id']}")


def test_concurrent_creates_with_one_key_make_one_session(tmp_path: Path) -> None:
    srv = start_server("local", tmp_path / "data")
    try:
        results: list[httpx.Response] = []

        def create() -> None:
            with srv.client() as api:
                results.append(
                    api.post("/v1/sessions", json={}, headers={"Idempotency-Key": "race"})
                )

        threads = [threading.Thread(target=create) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [r.status_code for r in results] == [201] * 4
        assert len({r.json()["id"] for r in results}) == 1
        assert sum(r.headers.get("Idempotent-Replayed") == "true" for r in results) == 3
        with srv.client() as api:
            assert len(api.get("/v1/sessions").json()["sessions"]) == 1
    finally:
        srv.thread.stop()
    # Remembered across a broker restart (the key lives in state.db).
    again = start_server("local", tmp_path / "data")
    try:
        with again.client() as api:
            resp = api.post("/v1/sessions", json={}, headers={"Idempotency-Key": "race"})
            assert resp.status_code == 201
            assert resp.headers["Idempotent-Replayed"] == "true"
            assert resp.json()["id"] == results[0].json()["id"]
            assert resp.json()["status"] == "closed"
    finally:
        again.thread.stop()


# ------------------------------------------------------------- R-10 idempotent execute


def test_idempotent_execute_runs_code_once(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    run(api, sid, "n = 0")
    body = {"code": "import time; time.sleep(0.5); n += 1; n"}
    headers = {"Idempotency-Key": "exec-1"}
    url = f"/v1/sessions/{sid}/execute"
    first = api.post(url, json=body, headers=headers)
    assert first.status_code == 200, first.text
    assert first.json()["outputs"][0]["data"]["text/plain"] == "1"
    again = api.post(url, json=body, headers=headers)
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["outputs"] == first.json()["outputs"]

    # A streamed retry of the same request gets the same execution as its `done` event.
    sse = {**headers, "Accept": "text/event-stream"}
    with api.stream("POST", url, json=body, headers=sse) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    done = json.loads(lines[-1][6:])
    assert done["id"] == first.json()["id"]

    # Retried while the first is still running: it waits for that run, never starts another.
    slow = {"code": "time.sleep(1.5); n += 10; n"}
    replies: list[httpx.Response] = []

    def post() -> None:
        with httpx.Client(base_url=str(api.base_url), headers=api.headers, timeout=60) as c:
            replies.append(c.post(url, json=slow, headers={"Idempotency-Key": "exec-2"}))

    # Two concurrent requests with one key: whichever arrives first runs, the other waits
    # for it and gets the same execution.
    threads = [threading.Thread(target=post) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {r.json()["id"] for r in replies} == {replies[0].json()["id"]}
    assert all(r.json()["status"] == "ok" for r in replies)
    assert run(api, sid, "n")["outputs"][0]["data"]["text/plain"] == "11"

    changed = api.post(url, json={"code": "n"}, headers=headers)
    assert changed.status_code == 422
    assert error_type(changed) == "idempotency_key_reused"
    # The same key in another session is another request.
    other = new_session()
    run(api, other, "n = 100")
    elsewhere = api.post(f"/v1/sessions/{other}/execute", json=body, headers=headers)
    assert elsewhere.json()["outputs"][0]["data"]["text/plain"] == "101"


def test_failed_request_does_not_consume_the_key(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    headers = {"Idempotency-Key": "too-long-timeout"}
    url = f"/v1/sessions/{sid}/execute"
    refused = api.post(url, json={"code": "1", "timeout_s": 86400}, headers=headers)
    assert refused.status_code == 422  # above the server maximum: nothing ran
    api.delete(f"/v1/sessions/{sid}")
    # Another body under the same key: had the refused request consumed the key, this
    # would be 422 idempotency_key_reused.
    gone = api.post(url, json={"code": "1"}, headers=headers)
    assert gone.status_code == 409
    assert error_type(gone) == "session_closed"


# ------------------------------------------------------------ R-03 restart budget


def test_a_kernel_that_keeps_dying_fails_its_session(tmp_path: Path) -> None:
    srv = start_server("local", tmp_path / "data", restart_limit=2, restart_window_s=600)
    try:
        with srv.client() as api:
            sid = api.post("/v1/sessions", json={}).json()["id"]
            for _ in range(2):
                died = run(api, sid, "import os; os._exit(1)")
                assert died["status"] == "kernel_died"
                assert "fresh kernel was started" in died["error"]["evalue"]
            last = run(api, sid, "import os; os._exit(1)")
            assert last["status"] == "kernel_died"
            assert last["reason"] == "exit:1"
            assert "2 automatic restarts" in last["error"]["evalue"]
            closed = wait_for(
                lambda: (s := api.get(f"/v1/sessions/{sid}").json())["status"] == "closed" and s
            )
            assert closed["closed_reason"] == "restart_limit"
            refused = api.post(f"/v1/sessions/{sid}/execute", json={"code": "1"})
            assert refused.status_code == 409
            assert "restart_limit" in refused.json()["error"]["message"]
            notebook = api.get(f"/v1/sessions/{sid}/notebook").json()
            assert [c["cell_type"] for c in notebook["cells"]].count("code") == 3
            # A requested restart is not a crash: it never counts against the budget.
            other = api.post("/v1/sessions", json={}).json()["id"]
            for _ in range(3):
                assert api.post(f"/v1/sessions/{other}/restart").status_code == 200
            assert run(api, other, "1 + 1")["status"] == "ok"
    finally:
        srv.thread.stop()


# ------------------------------------------------------------ R-09 lifetime and expiry


def test_sessions_expire_at_their_maximum_lifetime(tmp_path: Path) -> None:
    srv = start_server("local", tmp_path / "data", max_lifetime_s=3, cull_interval_s=0.2)
    try:
        with srv.client() as api:
            sid = api.post("/v1/sessions", json={"idle_timeout_s": 0}).json()["id"]
            # Busy or not: the lifetime is counted from creation.
            running = run(api, sid, "import time; time.sleep(10)", timeout_s=30)
            assert running["status"] == "interrupted"
            assert running["reason"] == "session_closed"
            session = api.get(f"/v1/sessions/{sid}").json()
            assert session["status"] == "closed"
            assert session["closed_reason"] == "max_lifetime"
            expired = api.post(f"/v1/sessions/{sid}/execute", json={"code": "1"})
            assert expired.status_code == 410
            assert error_type(expired) == "session_expired"
            assert "max_lifetime" in expired.json()["error"]["message"]
            assert api.get(f"/v1/sessions/{sid}/notebook").status_code == 200
    finally:
        srv.thread.stop()


# ------------------------------------------------------------------- store migration


def test_store_adds_new_columns_to_an_old_database(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, owner TEXT NOT NULL, status TEXT NOT NULL,"
        " backend TEXT NOT NULL, created_at TEXT NOT NULL, last_activity_at TEXT NOT NULL,"
        " execution_count INTEGER NOT NULL DEFAULT 0, kernel_json TEXT NOT NULL DEFAULT '{}',"
        " metadata_json TEXT NOT NULL DEFAULT '{}', limits_json TEXT NOT NULL DEFAULT '{}',"
        " env_json TEXT NOT NULL DEFAULT '{}', idle_timeout_s REAL, connection_json TEXT,"
        " provisioner_json TEXT, rebuild_json TEXT, closed_reason TEXT)"
    )
    old.execute(
        "INSERT INTO sessions (id, owner, status, backend, created_at, last_activity_at)"
        " VALUES ('s_old', 'o', 'closed', 'local', '2026-01-01T00:00:00+00:00',"
        " '2026-01-01T00:00:00+00:00')"
    )
    old.commit()
    old.close()
    store = Store(path)
    try:
        row = store.get_session("s_old")
        assert row is not None and row.generation == 0
        store.put_idempotent("o", "sessions", "k", "hash", "s_old")
        assert store.get_idempotent("o", "sessions", "k")[:2] == ("hash", "s_old")  # type: ignore[index]
    finally:
        store.close()


def test_idempotency_keys_expire(tmp_path: Path) -> None:
    srv = start_server("local", tmp_path / "data", idempotency_ttl_s=0.001)
    try:
        with srv.client() as api:
            first = api.post("/v1/sessions", json={}, headers={"Idempotency-Key": "short"})
            time.sleep(0.05)
            second = api.post("/v1/sessions", json={}, headers={"Idempotency-Key": "short"})
            assert first.json()["id"] != second.json()["id"]
            assert "Idempotent-Replayed" not in second.headers
    finally:
        srv.thread.stop()
