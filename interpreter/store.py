"""The durable record of sessions and executions (SQLite under the data directory).

Who ran what, when, with what outcome: the audit record next to each session's notebook.
Calls are synchronous and short. Reads run through ``asyncio.to_thread``; writes go through
one :class:`Writer`, a single thread that keeps them in the order they were issued. One
connection guarded by a lock serves every thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from interpreter import audit
from interpreter.errors import ShuttingDown
from interpreter.models import Execution, KernelInfo, RebuildReport, Session, SessionStatus

#: Sessions whose last execution number the store keeps in memory (see ``next_seq``).
SEQ_CACHE_SESSIONS = 4096

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
CREATE TABLE IF NOT EXISTS audit_links (
    session_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    execution_id TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    content_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, idx)
);
CREATE INDEX IF NOT EXISTS audit_links_execution ON audit_links(session_id, execution_id, idx);
CREATE TABLE IF NOT EXISTS audit_notes (
    session_id TEXT NOT NULL,
    n INTEGER NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    content_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, n)
);
CREATE TABLE IF NOT EXISTS idempotency (
    owner TEXT NOT NULL,
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (owner, scope, key)
);
CREATE TABLE IF NOT EXISTS purged_sessions (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    closed_at TEXT NOT NULL,
    purged_at TEXT NOT NULL
);
"""

#: Columns added after the first release, with their definitions: added to older databases.
#: Executions written before the audit chain existed keep NULL hashes: "not chained".
_ADDED_COLUMNS = {
    "sessions": {
        "generation": "INTEGER NOT NULL DEFAULT 0",
        # When it was closed; NULL for one closed before the column (its last activity
        # stands in for it) or not closed.
        "closed_at": "TEXT",
        # The generation whose kernel started empty after a loss (a death, a kernel gone
        # at a broker restart): its first cell reports state_lost (:meth:`state_lost_pending`).
        "lost_generation": "INTEGER",
        # The last link of the session's chain, "<idx>:<hash>", written with it: a chain
        # whose last links were removed no longer ends there (audit_verify).
        "audit_head": "TEXT",
        # The last note of the session's notes chain, "<n>:<hash>" ("0:<genesis>" before
        # the first): NULL for a session created before notes were chained (not covered).
        "notes_head": "TEXT",
    },
    "executions": {
        "prev_hash": "TEXT",
        "hash": "TEXT",
        "notebook_sha256": "TEXT",
        # The execution's timeout_s: a restarted broker bounds a cell it reattaches by it.
        "timeout_s": "REAL",
        # The order of its notebook cell's outputs (``restore_cells.layout_of``).
        "cell_layout": "TEXT",
        # Its notebook cell's extra metadata (a rebuild's or recovery's re-run says so).
        "cell_meta": "TEXT",
    },
}


log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Activity:
    """A session's activity as the sessions table keeps it (see :meth:`Store.save_activity`)."""

    status: SessionStatus
    execution_count: int
    last_activity_at: datetime


@dataclass(frozen=True)
class Purged:
    """The tombstone of a closed session the retention removed."""

    owner: str
    closed_at: datetime
    purged_at: datetime


@dataclass
class Unfinished:
    """An execution a stopped broker left queued or running, as now recorded."""

    session_id: str
    seq: int
    execution: Execution


def in_flight(execution: Execution) -> bool:
    """Whether ``execution`` reached a kernel that may still run it, and no broker has
    settled it yet (``unknown`` without a duration: :meth:`Store.mark_unfinished`)."""
    return execution.status == "unknown" and execution.duration_ms is None


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class SessionRecord:
    """One session as stored: what a broker needs to show it, and to rebuild its live
    object after a restart (the kernel's connection and provisioner info).

    Attributes:
        limits: the limits the kernel runs under (``memory_mb``, ``cpus``, ``pids``).
        env: the extra kernel environment the client asked for.
        connection: the kernel's connection info (ports or ipc paths, key), once started.
        provisioner: what the backend needs to find the kernel again.
        rebuild: the report of the replay that rebuilt it, if it was rebuilt.
        rebuild_running: ``rebuild`` is the report a rebuild under way keeps on record
            as it re-runs cells, saying where it stops if its broker is killed; the next
            broker completes it (:func:`interpreter.rebuild.cut_by_restart`).
        generation: kernel incarnation (docs/security.md R-08): +1 at every (re)start.
    """

    id: str
    owner: str
    status: SessionStatus
    backend: str
    created_at: datetime
    last_activity_at: datetime
    execution_count: int = 0
    kernel: KernelInfo = field(default_factory=KernelInfo)
    metadata: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    idle_timeout_s: float | None = None
    connection: dict[str, Any] | None = None
    provisioner: dict[str, Any] | None = None
    rebuild: RebuildReport | None = None
    closed_reason: str | None = None
    generation: int = 0
    closed_at: datetime | None = None
    rebuild_running: bool = False

    def to_model(self) -> Session:
        """The API form of the stored record (a session no broker runs shows as stored)."""
        return Session(
            id=self.id,
            status=self.status,
            backend=self.backend,
            created_at=self.created_at,
            last_activity_at=self.last_activity_at,
            execution_count=self.execution_count,
            kernel=self.kernel,
            metadata=self.metadata,
            idle_timeout_s=self.idle_timeout_s,
            limits=self.limits,
            rebuild=self.rebuild,
            generation=self.generation,
            closed_reason=self.closed_reason,
            closed_at=self.closed_at,
        )


#: Longest the startup check of the database's pages may take before it is skipped.
CHECK_BUDGET_S = 10.0


def _check_pages(db: sqlite3.Connection) -> None:
    """Raise ``sqlite3.DatabaseError`` if the database's pages are damaged (``PRAGMA
    quick_check``): a damaged page let the broker start and answer every creation with
    a 500 while it called itself healthy. A database too large to check within
    :data:`CHECK_BUDGET_S` is not checked."""
    deadline = time.monotonic() + CHECK_BUDGET_S
    db.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    try:
        problems = [row[0] for row in db.execute("PRAGMA quick_check(3)")]
    except sqlite3.OperationalError as exc:
        if "interrupted" not in str(exc):
            raise
        log.info("state.db not checked at startup: larger than %g s of checking", CHECK_BUDGET_S)
        return
    finally:
        db.set_progress_handler(None, 0)
    if problems != ["ok"]:
        said = "; ".join(" ".join(str(p).split()) for p in problems)  # on one line
        raise sqlite3.DatabaseError(f"damaged pages: {said[:300]}")


def open_sessions_on(db_path: Path, backend: str) -> int:
    """How many sessions of ``backend`` the database at ``db_path`` holds open, read
    without changing anything (0 when there is no database, or it cannot be read: opening
    it for the broker says why)."""
    if not db_path.is_file():
        return 0
    try:
        conn = sqlite3.connect(db_path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            row = conn.execute(
                "SELECT count(*) FROM sessions WHERE backend = ? AND status != 'closed'",
                (backend,),
            ).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return 0
    return int(row[0])


class Store:
    """SQLite-backed registry. Safe to call from any thread."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # Owner only, before SQLite opens it: SQLite gives its -wal and -shm files the
        # database's mode, and they hold what it does (code, outputs, env, kernel keys).
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        for made in (path, *(path.with_name(path.name + end) for end in ("-wal", "-shm"))):
            with contextlib.suppress(FileNotFoundError):
                made.chmod(0o600)
        self._lock = threading.Lock()
        #: The last sequence number handed out per session, most recently used last.
        self._last_seq: OrderedDict[str, int] = OrderedDict()
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._closed = False
        self._db.row_factory = sqlite3.Row
        _check_pages(self._db)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._migrate()

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
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error:
                # A COMMIT that failed (disk full) may leave the transaction open; the
                # next BEGIN would then fail for ever, even after space is freed.
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    @property
    def _db(self) -> sqlite3.Connection:
        """The connection; once closed (the broker is shutting down), every use answers 503
        ``shutting_down`` instead of sqlite's error for a closed database (a 500)."""
        if self._closed:
            raise ShuttingDown("The service is shutting down; retry shortly.", retry_after=5)
        return self._conn

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._conn.close()

    # -- sessions ------------------------------------------------------------------------

    def insert_session(self, record: SessionRecord) -> None:
        values = (
            record.id,
            record.owner,
            record.status,
            record.backend,
            record.created_at.isoformat(),
            record.last_activity_at.isoformat(),
            record.execution_count,
            record.kernel.model_dump_json(),
            json.dumps(record.metadata),
            json.dumps(record.limits),
            json.dumps(record.env),
            record.idle_timeout_s,
            record.generation,
            audit.notes_empty_head(record.id),
        )
        with self._tx() as db:
            db.execute(
                "INSERT INTO sessions (id, owner, status, backend, created_at,"
                " last_activity_at, execution_count, kernel_json, metadata_json, limits_json,"
                " env_json, idle_timeout_s, generation, notes_head)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                values,
            )

    def set_status(self, session_id: str, status: SessionStatus) -> None:
        self._update(session_id, "status = ?", status)

    def close_session(
        self, session_id: str, reason: str, *, last_activity_at: datetime | None = None
    ) -> None:
        """Mark the session closed, saying why (``deleted``, ``idle_timeout``, ...)."""
        closed_at = utcnow().isoformat()
        if last_activity_at is None:
            self._update(
                session_id,
                "status = ?, closed_reason = ?, closed_at = ?",
                "closed",
                reason,
                closed_at,
            )
            return
        self._update(
            session_id,
            "status = ?, closed_reason = ?, closed_at = ?, last_activity_at = ?",
            "closed",
            reason,
            closed_at,
            last_activity_at.isoformat(),
        )

    def save_kernel(
        self,
        session_id: str,
        *,
        status: SessionStatus,
        kernel: KernelInfo,
        connection: dict[str, Any],
        provisioner: dict[str, Any],
        generation: int,
        state_lost: bool = False,
    ) -> None:
        """Record a (re)started kernel: what it is and how to find it again, and whether
        it started empty after a loss (``state_lost``: its first cell is told)."""
        self._update(
            session_id,
            "status = ?, kernel_json = ?, connection_json = ?, provisioner_json = ?,"
            " generation = ?, lost_generation = CASE WHEN ? THEN ? ELSE lost_generation END",
            status,
            kernel.model_dump_json(),
            json.dumps(connection),
            json.dumps(provisioner, default=str),
            generation,
            state_lost,
            generation,
        )

    def state_lost_pending(self, session_id: str) -> bool:
        """Whether the session's kernel started empty after a loss and no cell has run on
        it yet: its next cell reports ``state_lost``, also after a broker restart."""
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM sessions s WHERE id = ? AND lost_generation = generation"
                " AND NOT EXISTS (SELECT 1 FROM executions e WHERE e.session_id = s.id"
                " AND json_extract(e.data_json, '$.generation') = s.generation"
                " AND json_extract(e.data_json, '$.started_at') IS NOT NULL)",
                (session_id,),
            ).fetchone()
        return row is not None

    def save_activity(self, session_id: str, activity: Activity) -> None:
        with self._tx() as db:
            _save_activity(db, session_id, activity)

    def save_rebuild(
        self, session_id: str, report: RebuildReport | None, *, running: bool = False
    ) -> None:
        """Store ``report`` as the session's rebuild report (None: none). With ``running``,
        it is the report a rebuild under way would end with if its broker were killed now
        (:attr:`SessionRecord.rebuild_running`)."""
        if report is None:
            self._update(session_id, "rebuild_json = NULL")
            return
        data = report.model_dump(mode="json")
        if running:
            data["running"] = True
        self._update(session_id, "rebuild_json = ?", json.dumps(data))

    def _update(self, session_id: str, assignments: str, *values: Any) -> None:
        with self._tx() as db:
            db.execute(f"UPDATE sessions SET {assignments} WHERE id = ?", (*values, session_id))

    def get_session(self, session_id: str) -> SessionRecord | None:
        with self._lock:
            cur = self._db.execute("SELECT * FROM sessions WHERE id = ?", (session_id,))
            row = cur.fetchone()
        return _decode(row) if row else None

    def list_sessions(
        self,
        owner: str | None = None,
        *,
        state: Literal["open", "closed", "all"] = "all",
        after: str | None = None,
        limit: int | None = None,
    ) -> list[SessionRecord]:
        """Sessions (of ``owner``, if given) in the order they were created: those not
        closed (``open``), ``closed`` or ``all``; only those after the session ``after``
        in that order (none when it is not one of them); at most ``limit``."""
        sql = "SELECT * FROM sessions WHERE 1"
        args: list[Any] = []
        if owner is not None:
            sql += " AND owner = ?"
            args.append(owner)
        if state != "all":
            sql += " AND status = 'closed'" if state == "closed" else " AND status != 'closed'"
        if after is not None:
            sql += " AND (created_at, id) > (SELECT created_at, id FROM sessions WHERE id = ?)"
            args.append(after)
        sql += " ORDER BY created_at, id"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [_decode(r) for r in rows]

    def owns(self, owner: str, session_id: str) -> bool:
        """Whether ``session_id`` is a session of ``owner`` (open or closed)."""
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM sessions WHERE id = ? AND owner = ?", (session_id, owner)
            ).fetchone()
        return row is not None

    # -- retention -----------------------------------------------------------------------

    def closed_before(self, cutoff: datetime, limit: int) -> list[str]:
        """Ids of at most ``limit`` sessions closed before ``cutoff``, the oldest first (a
        session closed before ``closed_at`` was recorded counts from its last activity)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id FROM sessions WHERE status = 'closed'"
                " AND coalesce(closed_at, last_activity_at) < ?"
                " ORDER BY coalesce(closed_at, last_activity_at), id LIMIT ?",
                (cutoff.isoformat(), limit),
            ).fetchall()
        return [row[0] for row in rows]

    def purge_session(self, session_id: str) -> bool:
        """Forget a closed session: its row, executions and audit links go, and a tombstone
        (:meth:`purged`) says whose it was and when it went. False when it is not closed
        (or not there): nothing is done. Its files are the caller's to remove, after."""
        with self._tx() as db:
            row = db.execute(
                "SELECT owner, coalesce(closed_at, last_activity_at) FROM sessions"
                " WHERE id = ? AND status = 'closed'",
                (session_id,),
            ).fetchone()
            if row is None:
                return False
            db.execute(
                "INSERT OR REPLACE INTO purged_sessions VALUES (?, ?, ?, ?)",
                (session_id, row[0], row[1], utcnow().isoformat()),
            )
            db.execute("DELETE FROM audit_links WHERE session_id = ?", (session_id,))
            db.execute("DELETE FROM audit_notes WHERE session_id = ?", (session_id,))
            db.execute("DELETE FROM executions WHERE session_id = ?", (session_id,))
            db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        self._last_seq.pop(session_id, None)
        return True

    def purged(self, session_id: str) -> Purged | None:
        """The tombstone of a session removed by the retention, if it is one."""
        with self._lock:
            row = self._db.execute(
                "SELECT owner, closed_at, purged_at FROM purged_sessions WHERE id = ?",
                (session_id,),
            ).fetchone()
        if row is None:
            return None
        return Purged(row[0], datetime.fromisoformat(row[1]), datetime.fromisoformat(row[2]))

    def purged_among(self, session_ids: list[str]) -> list[str]:
        """Those of ``session_ids`` that the retention removed."""
        found: list[str] = []
        with self._lock:
            for start in range(0, len(session_ids), 500):
                chunk = session_ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                found += [
                    row[0]
                    for row in self._db.execute(
                        f"SELECT id FROM purged_sessions WHERE id IN ({marks})", chunk
                    )
                ]
        return found

    # -- executions ----------------------------------------------------------------------

    def save_execution(
        self,
        seq: int,
        execution: Execution,
        *,
        notebook_sha256: str | None = None,
        activity: Activity | None = None,
        timeout_s: float | None = None,
        cell_layout: str | None = None,
        cell_meta: str | None = None,
        data_json: str | None = None,
    ) -> None:
        """Insert or update an execution; a final one is chained (see ``audit.py``).

        ``notebook_sha256`` is the digest of its notebook cell, if it has one; ``activity``,
        if given, is its session's activity, saved in the same transaction; ``timeout_s``,
        if given, the timeout it runs under (:meth:`timeout_of`); ``cell_layout``, if
        given, the order of its notebook cell's outputs (:meth:`cell_layouts`);
        ``cell_meta``, if given, its cell's extra metadata as JSON (:meth:`cell_meta_of`).
        ``data_json``, if given, is ``execution`` as JSON already (not made again: for a
        cell with many outputs it is a large text).
        """
        data = execution.model_dump_json() if data_json is None else data_json
        started = execution.started_at.isoformat() if execution.started_at else None
        with self._tx() as db:
            # The chain's link first, so that the row takes its hashes in the same statement.
            link = _chain(db, execution, notebook_sha256)
            db.execute(
                "INSERT INTO executions (id, session_id, seq, status, code, created_at,"
                " started_at, duration_ms, data_json, notebook_sha256, prev_hash, hash,"
                " timeout_s, cell_layout, cell_meta)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(id) DO UPDATE SET status = excluded.status,"
                " started_at = excluded.started_at, duration_ms = excluded.duration_ms,"
                " data_json = excluded.data_json, notebook_sha256 = excluded.notebook_sha256,"
                " prev_hash = coalesce(excluded.prev_hash, prev_hash),"
                " hash = coalesce(excluded.hash, hash),"
                " timeout_s = coalesce(excluded.timeout_s, timeout_s),"
                " cell_layout = coalesce(excluded.cell_layout, cell_layout),"
                " cell_meta = coalesce(excluded.cell_meta, cell_meta)",
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
                    notebook_sha256,
                    *(link[:2] if link else (None, None)),
                    timeout_s,
                    cell_layout,
                    cell_meta,
                ),
            )
            head = link[2] if link else None
            if activity is not None:
                _save_activity(db, execution.session_id, activity, head)
            elif head is not None:
                _save_head(db, execution.session_id, head)

    def executions_of(self, session_id: str) -> list[Execution]:
        """Every execution recorded for ``session_id``, in order."""
        with self._lock:
            rows = self._db.execute(
                "SELECT data_json FROM executions WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
        return [Execution.model_validate_json(row[0]) for row in rows]

    def cell_digests(self, session_id: str) -> dict[str, str]:
        """The digest of each execution's notebook cell as its broker wrote it (the one its
        chain link covers), by execution id; executions without a cell are left out."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, notebook_sha256 FROM executions"
                " WHERE session_id = ? AND notebook_sha256 IS NOT NULL",
                (session_id,),
            ).fetchall()
        return {row[0]: row[1] for row in rows}

    def chained(self, session_id: str) -> set[str]:
        """The ids of the executions of ``session_id`` that have a chain link (those of a
        broker from before the chain have none)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT execution_id FROM audit_links WHERE session_id = ?",
                (session_id,),
            ).fetchall()
        return {row[0] for row in rows}

    def record_note(
        self, session_id: str, text: str, event: dict[str, Any] | None, after: str | None
    ) -> int | None:
        """Chain a note the service writes in the session's notebook (``audit.py``): its
        ``text``, ``event`` and the execution whose cell it follows (``after``). Returns
        its number, for its cell's ``metadata.interp.audit_note``; None for a session
        created before notes were chained (its notes are not covered: none is recorded)."""
        with self._tx() as db:
            row = db.execute("SELECT notes_head FROM sessions WHERE id = ?", (session_id,))
            head = row.fetchone()
            if head is None or not head[0]:
                return None
            last = db.execute(
                "SELECT n, hash FROM audit_notes WHERE session_id = ? ORDER BY n DESC LIMIT 1",
                (session_id,),
            ).fetchone()
            n = last[0] + 1 if last else 1
            prev = last[1] if last else audit.notes_genesis(session_id)
            content = audit.canonical(audit.note_content(session_id, n, text, event, after))
            digest = audit.link_hash(prev, content)
            db.execute(
                "INSERT INTO audit_notes (session_id, n, prev_hash, hash, content_json,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (session_id, n, prev, digest, content, utcnow().isoformat()),
            )
            db.execute(
                "UPDATE sessions SET notes_head = ? WHERE id = ?", (f"{n}:{digest}", session_id)
            )
        return n

    def notes_of(self, session_id: str) -> list[dict[str, Any]]:
        """The chained notes of ``session_id`` (:func:`audit.note_content`), in order."""
        with self._lock:
            rows = self._db.execute(
                "SELECT content_json FROM audit_notes WHERE session_id = ? ORDER BY n",
                (session_id,),
            ).fetchall()
        notes = []
        for row in rows:
            with contextlib.suppress(ValueError):
                content = json.loads(row[0])
                if isinstance(content, dict):
                    notes.append(content)
        return notes

    def cell_layouts(self, session_id: str) -> dict[str, str]:
        """The order of each execution's notebook outputs as its broker wrote them (see
        :func:`interpreter.restore_cells.layout_of`), by execution id; executions without
        one (no cell, or written by an older broker) are left out."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, cell_layout FROM executions"
                " WHERE session_id = ? AND cell_layout IS NOT NULL",
                (session_id,),
            ).fetchall()
        return {row[0]: row[1] for row in rows}

    def cell_meta_of(self, execution_id: str) -> dict[str, Any]:
        """The extra notebook metadata an execution's cell was to have (a rebuild's or
        recovery's re-run: ``replay_of``, ``replay_source``); empty if none was recorded."""
        with self._lock:
            row = self._db.execute(
                "SELECT cell_meta FROM executions WHERE id = ?", (execution_id,)
            ).fetchone()
        if row is None or not row[0]:
            return {}
        try:
            meta = json.loads(row[0])
        except ValueError:
            return {}
        return meta if isinstance(meta, dict) else {}

    def get_execution(self, session_id: str, execution_id: str) -> Execution | None:
        with self._lock:
            cur = self._db.execute(
                "SELECT data_json FROM executions WHERE id = ? AND session_id = ?",
                (execution_id, session_id),
            )
            row = cur.fetchone()
        return Execution.model_validate_json(row[0]) if row else None

    def timeout_of(self, execution_id: str) -> float | None:
        """The timeout an execution was submitted with; None if not recorded (a row an
        older broker wrote, or an unknown id)."""
        with self._lock:
            row = self._db.execute(
                "SELECT timeout_s FROM executions WHERE id = ?", (execution_id,)
            ).fetchone()
        return float(row[0]) if row and row[0] is not None else None

    def next_seq(self, session_id: str) -> int:
        """A new sequence number for an execution of ``session_id``: one past the last.

        Each number is handed out once (a write that then fails leaves a gap, which the
        order does not mind). The last number of the sessions used most recently is kept,
        so a running session costs no query per execution; others are read from the table.
        """
        with self._lock:
            last = self._last_seq.pop(session_id, None)
            if last is None:
                cur = self._db.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM executions WHERE session_id = ?",
                    (session_id,),
                )
                last = int(cur.fetchone()[0])
            self._last_seq[session_id] = last + 1
            if len(self._last_seq) > SEQ_CACHE_SESSIONS:
                self._last_seq.popitem(last=False)
            return last + 1

    def mark_unfinished(self) -> list[Unfinished]:
        """Executions a broker that stopped left unfinished, marked for what is known.

        A ``running`` one had reached the kernel: ``unknown`` (docs/security.md R-07), never
        re-run. A ``queued`` (or ``pending_approval``) one never reached it: ``cancelled``,
        as an ``unknown`` one that never started.
        Both with reason ``broker_restarted``.

        An ``unknown`` one is still in flight, and returned again, until a broker settles it
        with its notebook cell: one kept running by a shutdown (reason ``broker_shutdown``),
        and one that a restarted broker was still waiting for when it stopped in turn (no
        duration, no cell yet, its session open). An in-flight execution has no duration
        (:func:`in_flight`).
        """
        with self._lock:
            rows = self._db.execute(
                "SELECT id, session_id, seq, data_json, notebook_sha256 FROM executions"
                " WHERE status IN ('queued', 'pending_approval', 'running')"
                " OR (status = 'unknown'"
                " AND (json_extract(data_json, '$.reason') = 'broker_shutdown'"
                " OR (duration_ms IS NULL AND notebook_sha256 IS NULL AND session_id IN"
                " (SELECT id FROM sessions WHERE status != 'closed'))))"
                " ORDER BY session_id, seq"
            ).fetchall()
        changed = []
        for row in rows:
            ex = Execution.model_validate_json(row["data_json"])
            # Left running (or kept running by a shutdown): it reached the kernel. Brokers
            # up to c737bbf also left a cell held for approval ``unknown`` at a shutdown
            # that kept kernels; it never started, so it never reached one.
            if ex.status == "running" or (ex.status == "unknown" and ex.started_at is not None):
                ex.status, ex.duration_ms = "unknown", None
            else:
                ex.status = "cancelled"
            ex.reason = "broker_restarted"
            with self._tx() as db:
                link = _chain(db, ex, row["notebook_sha256"])
                prev, digest = link[:2] if link else (None, None)
                if link is not None:
                    _save_head(db, row["session_id"], link[2])
                db.execute(
                    "UPDATE executions SET status = ?, duration_ms = ?, data_json = ?,"
                    " prev_hash = coalesce(?, prev_hash), hash = coalesce(?, hash) WHERE id = ?",
                    (ex.status, ex.duration_ms, ex.model_dump_json(), prev, digest, row["id"]),
                )
            changed.append(Unfinished(row["session_id"], row["seq"], ex))
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


class Writer:
    """Runs store writes on one thread, in the order they are issued.

    A write may name what it saves (``key``, say an execution's id). While a write with a
    key waits in the queue, a later one with the same key joins it instead of queueing
    again: the waiting write reads the state when it runs, so it saves the later state
    too. A busy writer thus saves a cell once, not once per change (queued, running).
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")
        self._lock = threading.Lock()
        self._waiting: dict[str, Future[Any]] = {}

    async def run(self, fn: Callable[[], T], key: str | None = None) -> T:
        """Run ``fn`` after every write issued before it, and wait for its result."""
        future, _ = self._submit(fn, key)
        result: T = await asyncio.wrap_future(future)
        return result

    def later(self, fn: Callable[[], T], key: str | None = None) -> Future[T]:
        """Queue ``fn`` behind the earlier writes without waiting (failures are logged);
        returns the future of the write that saves it (one it joined, if it did)."""
        future, new = self._submit(fn, key)
        if new:
            future.add_done_callback(_log_write_failure)
        return future

    def close(self) -> None:
        """Wait for every queued write, then stop the thread."""
        self._pool.shutdown(wait=True)

    def _submit(self, fn: Callable[[], Any], key: str | None) -> tuple[Future[Any], bool]:
        """The future of ``fn``'s write, and whether it was queued now (not joined)."""
        if key is None:
            return self._pool.submit(fn), True
        with self._lock:  # held until the write is known as waiting: it cannot start first
            waiting = self._waiting.get(key)
            if waiting is not None:
                return waiting, False
            future = self._pool.submit(self._start, key, fn)
            self._waiting[key] = future
            return future, True

    def _start(self, key: str, fn: Callable[[], Any]) -> Any:
        with self._lock:
            del self._waiting[key]  # from now on, a write with this key queues anew
        return fn()


def _log_write_failure(future: Future[object]) -> None:
    exc = future.exception()
    if exc is not None:
        log.error("a store write failed: %r", exc)


def _save_activity(
    db: sqlite3.Connection, session_id: str, activity: Activity, head: str | None = None
) -> None:
    """The session's activity, and its chain's new head when a link was just appended (one
    statement: an execution's final write stays two transactions of few statements)."""
    db.execute(
        "UPDATE sessions SET status = ?, execution_count = ?, last_activity_at = ?,"
        " audit_head = coalesce(?, audit_head) WHERE id = ?",
        (
            activity.status,
            activity.execution_count,
            activity.last_activity_at.isoformat(),
            head,
            session_id,
        ),
    )


def _save_head(db: sqlite3.Connection, session_id: str, head: str) -> None:
    """The last link of the session's chain (``audit_verify`` checks the chain ends there)."""
    db.execute("UPDATE sessions SET audit_head = ? WHERE id = ?", (head, session_id))


def _chain(
    db: sqlite3.Connection, execution: Execution, notebook_sha256: str | None
) -> tuple[str, str, str] | None:
    """Append a link for a final execution whose covered content changed (``audit.py``);
    returns the link's previous and own hash for the execution's row, and the session's
    new ``audit_head`` (``<idx>:<hash>``, for the caller to write in the same
    transaction), or None if none."""
    if execution.status in audit.UNFINISHED:
        return None
    content = audit.canonical(audit.content_of(execution, notebook_sha256))
    sid = execution.session_id
    last = db.execute(
        "SELECT idx, hash FROM audit_links WHERE session_id = ? ORDER BY idx DESC LIMIT 1",
        (sid,),
    ).fetchone()
    mine = db.execute(
        "SELECT content_json FROM audit_links WHERE session_id = ? AND execution_id = ?"
        " ORDER BY idx DESC LIMIT 1",
        (sid, execution.id),
    ).fetchone()
    if mine is not None and mine[0] == content:
        return None
    idx = last[0] + 1 if last else 1
    prev = last[1] if last else audit.genesis(sid)
    digest = audit.link_hash(prev, content)
    db.execute(
        "INSERT INTO audit_links (session_id, idx, execution_id, prev_hash, hash,"
        " content_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (sid, idx, execution.id, prev, digest, content, utcnow().isoformat()),
    )
    return prev, digest, f"{idx}:{digest}"


def _decode(row: sqlite3.Row) -> SessionRecord:
    def load(column: str) -> Any:
        raw = row[column]
        return json.loads(raw) if raw else None

    rebuild = load("rebuild_json")
    running = bool(rebuild.pop("running", False)) if isinstance(rebuild, dict) else False
    return SessionRecord(
        id=row["id"],
        owner=row["owner"],
        status=row["status"],
        backend=row["backend"],
        created_at=datetime.fromisoformat(row["created_at"]),
        last_activity_at=datetime.fromisoformat(row["last_activity_at"]),
        execution_count=row["execution_count"],
        kernel=KernelInfo(**(load("kernel_json") or {})),
        metadata=load("metadata_json") or {},
        limits=load("limits_json") or {},
        env=load("env_json") or {},
        idle_timeout_s=row["idle_timeout_s"],
        connection=load("connection_json"),
        provisioner=load("provisioner_json"),
        rebuild=RebuildReport(**rebuild) if rebuild else None,
        closed_reason=row["closed_reason"],
        generation=row["generation"] or 0,
        closed_at=datetime.fromisoformat(row["closed_at"]) if row["closed_at"] else None,
        rebuild_running=running,
    )
