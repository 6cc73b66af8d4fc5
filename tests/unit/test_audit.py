"""Which store writes extend an execution chain, and how a database from before the chain
reads: against a real SQLite file through :class:`~interpreter.store.Store`."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from interpreter.audit import canonical, cell_digest, content_of, differences, genesis, link_hash
from interpreter.audit_verify import format_report, verify
from interpreter.models import ApprovalOutcome, Execution, PolicyResult
from interpreter.notes import commented_rerun
from interpreter.store import SessionRecord, Store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def new_store(data: Path, sid: str = "s_1") -> Store:
    store = Store(data / "state.db")
    store.insert_session(
        SessionRecord(
            id=sid, owner="o", status="idle", backend="local", created_at=T0, last_activity_at=T0
        )
    )
    return store


def links(data: Path) -> list[tuple[int, str, str]]:
    db = sqlite3.connect(data / "state.db")
    try:
        rows = db.execute(
            "SELECT idx, execution_id, json_extract(content_json, '$.status') FROM audit_links"
            " ORDER BY idx"
        ).fetchall()
    finally:
        db.close()
    return [(r[0], r[1], r[2]) for r in rows]


def test_only_final_writes_that_change_the_content_extend_the_chain(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    ex = Execution(id="ex_a", session_id="s_1", status="queued", code="print(1)")
    store.save_execution(1, ex)
    ex.status, ex.started_at = "running", T0
    store.save_execution(1, ex)
    assert links(tmp_path) == []  # queued and running are never chained
    ex.status, ex.stdout, ex.duration_ms = "ok", "1\n", 12.5
    store.save_execution(1, ex, notebook_sha256="n1")
    store.save_execution(1, ex, notebook_sha256="n1")  # same content: nothing new
    assert links(tmp_path) == [(1, "ex_a", "ok")]
    ex.stdout = "1\nlate\n"  # output that arrived after the end: an amendment
    store.save_execution(1, ex, notebook_sha256="n2")
    other = Execution(id="ex_b", session_id="s_1", status="running", code="while True: pass")
    store.save_execution(2, other)
    assert [u.execution.id for u in store.mark_unfinished()] == ["ex_b"]
    store.close()
    assert links(tmp_path) == [(1, "ex_a", "ok"), (2, "ex_a", "ok"), (3, "ex_b", "unknown")]
    (session,) = verify(tmp_path).sessions
    assert session.links == 3 and session.records == 2
    # The chain is intact; the notebook whose cell it names (digest n2) is not there.
    (problem,) = session.problems
    assert (problem.where, problem.execution_id) == ("notebook", "ex_a")
    assert problem.message == "notebook.ipynb is missing"


def test_a_database_from_before_the_chain_is_not_chained_not_broken(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "state.db")
    db.executescript(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, owner TEXT NOT NULL, status TEXT NOT NULL,"
        " backend TEXT NOT NULL, created_at TEXT NOT NULL, last_activity_at TEXT NOT NULL,"
        " closed_reason TEXT);"
        "CREATE TABLE executions (id TEXT PRIMARY KEY, session_id TEXT NOT NULL,"
        " seq INTEGER NOT NULL, status TEXT NOT NULL, code TEXT NOT NULL,"
        " created_at TEXT NOT NULL, started_at TEXT, duration_ms REAL, data_json TEXT NOT NULL);"
    )
    old = Execution(id="ex_old", session_id="s_old", status="ok", code="1")
    db.execute(
        "INSERT INTO sessions VALUES ('s_old', 'o', 'closed', 'local', ?, ?, 'deleted')",
        (T0.isoformat(), T0.isoformat()),
    )
    db.execute(
        "INSERT INTO executions VALUES ('ex_old', 's_old', 1, 'ok', '1', ?, NULL, NULL, ?)",
        (T0.isoformat(), old.model_dump_json()),
    )
    db.commit()
    db.close()
    before = verify(tmp_path)  # never opened by a broker that chains: read as it is
    assert before.ok and before.sessions[0].not_chained == 1
    Store(tmp_path / "state.db").close()  # the migration adds the columns and the table
    after = verify(tmp_path)
    assert after.ok, format_report(after)
    assert (after.sessions[0].records, after.sessions[0].not_chained) == (1, 1)
    assert "1 record of which 1 not chained" in format_report(after)


def test_a_deleted_record_is_named(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.save_execution(1, Execution(id="ex_a", session_id="s_1", status="error", code="1/0"))
    store.close()
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("DELETE FROM executions")
    db.commit()
    db.close()
    (problem,) = verify(tmp_path).sessions[0].problems
    assert (problem.where, problem.execution_id) == ("record", "ex_a")
    assert (problem.link, problem.message) == (1, "the record is gone")


def test_the_last_links_removed_with_their_records_are_named(tmp_path: Path) -> None:
    """Removing a session's newest executions (links and records) left a shorter chain
    that was whole in itself, and audit verify said ok (found by an outside security
    tester). The session's row names the last link, written with it."""
    store = new_store(tmp_path)
    for n in range(1, 4):
        store.save_execution(
            n, Execution(id=f"ex_{n}", session_id="s_1", status="ok", code=f"print({n})")
        )
    store.close()
    assert verify(tmp_path).sessions[0].ok
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("DELETE FROM audit_links WHERE idx >= 2")
    db.execute("DELETE FROM executions WHERE seq >= 2")
    db.commit()
    db.close()
    (problem,) = verify(tmp_path).sessions[0].problems
    assert (problem.where, problem.link, problem.execution_id) == ("chain", 1, "ex_1")
    assert problem.message == (
        "the chain ends at link 1, but the session's record says it reached link 3: its last "
        "links were removed"
    )
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("DELETE FROM audit_links")
    db.execute("DELETE FROM executions")
    db.commit()
    db.close()
    (problem,) = verify(tmp_path).sessions[0].problems
    assert problem.message.startswith("the chain ends at no link, but the session's record")


def test_a_session_from_before_the_head_is_checked_as_before(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.save_execution(1, Execution(id="ex_1", session_id="s_1", status="ok", code="1"))
    store.close()
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("UPDATE sessions SET audit_head = NULL")  # as a broker before the column left it
    db.commit()
    db.close()
    assert verify(tmp_path).sessions[0].ok


def test_differences_name_the_fields_in_order() -> None:
    ex = Execution(id="ex_a", session_id="s", status="ok", code="x", stdout="1")
    forged = ex.model_copy(update={"status": "error", "stdout": "2"})
    assert differences(content_of(ex, None), content_of(forged, None)) == [
        "status",
        "stdout_sha256",
    ]


def test_cell_digest_reads_lines_and_strings_alike() -> None:
    outputs = [{"output_type": "stream", "name": "stdout", "text": "a\nb\n"}]
    split = [{"output_type": "stream", "name": "stdout", "text": ["a\n", "b\n"]}]
    assert cell_digest("x = 1\ny", outputs) == cell_digest(["x = 1\n", "y"], split)
    assert cell_digest("x = 1\ny", outputs) != cell_digest("x = 2\ny", outputs)


def test_bad_inputs_get_one_line_each(tmp_path: Path) -> None:
    (tmp_path / "state.db").write_bytes(b"not a database at all" * 100)
    report = verify(tmp_path)
    assert not report.ok and report.error is not None
    assert report.error.startswith("cannot read") and "state.db" in report.error
    assert format_report(report).count("\n") == 0

    data = tmp_path / "odd"
    store = new_store(data)
    store.save_execution(1, Execution(id="ex_a", session_id="s_1", status="ok", code="1"))
    store.close()
    db = sqlite3.connect(data / "state.db")
    db.execute("UPDATE audit_links SET content_json = '[1, 2]'")
    db.commit()
    db.close()
    nb = data / "sessions" / "s_1" / "notebook.ipynb"
    nb.parent.mkdir(parents=True)
    nb.write_text('{"cells": [{"metadata": "odd"}, 7, {"metadata": {"interp": []}}]}')
    problems = verify(data).sessions[0].problems
    assert [p.where for p in problems][:2] == ["chain", "chain"]
    assert "not a JSON object" in problems[1].message


def _approved(ex: Execution, by: str) -> Execution:
    outcome = ApprovalOutcome(decision="approved", decided_by=by, decided_at=T0, comment="ok")
    policy = PolicyResult(decision="approve", policy="default", rule="r", approval=outcome)
    return ex.model_copy(update={"policy": policy})


def test_the_policy_decision_and_its_approval_are_covered() -> None:
    ex = _approved(Execution(id="ex_a", session_id="s", status="ok", code="x"), "ops-alice")
    chained = content_of(ex, None)
    assert chained["policy"]["approval"] == {
        "decision": "approved",
        "decided_by": "ops-alice",
        "decided_at": T0.isoformat(),
        "comment": "ok",
    }
    forged = _approved(ex, "mallory")
    assert differences(chained, content_of(forged, None)) == ["policy"]
    # A policy added to an execution that had none is a difference too.
    plain = Execution(id="ex_b", session_id="s", status="ok", code="x")
    assert content_of(plain, None)["policy"] is None
    assert differences(content_of(plain, None), content_of(_approved(plain, "m"), None)) == [
        "policy"
    ]


def test_a_link_written_before_the_policy_was_covered_still_verifies(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    ex = _approved(Execution(id="ex_a", session_id="s_1", status="ok", code="1"), "ops-alice")
    store.save_execution(1, ex)
    store.close()
    # Rewrite the chain as a broker of the previous version wrote it: no "policy" key.
    _rechain(tmp_path, lambda old: old.pop("policy"))
    assert verify(tmp_path).ok, format_report(verify(tmp_path))
    # The next final write of it covers the decision (an amendment link).
    store = Store(tmp_path / "state.db")
    store.save_execution(1, ex)
    store.close()
    assert [idx for idx, _, _ in links(tmp_path)] == [1, 2]
    assert verify(tmp_path).ok


def test_outputs_chained_before_a_later_field_still_verify_and_a_change_does_not(
    tmp_path: Path,
) -> None:
    """A link made before outputs had ``after`` digests them without that key: every
    record of a broker from before 049d1c5 with an output was called tampered with."""
    from interpreter.audit import sha256_text
    from interpreter.models import Output

    store = new_store(tmp_path)
    shown = Output(type="execute_result", data={"text/plain": "2"})
    ex = Execution(id="ex_o", session_id="s_1", status="ok", code="1 + 1", outputs=[shown])
    store.save_execution(1, ex)
    store.close()

    def rechain(outputs_sha256: str) -> None:
        """The chain as an older broker wrote it, with this outputs digest."""
        _rechain(tmp_path, lambda old: old.update(outputs_sha256=outputs_sha256))

    before_after = [{k: v for k, v in shown.model_dump(mode="json").items() if k != "after"}]
    rechain(sha256_text(canonical(before_after)))
    assert verify(tmp_path).ok, format_report(verify(tmp_path))
    changed = [{**before_after[0], "data": {"text/plain": "3"}}]
    rechain(sha256_text(canonical(changed)))
    report = format_report(verify(tmp_path))
    assert not verify(tmp_path).ok and "outputs_sha256" in report, report


def _rechain(data: Path, change: Any) -> None:
    """Rewrite the one link of session ``s_1`` after ``change`` (called with its content),
    rehashed as a broker that wrote it so would have."""
    db = sqlite3.connect(data / "state.db")
    (content_json,) = db.execute("SELECT content_json FROM audit_links").fetchone()
    old = json.loads(content_json)
    change(old)
    old_json = canonical(old)
    digest = link_hash(genesis("s_1"), old_json)
    db.execute("UPDATE audit_links SET content_json = ?, hash = ?", (old_json, digest))
    db.execute("UPDATE executions SET hash = ?", (digest,))
    db.execute("UPDATE sessions SET audit_head = NULL")  # such a broker wrote none
    db.commit()
    db.close()


def _recovered_notebook(data: Path, source: str, digest: str) -> None:
    cell = {
        "cell_type": "code",
        "metadata": {
            "interp": {
                "execution_id": "ex_r",
                "audit_sha256": digest,
                "replay_source": "session:s_1",
                "state_lost": False,  # as its record has it, with no execution count
            }
        },
        "source": source,
        "outputs": [],
        "execution_count": None,
    }
    (data / "sessions" / "s_1").mkdir(parents=True)
    (data / "sessions" / "s_1" / "notebook.ipynb").write_text(json.dumps({"cells": [cell]}))


def test_a_recovered_cell_is_digested_as_written_and_an_older_digest_is_explained(
    tmp_path: Path,
) -> None:
    """A recovery writes its re-runs commented out: their digest is of that source. Brokers
    before that rule recorded the digest of the uncommented code: still a difference
    (an uncommented digest cannot show an edit of the commented code's shape), but said."""
    code = "x = 1\n\nprint(x)"
    written = commented_rerun(code)
    for digest, ok in [(cell_digest(written, []), True), (cell_digest(code, []), False)]:
        data = tmp_path / digest
        store = new_store(data)
        ex = Execution(id="ex_r", session_id="s_1", status="ok", code=code)
        store.save_execution(1, ex, notebook_sha256=digest)
        store.close()
        _recovered_notebook(data, written, digest)
        report = verify(data)
        assert report.ok is ok, format_report(report)
        if not ok:
            (problem,) = report.sessions[0].problems
            assert problem.message.startswith("cell 0: its source or outputs differ")
            assert "recorded by an older broker" in problem.message


def test_the_outputs_digest_is_the_one_of_their_whole_json_made_piece_by_piece() -> None:
    """The outputs are digested one at a time (a cell's outputs can be tens of megabytes
    of JSON, which was made into one text, and twice more on the way to the store); the
    digest must stay the one links written before cover: that of the whole canonical list."""
    from interpreter.audit import sha256_text
    from interpreter.models import Output

    outputs = [
        Output(type="display_data", data={"text/html": f"<p>{i}é\ud800</p>", "text/plain": "x"})
        for i in range(4)
    ]
    for n in range(len(outputs) + 1):
        ex = Execution(id="ex_1", session_id="s_1", code="1", status="ok", outputs=outputs[:n])
        whole = canonical([o.model_dump(mode="json") for o in outputs[:n]])
        assert content_of(ex, None)["outputs_sha256"] == sha256_text(whole), n


def test_the_record_and_its_wal_files_are_the_owners_only(tmp_path: Path) -> None:
    """``state.db`` was 0600, but SQLite had made its -wal and -shm files (which hold
    the same code, outputs, env and kernel keys) from the mode it had before: 0644."""
    store = new_store(tmp_path)
    store.save_execution(1, Execution(id="ex_w", session_id="s_1", status="ok", code="1"))
    try:
        for name in ("state.db", "state.db-wal", "state.db-shm"):
            assert (tmp_path / name).stat().st_mode & 0o777 == 0o600, name
    finally:
        store.close()


def test_a_cell_an_older_broker_completed_after_a_restart_verifies(tmp_path: Path) -> None:
    """Brokers before the metadata check completed a cell that was running when a broker
    stopped in its notebook (state lost, its duration kept) and left its record as the
    restart marked it: that shape still verifies; the same cell of a record that ended
    otherwise is reported."""
    for status, ok in [("unknown", True), ("error", False)]:
        data = tmp_path / status
        store = new_store(data)
        ex = Execution(
            id="ex_k",
            session_id="s_1",
            status=status,
            reason="broker_restarted",
            code="print(1)",
            started_at=T0,
        )
        store.save_execution(1, ex, notebook_sha256=cell_digest("print(1)", []))
        store.close()
        meta = {
            "execution_id": "ex_k",
            "audit_sha256": cell_digest("print(1)", []),
            "status": status,
            "reason": "broker_restarted",
            "started_at": T0.isoformat(),
            "duration_ms": 5.0,
            "state_lost": True,
        }
        cell = {"cell_type": "code", "metadata": {"interp": meta}, "source": "print(1)"}
        (data / "sessions" / "s_1").mkdir(parents=True)
        nb = {"cells": [{**cell, "outputs": [], "execution_count": None}]}
        (data / "sessions" / "s_1" / "notebook.ipynb").write_text(json.dumps(nb))
        report = verify(data)
        assert report.ok is ok, format_report(report)
        if not ok:
            assert [p.message for p in report.sessions[0].problems] == [
                "cell 0: its duration_ms differs from its chain link's",
                "cell 0: its state_lost differs from its chain link's",
            ]
