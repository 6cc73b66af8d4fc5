"""The store's side of the retention: which closed sessions are due, and their removal."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from interpreter.store import SessionRecord, Store, utcnow


def record(sid: str) -> SessionRecord:
    now = utcnow()
    return SessionRecord(
        id=sid, owner="o", status="idle", backend="local", created_at=now, last_activity_at=now
    )


def test_the_store_picks_sessions_by_when_they_closed(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    now = utcnow()
    for sid in ("s_open", "s_recent", "s_old", "s_before_column"):
        store.insert_session(record(sid))
    for sid in ("s_recent", "s_old", "s_before_column"):
        store.close_session(sid, "deleted")
    with store._tx() as db:  # closed ten days ago; one before closed_at was recorded
        ago = (now - timedelta(days=10)).isoformat()
        db.execute("UPDATE sessions SET closed_at = ? WHERE id = 's_old'", (ago,))
        db.execute(
            "UPDATE sessions SET closed_at = NULL, last_activity_at = ? WHERE id = ?",
            ((now - timedelta(days=20)).isoformat(), "s_before_column"),
        )
    due = store.closed_before(now - timedelta(days=5), 10)
    assert due == ["s_before_column", "s_old"]  # the oldest first; never an open one
    assert store.closed_before(now - timedelta(days=5), 1) == ["s_before_column"]
    assert not store.purge_session("s_open")  # open: refused, nothing changed
    assert store.get_session("s_open") is not None and store.purged("s_open") is None
    assert store.purge_session("s_old")
    tomb = store.purged("s_old")
    assert tomb is not None and tomb.owner == "o"
    assert tomb.closed_at.isoformat() == ago
    assert store.get_session("s_old") is None and store.executions_of("s_old") == []
    assert store.purged_among(["s_old", "s_recent", "s_x"]) == ["s_old"]
    store.close()
