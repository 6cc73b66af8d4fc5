"""Execution numbers: one past the session's last, each handed out once, and no query per
execution for a session in use (the broker's per-execution cost must not include one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from interpreter import store as store_module
from interpreter.models import Execution
from interpreter.store import Store


def _run(store: Store, session_id: str, n: int) -> int:
    seq = store.next_seq(session_id)
    store.save_execution(
        seq, Execution(id=f"ex_{session_id}_{n}", session_id=session_id, status="ok", code="1")
    )
    return seq


def _max_queries(store: Store) -> list[str]:
    seen: list[str] = []
    store._db.set_trace_callback(lambda sql: seen.append(sql) if "MAX(seq)" in sql else None)
    return seen


def test_numbers_follow_each_session_and_survive_a_new_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    assert [_run(store, "s_a", i) for i in range(3)] == [1, 2, 3]
    assert _run(store, "s_b", 0) == 1
    assert _run(store, "s_a", 3) == 4
    store.close()
    again = Store(tmp_path / "state.db")  # a restarted broker goes on from the table
    assert _run(again, "s_a", 4) == 5
    assert _run(again, "s_b", 1) == 2
    again.close()


def test_a_number_is_never_handed_out_twice(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    first = store.next_seq("s_a")
    assert store.next_seq("s_a") == first + 1  # even before the first was written
    store.close()


def test_a_session_in_use_costs_no_query(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    queries = _max_queries(store)
    for i in range(50):
        _run(store, "s_a", i)
    assert len(queries) == 1  # the first number only
    store.close()


def test_the_kept_numbers_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "SEQ_CACHE_SESSIONS", 2)
    store = Store(tmp_path / "state.db")
    queries = _max_queries(store)
    for sid in ("s_a", "s_b", "s_c"):
        _run(store, sid, 0)
    assert len(store._last_seq) == 2
    assert _run(store, "s_a", 1) == 2  # forgotten, read back from the table
    assert len(queries) == 4
    store.close()
