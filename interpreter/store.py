"""The durable record of sessions and executions (SQLite under the data directory).

Who ran what, when, with what outcome: the audit record next to each session's notebook.
Calls are synchronous and short; async code runs them through ``asyncio.to_thread``. One
connection guarded by a lock serves every thread.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from interpreter.models import Execution

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    status TEXT NOT NULL,
    backend TEXT NOT NULL,
    created_at TEXT NOT NULL,
    last_activity_at TEXT NOT NULL,
    execution_count INTEGER NOT NULL DEFAULT 0,
    kernel_json TEXT NOT NULL DEFAULT '{}',
    metadata_json TEXT NOT NULL DEFAULT '{}',
    limits_json TEXT NOT NULL DEFAULT '{}',
    env_json TEXT NOT NULL DEFAULT '{}',
    idle_timeout_s REAL,
    connection_json TEXT,
    provisioner_json TEXT,
    rebuild_json TEXT,
    closed_reason TEXT,
    generation INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sessions_owner ON sessions(owner);
CREATE TABLE IF NOT EXISTS executions (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    status TEXT NOT NULL,
    code TEXT NOT NULL,
    created_at TEXT NOT NULL,
    started_at TEXT,
    duration_ms REAL,
    data_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS executions_session ON executions(session_id, seq);
CREATE TABLE IF NOT EXISTS idempotency (
    owner TEXT NOT NULL,
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (owner, scope, key)
);
"""

#: Columns added after the first release, with their definitions: added to older databases.
_ADDED_COLUMNS = {"sessions": {"generation": "INTEGER NOT NULL DEFAULT 0"}}


def utcnow() -> datetime:
    return datetime.now(UTC)


class SessionRow(dict[str, Any]):
    """One row of ``sessions`` with JSON columns decoded."""


class Store:
    """SQLite-backed registry. Safe to call from any thread."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._migrate()
        path.chmod(0o600)

    def _migrate(self) -> None:
        for table, columns in _ADDED_COLUMNS.items():
            have = {row["name"] for row in self._db.execute(f"PRAGMA table_info({table})")}
            for name, definition in columns.items():
                if name not in have:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {definition}")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- sessions ------------------------------------------------------------------------

    def insert_session(self, row: dict[str, Any]) -> None:
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self._tx() as db:
            db.execute(f"INSERT INTO sessions ({cols}) VALUES ({marks})", tuple(row.values()))

    def update_session(self, session_id: str, **fields: Any) -> None:
        if not fields:
            return
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._tx() as db:
            db.execute(f"UPDATE sessions SET {sets} WHERE id = ?", (*fields.values(), session_id))

    def get_session(self, session_id: str) -> SessionRow | None:
        with self._lock:
            cur = self._db.execute("SELECT * FROM sessions WHERE id = ?", (session_id,))
            row = cur.fetchone()
        return _decode(row) if row else None

    def list_sessions(self, owner: str | None = None) -> list[SessionRow]:
        with self._lock:
            if owner is None:
                cur = self._db.execute("SELECT * FROM sessions ORDER BY created_at")
            else:
                cur = self._db.execute(
                    "SELECT * FROM sessions WHERE owner = ? ORDER BY created_at", (owner,)
                )
            rows = cur.fetchall()
        return [_decode(r) for r in rows]

    # -- executions ----------------------------------------------------------------------

    def save_execution(self, seq: int, execution: Execution) -> None:
        data = execution.model_dump_json()
        started = execution.started_at.isoformat() if execution.started_at else None
        with self._tx() as db:
            db.execute(
                "INSERT INTO executions (id, session_id, seq, status, code, created_at,"
                " started_at, duration_ms, data_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(id) DO UPDATE SET status = excluded.status,"
                " started_at = excluded.started_at, duration_ms = excluded.duration_ms,"
                " data_json = excluded.data_json",
                (
                    execution.id,
                    execution.session_id,
                    seq,
                    execution.status,
                    execution.code,
                    utcnow().isoformat(),
                    started,
                    execution.duration_ms,
                    data,
                ),
            )

    def get_execution(self, session_id: str, execution_id: str) -> Execution | None:
        with self._lock:
            cur = self._db.execute(
                "SELECT data_json FROM executions WHERE id = ? AND session_id = ?",
                (execution_id, session_id),
            )
            row = cur.fetchone()
        return Execution.model_validate_json(row[0]) if row else None

    def next_seq(self, session_id: str) -> int:
        with self._lock:
            cur = self._db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM executions WHERE session_id = ?",
                (session_id,),
            )
            return int(cur.fetchone()[0]) + 1

    def mark_unfinished_unknown(self) -> list[tuple[str, str]]:
        """Executions left queued/running by a broker that stopped: outcome ``unknown``.

        They are never re-run (security.md R-07). Returns (session id, execution id) pairs.
        """
        with self._lock:
            rows = self._db.execute(
                "SELECT id, session_id, data_json FROM executions"
                " WHERE status IN ('queued', 'running')"
            ).fetchall()
        changed = []
        for row in rows:
            ex = Execution.model_validate_json(row["data_json"])
            ex.status = "unknown"
            ex.reason = "broker_restarted"
            with self._tx() as db:
                db.execute(
                    "UPDATE executions SET status = 'unknown', data_json = ? WHERE id = ?",
                    (ex.model_dump_json(), row["id"]),
                )
            changed.append((row["session_id"], row["id"]))
        return changed


    # -- idempotency keys ----------------------------------------------------------------

    def get_idempotent(self, owner: str, scope: str, key: str) -> tuple[str, str, str] | None:
        """The (request hash, resource id, created_at) remembered for this key, if any."""
        with self._lock:
            row = self._db.execute(
                "SELECT request_hash, resource_id, created_at FROM idempotency"
                " WHERE owner = ? AND scope = ? AND key = ?",
                (owner, scope, key),
            ).fetchone()
        return (row[0], row[1], row[2]) if row else None

    def put_idempotent(
        self, owner: str, scope: str, key: str, request_hash: str, resource_id: str
    ) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO idempotency VALUES (?, ?, ?, ?, ?, ?)",
                (owner, scope, key, request_hash, resource_id, utcnow().isoformat()),
            )

    def expire_idempotent(self, older_than: datetime) -> int:
        """Forget keys recorded before ``older_than``; returns how many."""
        with self._tx() as db:
            cur = db.execute(
                "DELETE FROM idempotency WHERE created_at < ?", (older_than.isoformat(),)
            )
            return cur.rowcount


def _decode(row: sqlite3.Row) -> SessionRow:
    out = SessionRow(dict(row))
    for col in (
        "kernel_json",
        "metadata_json",
        "limits_json",
        "env_json",
        "connection_json",
        "provisioner_json",
        "rebuild_json",
    ):
        raw = out.pop(col)
        out[col.removesuffix("_json")] = json.loads(raw) if raw else None
    return out
