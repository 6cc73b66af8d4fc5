"""A held execution is recorded like a queued one: a broker that stops leaves it cancelled
(it never reached the kernel)."""

from __future__ import annotations

from pathlib import Path


def test_a_held_execution_left_by_a_stopped_broker_becomes_cancelled(tmp_path: Path) -> None:
    from interpreter.models import Execution
    from interpreter.store import SessionRecord, Store, utcnow

    store = Store(tmp_path / "state.db")
    try:
        now = utcnow()
        store.insert_session(SessionRecord("s1", "o", "idle", "local", now, now))
        for n, status in enumerate(("pending_approval", "denied", "ok"), start=1):
            store.save_execution(n, Execution(id=f"ex{n}", session_id="s1", status=status))  # type: ignore[arg-type]
        assert [(u.session_id, u.execution.id) for u in store.mark_unfinished()] == [("s1", "ex1")]
        held = store.get_execution("s1", "ex1")
        assert held is not None and (held.status, held.reason) == ("cancelled", "broker_restarted")
        denied = store.get_execution("s1", "ex2")
        assert denied is not None and denied.status == "denied"
    finally:
        store.close()
