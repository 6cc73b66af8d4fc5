"""The retention of closed sessions (``retain_closed_days``): a real broker removes what is
due, says so to the session's key, and keeps everything else (and verifiable)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from interpreter.audit_verify import format_report, verify
from interpreter.store import Store
from tests.conftest import OTHER_KEY, require_quotas, run, start_server

#: Two seconds, in days.
TWO_SECONDS = 2 / 86400


def wait_for(predicate: Any, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)
    return value


def test_a_closed_session_goes_after_the_retention_and_says_so(tmp_path: Path) -> None:
    require_quotas()  # the removed session had its own workspace filesystem
    data_dir = tmp_path / "data"
    srv = start_server("local", data_dir, cull_interval_s=0.2, retain_closed_days=TWO_SECONDS)
    try:
        with srv.client() as api, srv.client(OTHER_KEY) as other:
            gone = api.post("/v1/sessions", json={"limits": {"disk_mb": 16}}).json()["id"]
            kept = api.post("/v1/sessions").json()["id"]
            ran = run(api, gone, "open('data.csv', 'w').write('a,b\\n1,2\\n'); print('bye')")
            run(api, kept, "print('still here')")
            assert api.put(f"/v1/sessions/{gone}/files/up.txt", content=b"x").status_code < 300
            assert api.delete(f"/v1/sessions/{gone}").status_code == 204
            closed = api.get(f"/v1/sessions/{gone}").json()
            assert closed["status"] == "closed" and closed["closed_at"] is not None
            assert (data_dir / "sessions" / gone / "workspace" / "data.csv").is_file()

            answer = wait_for(
                lambda: (r := api.get(f"/v1/sessions/{gone}")).status_code == 410 and r
            )
            error = answer.json()["error"]
            assert error["type"] == "session_purged"
            assert closed["closed_at"][:19] in error["message"]
            assert "retention" in error["message"]
            for path in (
                "/notebook",
                f"/executions/{ran['id']}",
                "/files?path=.",
                "/files/data.csv",
            ):
                assert api.get(f"/v1/sessions/{gone}{path}").status_code == 410, path
            assert api.post(f"/v1/sessions/{gone}/execute", json={"code": "1"}).status_code == 410
            # Another key learns nothing: as for any session not its own.
            assert other.get(f"/v1/sessions/{gone}").status_code == 404
            # The directory goes right after the rows.
            wait_for(lambda: not (data_dir / "sessions" / gone).exists())
            listed = [s["id"] for s in api.get("/v1/sessions?state=all").json()["sessions"]]
            assert listed == [kept]

            # The open session is untouched, and goes on.
            assert run(api, kept, "print('and on')")["stdout"] == "and on\n"
            metrics = api.get("/metrics").text
            assert "interp_sessions_purged_total 1.0" in metrics
    finally:
        srv.thread.stop()

    with sqlite3.connect(data_dir / "state.db") as db:
        for table, column in (("executions", "session_id"), ("audit_links", "session_id")):
            left = db.execute(f"SELECT count(*) FROM {table} WHERE {column} = ?", (gone,))
            assert left.fetchone()[0] == 0, table
        kept_rows = db.execute("SELECT count(*) FROM audit_links WHERE session_id = ?", (kept,))
        assert kept_rows.fetchone()[0] == 2
    report = verify(data_dir)
    assert report.ok and report.purged == 1
    assert [s.session_id for s in report.sessions] == [kept]
    assert "1 closed session removed by the retention, not checked" in format_report(report)
    alone = verify(data_dir, gone)
    assert not alone.ok and alone.error is not None
    assert "removed" in alone.error and "retention" in alone.error


def test_without_a_retention_closed_sessions_stay(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    srv = start_server("local", data_dir, cull_interval_s=0.2)
    try:
        with srv.client() as api:
            sid = api.post("/v1/sessions").json()["id"]
            run(api, sid, "print(1)")
            api.delete(f"/v1/sessions/{sid}")
            time.sleep(1.0)  # five sweeps of the broker's own
            assert api.get(f"/v1/sessions/{sid}").json()["status"] == "closed"
            assert api.get(f"/v1/sessions/{sid}/notebook").status_code == 200
    finally:
        srv.thread.stop()


def test_a_directory_left_by_a_stop_halfway_goes_at_the_next_start(tmp_path: Path) -> None:
    """The rows went, the broker stopped before the directory did: the next broker with a
    retention removes it, and a session that was never removed keeps its own."""
    data_dir = tmp_path / "data"
    srv = start_server("local", data_dir)
    with srv.client() as api:
        sid = api.post("/v1/sessions").json()["id"]
        run(api, sid, "print(1)")
        api.delete(f"/v1/sessions/{sid}")
        other = api.post("/v1/sessions").json()["id"]
        run(api, other, "print(2)")
    srv.thread.stop()
    store = Store(data_dir / "state.db")
    assert store.purge_session(sid)
    store.close()
    assert (data_dir / "sessions" / sid / "notebook.ipynb").is_file()

    again = start_server("local", data_dir, cull_interval_s=0.2, retain_closed_days=30)
    try:
        wait_for(lambda: not (data_dir / "sessions" / sid).exists())
        assert (data_dir / "sessions" / other / "notebook.ipynb").is_file()
        with again.client() as api:
            assert api.get(f"/v1/sessions/{sid}").json()["error"]["type"] == "session_purged"
            assert api.get(f"/v1/sessions/{other}/notebook").status_code == 200
    finally:
        again.thread.stop()


@pytest.mark.parametrize("days", [-1, float("inf")])
def test_a_retention_must_be_a_finite_number_of_days(tmp_path: Path, days: float) -> None:
    from pydantic import ValidationError

    from interpreter.settings import Settings

    with pytest.raises(ValidationError, match="retain_closed_days"):
        Settings(data_dir=tmp_path, retain_closed_days=days)
