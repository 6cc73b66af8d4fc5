"""``interp audit verify``: check a data directory against its audit chains.

For each session (or the one asked for), in this order:

1. its chain in ``state.db``: links numbered 1, 2, ... without a gap, each ``prev_hash``
   the hash of the link before (the first one :func:`~interpreter.audit.genesis`), each
   hash the hash of its own content;
2. its execution records: each final record's content (recomputed from the row) equals
   its latest link's, and the row's ``hash``/``prev_hash`` are that link's; a link whose
   record is gone is reported;
3. its notebook: each cell of a chained execution has the digest the chain recorded, and
   its source (as written: a recovery's re-runs commented out) and outputs still give
   that digest; a chained cell missing is reported;
4. its artifacts: each file the chain names exists and its SHA-256 is its name;
5. its notes (the markdown cells the service writes: a restart, a recovery, ...) against
   their own chain (``audit_notes``): each note's cell is there, with the text, event and
   place (the cell it follows) recorded, in order, and every markdown cell is one of them.
   A session created by a broker from before the notes chain (no ``notes_head``) has its
   notes counted as *not covered*, not broken.

A chained cell's metadata is compared with its link too: status, reason, start time,
duration, ``state_lost``, ``execution_count`` and the policy decision.

A problem names the session, the link or execution and what differs. Records written
before the chain existed (no hash) are counted as *not chained*, not as broken; so are
notebook cells without a digest. Cells got their digest in the same release as the chain,
so a cell that carries one while its execution has no link is broken: stripping the
hashes from state.db does not turn a chained session into a "not chained" one.

Reads only: the database is opened read-only, and a running broker may keep writing
meanwhile (a live session's file lags its newest cells by up to ``SAVE_MAX_LAG_S``, which
then show as missing from the notebook; check closed sessions, or run again once the
session has been idle that long).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from interpreter import audit
from interpreter.audit import policy_covered
from interpreter.models import Execution, PolicyResult
from interpreter.notebook import NOTE_KEY
from interpreter.notebook_repair import original_outputs
from interpreter.notes import RERUN_HEADER, commented_rerun


@dataclass(frozen=True)
class Problem:
    """One broken link: where, which execution, and what differs."""

    session_id: str
    where: str  # chain, record, notebook, note or artifact
    message: str
    execution_id: str | None = None
    #: The chain link it concerns (problems are listed by link: the first is the first
    #: broken link); None when it concerns no one link.
    link: int | None = None

    def __str__(self) -> str:
        at = f" link {self.link}" if self.link is not None else ""
        at += f" execution {self.execution_id}" if self.execution_id else ""
        return f"session {self.session_id}{at}: {self.where}: {self.message}"


@dataclass
class SessionAudit:
    """What was checked in one session, and what was found."""

    session_id: str
    links: int = 0
    records: int = 0
    not_chained: int = 0
    cells: int = 0
    cells_not_chained: int = 0
    notes: int = 0
    notes_not_covered: int = 0
    artifacts: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class AuditReport:
    sessions: list[SessionAudit] = field(default_factory=list)
    error: str | None = None
    #: Closed sessions the retention removed (``retain_closed_days``): nothing of them is
    #: left to check.
    purged: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None and all(s.ok for s in self.sessions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "error": self.error,
            "purged": self.purged,
            "sessions": [
                {
                    "session_id": s.session_id,
                    "ok": s.ok,
                    "links": s.links,
                    "records": s.records,
                    "not_chained": s.not_chained,
                    "cells": s.cells,
                    "cells_not_chained": s.cells_not_chained,
                    "notes": s.notes,
                    "notes_not_covered": s.notes_not_covered,
                    "artifacts": s.artifacts,
                    "problems": [
                        {
                            "where": p.where,
                            "link": p.link,
                            "execution_id": p.execution_id,
                            "message": p.message,
                        }
                        for p in s.problems
                    ],
                }
                for s in self.sessions
            ],
        }


@dataclass(frozen=True)
class _Link:
    idx: int
    execution_id: str
    prev_hash: str
    hash: str
    content: dict[str, Any]
    #: The index of the execution's first link: when it was first final, which is when
    #: its cell joined the notebook (later links are late output, a decision changed).
    first: int


def verify(data_dir: Path, session_id: str | None = None) -> AuditReport:
    """Check ``data_dir`` (``state.db`` and ``sessions/``); see the module docstring."""
    db_path = data_dir / "state.db"
    if not db_path.is_file():
        return AuditReport(error=f"no state.db in {data_dir}")
    db = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        # A damaged page may hold no chain (the idempotency cache, an index): the chains
        # alone then read as whole while the broker refuses the file. Said first.
        damage = [row[0] for row in db.execute("PRAGMA quick_check(5)")]
        if damage != ["ok"]:
            return AuditReport(
                error=f"{db_path} is damaged ({'; '.join(damage)}): the service cannot open "
                "it; restore it from a backup"
            )
        purged = _has_table(db, "purged_sessions")
        if session_id is None:
            ids = [r[0] for r in db.execute("SELECT id FROM sessions ORDER BY created_at")]
        elif db.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone():
            ids = [session_id]
        else:
            gone = (
                purged
                and db.execute(
                    "SELECT closed_at, purged_at FROM purged_sessions WHERE id = ?", (session_id,)
                ).fetchone()
            )
            if gone:
                return AuditReport(
                    error=f"session {session_id!r} closed at {gone[0]} and was removed at "
                    f"{gone[1]} by the retention of closed sessions: nothing of it is left "
                    "to check"
                )
            return AuditReport(error=f"no session {session_id!r} in {db_path}")
        chained = _has_table(db, "audit_links")
        report = AuditReport()
        if purged and session_id is None:
            report.purged = db.execute("SELECT count(*) FROM purged_sessions").fetchone()[0]
        for sid in ids:
            # One read transaction per session: its chain, its head and its records are
            # read as of one moment, whatever a running broker writes meanwhile.
            db.execute("BEGIN")
            try:
                session_dir = data_dir / "sessions" / sid
                report.sessions.append(_verify_session(db, session_dir, sid, chained))
            finally:
                db.execute("ROLLBACK")
        return report
    except sqlite3.DatabaseError as exc:
        return AuditReport(error=f"cannot read {db_path}: {exc}")
    finally:
        db.close()


def _has_table(db: sqlite3.Connection, name: str) -> bool:
    row = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
    return row.fetchone() is not None


def _verify_session(
    db: sqlite3.Connection, session_dir: Path, sid: str, chained: bool
) -> SessionAudit:
    result = SessionAudit(sid)
    latest = _check_links(db, sid, result) if chained else {}
    order = _check_records(db, sid, latest, result)
    cells = _check_notebook(session_dir / "notebook.ipynb", sid, latest, result, order)
    _check_notes(db, sid, cells, result)
    _check_artifacts(session_dir / "artifacts", sid, latest, result)
    # By link, earliest first (stable: for one link, chain, record, notebook, artifact).
    result.problems.sort(key=lambda p: p.link if p.link is not None else 1 << 62)
    return result


def _check_links(db: sqlite3.Connection, sid: str, result: SessionAudit) -> dict[str, _Link]:
    """Walk the chain; returns each execution's latest link (the intact ones)."""
    latest: dict[str, _Link] = {}
    expected_prev = audit.genesis(sid)
    rows = db.execute(
        "SELECT idx, execution_id, prev_hash, hash, content_json FROM audit_links"
        " WHERE session_id = ? ORDER BY idx",
        (sid,),
    ).fetchall()
    for position, row in enumerate(rows, start=1):
        result.links += 1
        eid = row["execution_id"]

        def broken(message: str, eid: str = eid, idx: int = row["idx"]) -> None:
            result.problems.append(Problem(sid, "chain", message, eid, idx))

        if row["idx"] != position:
            broken(f"the link before it is missing (expected link {position} here)")
        if row["prev_hash"] != expected_prev:
            broken("its prev_hash is not the hash of the link before it")
        if audit.link_hash(row["prev_hash"], row["content_json"]) != row["hash"]:
            broken("its hash does not match its content (the link was edited)")
        try:
            content = json.loads(row["content_json"])
        except (TypeError, ValueError):
            content = None
        if not isinstance(content, dict):
            broken("its content is not a JSON object")
            content = {}
        if content.get("id") != eid or content.get("session_id") != sid:
            broken("its content belongs to another execution or session")
        expected_prev = row["hash"]
        first = latest[eid].first if eid in latest else row["idx"]
        latest[eid] = _Link(row["idx"], eid, row["prev_hash"], row["hash"], content, first)
    _check_head(db, sid, rows, result)
    return latest


def _check_head(
    db: sqlite3.Connection, sid: str, rows: list[sqlite3.Row], result: SessionAudit
) -> None:
    """The chain ends at the link the session's row names (``audit_head``, written with
    each link): the last links removed, with their records and cells, left a shorter chain
    that was whole in itself. Rows of brokers before the column name none."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(sessions)")}
    if "audit_head" not in columns:
        return
    row = db.execute("SELECT audit_head FROM sessions WHERE id = ?", (sid,)).fetchone()
    head = row[0] if row is not None else None
    if not isinstance(head, str):
        return
    idx_text, _, digest = head.partition(":")
    last = rows[-1] if rows else None
    if last is not None and str(last["idx"]) == idx_text and last["hash"] == digest:
        return
    ends = f"link {last['idx']}" if last is not None else "no link"
    eid = last["execution_id"] if last is not None else None
    where = last["idx"] if last is not None else None
    message = (
        f"the chain ends at {ends}, but the session's record says it reached link "
        f"{idx_text}: its last links were removed"
        if idx_text.isdigit() and (last is None or int(idx_text) > last["idx"])
        else f"the chain's last link is not the one the session's record names (link {idx_text})"
    )
    result.problems.append(Problem(sid, "chain", message, eid, where))


def _check_records(
    db: sqlite3.Connection, sid: str, latest: dict[str, _Link], result: SessionAudit
) -> dict[str, int]:
    """Check each execution's record against its chain link; returns the place of every
    execution in the order the session ran them, by id.

    The order is that of each execution's first chain link, written as it ended, with its
    notebook cell. Not ``seq``, the order of submission: a recovery's re-runs are submitted
    after the cells already waiting and run before them. Only a session chained by no link
    (a broker from before the chain) is ordered by ``seq``.
    """
    columns = {r["name"] for r in db.execute("PRAGMA table_info(executions)")}
    has_hash = {"hash", "prev_hash", "notebook_sha256"} <= columns
    extra = ", hash, prev_hash, notebook_sha256" if has_hash else ""
    rows = db.execute(
        f"SELECT id, status, code, data_json{extra} FROM executions"
        " WHERE session_id = ? ORDER BY seq",
        (sid,),
    ).fetchall()
    seen = set()
    order: dict[str, int] = {}
    for row in rows:
        eid = row["id"]
        seen.add(eid)
        if not latest:
            order[eid] = len(order)
        result.records += 1
        link = latest.get(eid)
        if link is None:
            if row["status"] not in audit.UNFINISHED:
                result.not_chained += 1
            continue

        def broken(message: str, eid: str = eid, idx: int = link.idx) -> None:
            result.problems.append(Problem(sid, "record", message, eid, idx))

        try:
            ex = Execution.model_validate_json(row["data_json"])
        except ValidationError:
            broken("the record does not parse")
            continue
        actual = audit.content_of(ex, row["notebook_sha256"] if has_hash else None)
        diff = audit.differences(link.content, actual)
        if "outputs_sha256" in diff and link.content.get(
            "outputs_sha256"
        ) == audit.older_outputs_sha256(ex):
            diff.remove("outputs_sha256")  # chained by a broker from before a field
        if audit.sha256_text(row["code"]) != link.content.get("code_sha256"):
            diff.append("code (column)")
        if row["status"] != link.content.get("status") and "status" not in diff:
            diff.append("status (column)")
        if diff:
            shown = ", ".join(_show(f, link.content, actual) for f in diff)
            broken(f"differs from chain link {link.idx}: {shown}")
        elif has_hash and (row["hash"], row["prev_hash"]) != (link.hash, link.prev_hash):
            broken("its hash/prev_hash are not those of its chain link")
    for eid, link in latest.items():
        order[eid] = link.first
        if eid not in seen:
            result.problems.append(Problem(sid, "record", "the record is gone", eid, link.idx))
    return order


def _show(name: str, chained: dict[str, Any], actual: dict[str, Any]) -> str:
    """One differing field, with both values when they are short facts, not digests."""
    if name.endswith("sha256") or name == "artifacts" or "(" in name:
        return name
    return f"{name} (chain: {chained.get(name)!r}, record: {actual.get(name)!r})"


def _check_notebook(
    path: Path,
    sid: str,
    latest: dict[str, _Link],
    result: SessionAudit,
    order: dict[str, int] | None = None,
) -> list[Any] | None:
    """Check the notebook's cells against the chain: each chained cell's digest (source
    and outputs), its metadata as the chain has it, their order as they ran (``order``),
    and that every code cell is one the service wrote. Returns the cells (None: no
    readable notebook)."""
    expected = {eid: k for eid, k in latest.items() if k.content.get("notebook_sha256")}
    if not path.is_file():
        if expected:
            first = min(expected.values(), key=lambda k: k.idx)
            result.problems.append(
                Problem(sid, "notebook", f"{path.name} is missing", first.execution_id, first.idx)
            )
        return None
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        cells = nb["cells"]
        if not isinstance(cells, list):
            raise TypeError("its cells are not a list")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        result.problems.append(Problem(sid, "notebook", f"cannot read {path.name}: {exc}"))
        return None
    found = set()
    last: tuple[int, int] | None = None  # the place and index of the last cell seen
    for index, cell in enumerate(cells):
        meta = _interp_meta(cell)
        eid = meta.get("execution_id")
        if not eid:
            if isinstance(cell, dict) and cell.get("cell_type") == "code":
                # The service writes each code cell with its execution: this one was added.
                message = f"cell {index}: a code cell with no execution id (not written here)"
                result.problems.append(Problem(sid, "notebook", message))
            continue
        result.cells += 1
        place = order.get(eid) if order is not None and isinstance(eid, str) else None
        if place is not None:
            if last is not None and place < last[0]:
                message = f"cell {index}: it ran before cell {last[1]}, which comes first here"
                result.problems.append(Problem(sid, "notebook", message, eid))
            last = (place, index)
        recorded = meta.get("audit_sha256")
        link = latest.get(eid)
        if recorded is not None and link is None:
            # Cells got digests with the chain (one release): a cell with one whose
            # execution has no link lost it, with its record's hashes (stripped to pass).
            result.problems.append(
                Problem(
                    sid,
                    "notebook",
                    f"cell {index}: it carries an audit digest but its execution has no "
                    "chain link (the link or the record's hashes were removed)",
                    eid,
                )
            )
            continue
        if recorded is None or link is None:
            result.cells_not_chained += 1
            continue
        found.add(eid)
        for what in _meta_differences(meta, link.content, cell):
            message = f"cell {index}: its {what} differs from its chain link's"
            result.problems.append(Problem(sid, "notebook", message, eid, link.idx))
        # A repaired cell's digest covers the outputs it was recorded with (kept aside).
        outputs = original_outputs(cell)
        digest = audit.cell_digest(cell.get("source", ""), outputs)
        if digest != recorded:
            message = f"cell {index}: its source or outputs differ from its recorded digest"
            if _digest_of_uncommented(cell, outputs) == recorded:
                message += (
                    " (a recovery's re-run, recorded by an older broker with the digest of"
                    " its code before it was commented out: its source cannot be checked)"
                )
            result.problems.append(Problem(sid, "notebook", message, eid, link.idx))
        elif recorded != link.content.get("notebook_sha256"):
            result.problems.append(
                Problem(
                    sid,
                    "notebook",
                    f"cell {index}: its digest is not the one its chain link recorded",
                    eid,
                    link.idx,
                )
            )
    for eid, link in sorted(expected.items(), key=lambda item: item[1].idx):
        if eid not in found:
            result.problems.append(Problem(sid, "notebook", "its cell is missing", eid, link.idx))
    return cells


#: A cell's ``metadata.interp`` fields that its chain link also holds (absent: None).
_META_FIELDS = ("reason", "started_at", "duration_ms", "state_lost")


def _meta_differences(meta: dict[str, Any], chained: dict[str, Any], cell: Any) -> list[str]:
    """The fields of a cell that say otherwise than its chain link: its status, reason,
    start time, duration, ``state_lost`` (``metadata.interp``), ``execution_count`` and
    its policy decision (whom an approval names, and why) when the link covers one. The
    cell's digest covers only its source and outputs."""
    differ = []
    if "status" in meta and meta["status"] != chained.get("status"):
        differ.append("status")
    for name in _META_FIELDS:
        differs = name in chained and meta.get(name) != chained[name]
        if differs and not _older_completion(name, meta, chained):
            differ.append(name)
    if "execution_count" in chained and cell.get("execution_count") != chained["execution_count"]:
        differ.append("execution_count")
    if "policy" in chained:
        try:
            shown = meta.get("policy")
            covered = None if shown is None else policy_covered(PolicyResult.model_validate(shown))
        except ValidationError:
            covered = {"unreadable": True}
        if covered != chained["policy"]:
            differ.append("policy decision")
    return differ


def _older_completion(name: str, meta: dict[str, Any], chained: dict[str, Any]) -> bool:
    """Whether ``name`` differs as brokers before this check left a cell that was running
    when a broker stopped and that the next one completed in place (its kernel gone): the
    cell said its state was lost and kept its duration, while its record stayed as the
    restart marked it (``unknown``, ``broker_restarted``, no duration, ``state_lost``
    false). Only that direction: a cell that shows less than its record is reported."""
    if (chained.get("status"), chained.get("reason")) != ("unknown", "broker_restarted"):
        return False
    if name == "duration_ms":
        return chained.get("duration_ms") is None
    return name == "state_lost" and meta.get(name) is True and chained.get(name) is False


def _check_notes(
    db: sqlite3.Connection, sid: str, cells: list[Any] | None, result: SessionAudit
) -> None:
    """Check the session's notes chain, and the notebook's notes (its markdown cells)
    against it: each recorded note is there, as recorded (text, event, the cell it
    follows), in order, and no markdown cell is one it has no record of."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(sessions)")}
    row = (
        db.execute("SELECT notes_head FROM sessions WHERE id = ?", (sid,)).fetchone()
        if "notes_head" in columns
        else None
    )
    head = row[0] if row is not None else None
    markdown = [
        (i, c)
        for i, c in enumerate(cells or [])
        if isinstance(c, dict) and c.get("cell_type") == "markdown"
    ]
    result.notes = len(markdown)
    if not isinstance(head, str):
        result.notes_not_covered = len(markdown)  # a broker from before the notes chain
        return
    recorded = _walk_notes(db, sid, head, result)
    if cells is None:
        return
    seen: set[int] = set()
    after: str | None = None
    last = 0
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict):
            continue
        if cell.get("cell_type") == "code":
            eid = _interp_meta(cell).get("execution_id")
            after = eid if isinstance(eid, str) else after
            continue
        if cell.get("cell_type") != "markdown":
            continue
        meta = dict(_interp_meta(cell))
        n = meta.pop(NOTE_KEY, None)
        text = _text(cell.get("source", ""))

        def broken(message: str, index: int = index) -> None:
            result.problems.append(Problem(sid, "note", f"cell {index}: {message}"))

        content = recorded.get(n) if isinstance(n, int) and not isinstance(n, bool) else None
        if content is None or not isinstance(n, int) or n in seen:
            broken(f"a note the service has no record of (added, or copied): {_quote(text)}")
            continue
        seen.add(n)
        if text != content.get("text"):
            broken(
                f"note {n} was edited: it reads {_quote(text)}, written as "
                f"{_quote(content.get('text'))}"
            )
        if (meta or None) != content.get("event"):
            broken(f"note {n}'s metadata (its event) differs from its record")
        if content.get("after") != after:
            where = content.get("after")
            written = f"after the cell of execution {where}" if where else "before every cell"
            broken(f"note {n} was moved: it was written {written}")
        if n < last:
            broken(f"note {n} comes after note {last} here, but was written before it")
        last = max(last, n)
    for n, content in sorted(recorded.items()):
        if n not in seen:
            message = f"note {n} is missing from the notebook: {_quote(content.get('text'))}"
            result.problems.append(Problem(sid, "note", message))


def _walk_notes(
    db: sqlite3.Connection, sid: str, head: str, result: SessionAudit
) -> dict[int, dict[str, Any]]:
    """Walk the session's notes chain; returns each intact note's content by number."""
    rows = (
        db.execute(
            "SELECT n, prev_hash, hash, content_json FROM audit_notes WHERE session_id = ?"
            " ORDER BY n",
            (sid,),
        ).fetchall()
        if _has_table(db, "audit_notes")
        else []
    )
    recorded: dict[int, dict[str, Any]] = {}
    expected_prev = audit.notes_genesis(sid)
    for position, row in enumerate(rows, start=1):
        n = row["n"]

        def broken(message: str, n: int = n) -> None:
            result.problems.append(Problem(sid, "note", f"note {n}: {message}"))

        intact = True
        if n != position:
            broken(f"the note before it is missing from the notes chain (expected note {position})")
        if row["prev_hash"] != expected_prev:
            broken("its prev_hash is not the hash of the note before it")
            intact = False
        if audit.link_hash(row["prev_hash"], row["content_json"]) != row["hash"]:
            broken("its hash does not match its content (its record was edited)")
            intact = False
        try:
            content = json.loads(row["content_json"])
        except (TypeError, ValueError):
            content = None
        if (
            not isinstance(content, dict)
            or content.get("session_id") != sid
            or content.get("n") != n
        ):
            broken("its content belongs to another note or session")
            content = {}
        expected_prev = row["hash"]
        if intact and content:
            recorded[n] = content
    last = rows[-1] if rows else None
    ends = f"{last['n']}:{last['hash']}" if last is not None else audit.notes_empty_head(sid)
    if ends != head:
        said, _, _ = head.partition(":")
        reached = last["n"] if last is not None else 0
        message = (
            f"the notes chain ends at note {reached}, but the session's record says it reached"
            f" note {said}: its last notes were removed"
            if said.isdigit() and int(said) > reached
            else "the notes chain's last note is not the one the session's record names "
            f"(note {said})"
        )
        result.problems.append(Problem(sid, "note", message))
    return recorded


def _text(source: Any) -> str:
    """A cell's source as one string (nbformat allows a list of lines)."""
    if isinstance(source, list):
        return "".join(s for s in source if isinstance(s, str))
    return source if isinstance(source, str) else ""


def _quote(text: Any) -> str:
    """A note named by its first words, on one line."""
    line = " ".join(str(text).split())
    return repr(line if len(line) <= 80 else line[:77] + "...")


def _digest_of_uncommented(cell: dict[str, Any], outputs: list[dict[str, Any]]) -> str | None:
    """For a recovery's re-run (:func:`~interpreter.notes.commented_rerun`), the digest
    over its code uncommented: what brokers before the digest covered the source as
    written recorded. None for any other cell."""
    source = cell.get("source", "")
    if isinstance(source, list):
        source = "".join(s for s in source if isinstance(s, str))
    if not isinstance(source, str) or not source.startswith(RERUN_HEADER + "\n"):
        return None
    lines = source[len(RERUN_HEADER) + 1 :].split("\n")
    code = "\n".join("" if line == "#" else line.removeprefix("# ") for line in lines)
    if commented_rerun(code) != source:
        return None
    return audit.cell_digest(code, outputs)


def _interp_meta(cell: Any) -> dict[str, Any]:
    """A cell's ``metadata.interp``, or {} for anything that is not shaped like one."""
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    interp = meta.get("interp") if isinstance(meta, dict) else None
    return interp if isinstance(interp, dict) else {}


def _check_artifacts(root: Path, sid: str, latest: dict[str, _Link], result: SessionAudit) -> None:
    for link in sorted(latest.values(), key=lambda k: k.idx):
        ids = link.content.get("artifacts")
        for aid in ids if isinstance(ids, list) else []:
            result.artifacts += 1
            path = root / str(aid)
            try:
                digest = _sha256_file(path)
            except OSError:
                message = f"artifact {aid} is missing"
            else:
                if digest == aid:
                    continue
                message = f"artifact {aid}: its bytes hash to {digest}"
            result.problems.append(Problem(sid, "artifact", message, link.execution_id, link.idx))


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def format_report(report: AuditReport) -> str:
    """Human-readable lines: one per session, then its problems (the first is the first
    broken link)."""
    if report.error is not None:
        return f"error: {report.error}"
    lines = []
    for s in report.sessions:
        state = "ok" if s.ok else "BROKEN"
        lines.append(
            f"{s.session_id}: {state} ({_count(s.links, 'link')}, {_count(s.records, 'record')}"
            f" of which {s.not_chained} not chained, {_count(s.cells, 'notebook cell')}"
            f" of which {s.cells_not_chained} not chained, {_count(s.notes, 'note')}"
            f" of which {s.notes_not_covered} not covered, {_count(s.artifacts, 'artifact')})"
        )
        for n, p in enumerate(s.problems):
            lead = "first broken link" if n == 0 else "also"
            lines.append(f"  {lead}: {p}")
    broken = sum(not s.ok for s in report.sessions)
    summary = (
        f"{_count(len(report.sessions), 'session')} checked, {broken} broken"
        if report.sessions
        else "no sessions"
    )
    if report.purged:
        summary += (
            f"; {_count(report.purged, 'closed session')} removed by the retention, not checked"
        )
    lines.append(summary)
    return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
