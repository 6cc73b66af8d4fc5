"""The store keeps a cell in flight across any number of broker restarts, and its timeout."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from interpreter.models import Execution
from interpreter.store import SessionRecord, Store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _store(path: Path) -> Store:
    store = Store(path)
    store.insert_session(
        SessionRecord(
            id="s_1",
            owner="o",
            status="busy",
            backend="docker",
            created_at=T0,
            last_activity_at=T0,
        )
    )
    return store


def test_a_cell_stays_in_flight_until_a_broker_settles_it(tmp_path: Path) -> None:
    """A broker that reattached a running cell and was killed before it ended left it
    ``unknown`` with no cell; the next start did not return it, so no broker ever wrote
    its notebook cell."""
    store = _store(tmp_path / "state.db")
    ex = Execution(id="ex_1", session_id="s_1", status="running", code="loop()", started_at=T0)
    store.save_execution(1, ex, timeout_s=20)
    for _ in range(2):  # the first restart, then a second one while it still runs
        (left,) = store.mark_unfinished()
        assert (left.execution.status, left.execution.duration_ms) == ("unknown", None)
        assert left.execution.reason == "broker_restarted"
    assert store.timeout_of("ex_1") == 20
    # Settled by a broker, with its notebook cell: no longer in flight.
    left.execution.duration_ms = 5.0
    store.save_execution(1, left.execution, notebook_sha256="n1")
    assert store.mark_unfinished() == []
    assert store.timeout_of("ex_1") == 20  # a later write without one keeps it
    store.close()


def test_an_older_database_gets_the_timeout_column(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _store(path).close()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE executions DROP COLUMN timeout_s")
    db.execute(
        "INSERT INTO executions (id, session_id, seq, status, code, created_at, data_json)"
        " VALUES ('ex_old', 's_1', 1, 'running', '1', '2026-01-01', ?)",
        (Execution(id="ex_old", session_id="s_1", status="running").model_dump_json(),),
    )
    db.commit()
    db.close()
    store = Store(path)
    assert store.timeout_of("ex_old") is None  # not recorded: the service maximum applies
    store.close()


def test_a_held_cell_an_older_broker_left_unknown_is_cancelled(tmp_path: Path) -> None:
    """Brokers up to c737bbf left a cell held for approval ``unknown`` (reason
    ``broker_shutdown``) at a shutdown that kept kernels. The next broker took it as in
    flight, waited for it and wrote it into the notebook as "the broker restarted while
    this cell ran", though it never started."""
    store = _store(tmp_path / "state.db")
    held = Execution(id="ex_h", session_id="s_1", status="unknown", code="os.remove('f')")
    held.reason = "broker_shutdown"
    store.save_execution(1, held, timeout_s=20)
    ran = Execution(id="ex_r", session_id="s_1", status="unknown", code="loop()", started_at=T0)
    ran.reason = "broker_shutdown"
    store.save_execution(2, ran, timeout_s=20)
    left = {u.execution.id: u.execution for u in store.mark_unfinished()}
    assert (left["ex_h"].status, left["ex_h"].reason) == ("cancelled", "broker_restarted")
    assert (left["ex_r"].status, left["ex_r"].reason) == ("unknown", "broker_restarted")
    # Cancelled is settled: the next start leaves it alone; the one that ran stays in flight.
    assert [u.execution.id for u in store.mark_unfinished()] == ["ex_r"]
    store.close()
