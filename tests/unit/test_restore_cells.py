"""Cells the notebook file lacks are written back from the store after a broker restart."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path

import nbformat

from interpreter.audit import cell_digest
from interpreter.models import ArtifactRef, ErrorInfo, Execution, Output
from interpreter.notebook import NotebookRecorder
from interpreter.restore_cells import layout_of, missing, outputs_of, restore

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def _recorder(tmp_path: Path) -> NotebookRecorder:
    rec = NotebookRecorder.create(
        tmp_path / "notebook.ipynb", session_id="s_1", kernel_name="k", backend="local"
    )
    rec.add_cell(
        "x = 1",
        [],
        execution_id="ex_1",
        execution_count=1,
        status="ok",
        started_at=None,
        duration_ms=1.0,
        state_lost=False,
        reason=None,
    )
    return rec


def test_only_finished_cells_missing_from_the_file_are_written_back(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    (artifacts / "a1").write_bytes(PNG)
    (artifacts / "a2").write_text(json.dumps({"kind": "line"}))
    executions = [
        Execution(id="ex_1", session_id="s_1", status="ok", code="x = 1"),
        Execution(
            id="ex_2",
            session_id="s_1",
            status="error",
            code="plot(); 1/0",
            execution_count=2,
            started_at=datetime(2026, 1, 1, tzinfo=UTC),
            stdout="printed\n",
            outputs=[
                Output(
                    type="display_data",
                    data={"text/plain": "<Figure>"},
                    artifacts=[
                        ArtifactRef(id="a1", mime="image/png", size=len(PNG), url="/a1"),
                        ArtifactRef(id="a2", mime="application/vnd.chart+json", size=16, url="/a2"),
                    ],
                )
            ],
            error=ErrorInfo(ename="ZeroDivisionError", evalue="division by zero"),
        ),
        Execution(id="ex_3", session_id="s_1", status="cancelled", code="never"),
        Execution(id="ex_4", session_id="s_1", status="unknown", code="was running"),
        Execution(id="ex_5", session_id="s_1", status="running", code="runs"),
    ]
    rec = _recorder(tmp_path)
    assert [e.id for e in missing(rec, executions)] == ["ex_2"]
    assert restore(rec, executions, artifacts) == 1
    assert restore(rec, executions, artifacts) == 0  # idempotent
    cell = rec.nb.cells[-1]
    assert cell.metadata["interp"]["execution_id"] == "ex_2"
    assert cell.metadata["interp"]["restored_from"] == "store"
    stream, display, error = cell.outputs
    assert (stream.name, stream.text) == ("stdout", "printed\n")
    assert base64.b64decode(display.data["image/png"]) == PNG
    assert display.data["application/vnd.chart+json"] == {"kind": "line"}
    assert error.ename == "ZeroDivisionError"
    rec.save()
    nbformat.validate(nbformat.read(tmp_path / "notebook.ipynb", as_version=4))
    # It carries the digest of the cell as written, so `interp audit verify` can match it
    # against the digest the chain holds for the cell the earlier broker wrote.
    saved = json.loads((tmp_path / "notebook.ipynb").read_text())["cells"][-1]
    assert saved["metadata"]["interp"]["audit_sha256"] == cell_digest(
        saved["source"], saved["outputs"]
    )


def test_a_cell_that_never_ran_is_never_written_back_whatever_its_status(
    tmp_path: Path,
) -> None:
    """A queued cell cancelled by id was stored by older brokers as ``interrupted`` (reason
    ``cancelled``), with no ``started_at``: every restart wrote it into the notebook, and
    `interp audit verify` then found a cell whose digest its chain link never recorded."""
    started = datetime(2026, 1, 1, tzinfo=UTC)
    executions = [
        Execution(id="ex_old", session_id="s_1", status="interrupted", reason="cancelled"),
        Execution(id="ex_denied", session_id="s_1", status="denied", code="rm -rf /"),
        Execution(id="ex_failed", session_id="s_1", status="kernel_died", reason="restart_limit"),
        # Reached the kernel, settled by a restarted broker whose file then lagged.
        Execution(
            id="ex_settled",
            session_id="s_1",
            status="unknown",
            reason="broker_restarted",
            started_at=started,
            duration_ms=5.0,
            stdout="late\n",
        ),
        # Still in flight: recovery writes it once it is settled.
        Execution(
            id="ex_flying",
            session_id="s_1",
            status="unknown",
            reason="broker_restarted",
            started_at=started,
        ),
    ]
    rec = _recorder(tmp_path)
    assert [e.id for e in missing(rec, executions)] == ["ex_settled"]


def test_a_recoverys_rerun_is_written_back_commented_when_its_digest_says_so(
    tmp_path: Path,
) -> None:
    """A recovery's re-run cell is written commented out, and its chain link covers that
    form: written back from the store, it must be commented out again to verify (it was
    written as plain code, which `interp audit verify` then reported as changed)."""
    from interpreter.notes import commented_rerun

    rec = _recorder(tmp_path)
    rerun = Execution(
        id="ex_2",
        session_id="s_1",
        status="ok",
        code="x = 1",
        execution_count=1,
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    plain = Execution(
        id="ex_3",
        session_id="s_1",
        status="ok",
        code="y = 2",
        execution_count=2,
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    digests = {"ex_2": cell_digest(commented_rerun("x = 1"), []), "ex_3": cell_digest("y = 2", [])}
    assert restore(rec, [rerun, plain], tmp_path, digests) == 2
    written = {c.metadata["interp"]["execution_id"]: c for c in rec.nb.cells}
    assert written["ex_2"].source == commented_rerun("x = 1")
    assert written["ex_2"].metadata["interp"]["audit_sha256"] == digests["ex_2"]
    assert written["ex_3"].source == "y = 2"
    assert written["ex_3"].metadata["interp"]["audit_sha256"] == digests["ex_3"]


def test_outputs_come_back_in_the_order_written_when_the_layout_fits(tmp_path: Path) -> None:
    ex = Execution(
        id="ex_9",
        session_id="s_1",
        status="error",
        stdout="a\nb\n",
        stderr="w\n",
        outputs=[Output(type="display_data", data={"text/plain": "'shown'"})],
        error=ErrorInfo(ename="ValueError", evalue="x"),
    )
    written = [
        {"output_type": "stream", "name": "stdout", "text": "a\n"},
        {"output_type": "error", "ename": "ValueError", "evalue": "x", "traceback": []},
        {"output_type": "display_data", "data": {"text/plain": "'shown'"}, "metadata": {}},
        {"output_type": "stream", "name": "stderr", "text": "w\n"},
        {"output_type": "stream", "name": "stdout", "text": "b\n"},
    ]
    assert outputs_of(ex, tmp_path, layout_of(written)) == written
    # A layout that does not fit the record (its text was cut, rewritten by \r, or it is
    # not one) leaves the old order: streams, rich outputs, the error.
    fallback = ["stream", "stream", "display_data", "error"]
    cut = ex.model_copy(update={"stdout": "a\n"})
    for layout in (layout_of(written[:3]), "not json", '[["stdout", -1]]', None):
        kinds = [o["output_type"] for o in outputs_of(ex, tmp_path, layout)]
        assert kinds == fallback, layout
    assert [o["output_type"] for o in outputs_of(cut, tmp_path, layout_of(written))] == [
        "stream", "stream", "display_data", "error"
    ]  # fmt: skip


def test_a_cell_of_an_execution_without_a_chain_link_is_written_back_without_a_digest(
    tmp_path: Path,
) -> None:
    """An execution of a broker from before the audit chain has no link: its cell was
    written back with a digest, which `interp audit verify` reads as a link stripped to
    hide an edit (the session reported BROKEN after an upgrade)."""
    ran = datetime(2026, 1, 1, tzinfo=UTC)
    executions = [
        Execution(id=eid, session_id="s_1", status="ok", code=code, started_at=ran)
        for eid, code in (("ex_old", "1"), ("ex_new", "2"))
    ]
    rec = _recorder(tmp_path)
    assert restore(rec, executions, tmp_path, chained={"ex_new"}) == 2
    old, new = rec.nb.cells[-2:]
    assert "audit_sha256" not in old.metadata["interp"]
    assert old.metadata["interp"]["restored_from"] == "store"
    assert new.metadata["interp"]["audit_sha256"] == cell_digest(new.source, new.outputs)


def _timed_out(eid: str) -> Execution:
    return Execution(
        id=eid,
        session_id="s_1",
        status="timeout",
        reason="timeout",
        code="import time; time.sleep(60)",
        execution_count=2,
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        stdout="started\n",
        error=ErrorInfo(
            ename="ExecutionTimeout",
            evalue="Execution exceeded timeout_s=1; the kernel was interrupted: state kept.",
            traceback=["Traceback (most recent call last)", "KeyboardInterrupt: "],
        ),
    )


def test_a_broker_ended_cell_is_written_back_as_the_broker_writes_it(tmp_path: Path) -> None:
    """A timed-out cell missing from the file comes back from the store ending with the
    broker's error whose traceback says what the broker did (interpreter/endings.py), as
    the broker wrote it, so its digest is the one recorded; a restart on request, which
    brokers before wrote with no error output, comes back with its error too."""
    restarted = Execution(
        id="ex_r",
        session_id="s_1",
        status="interrupted",
        reason="restarted",
        code="import time; time.sleep(60)",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        state_lost=True,
        error=ErrorInfo(ename="KernelRestarted", evalue="The kernel was restarted on request."),
    )
    rec = _recorder(tmp_path)
    assert restore(rec, [_timed_out("ex_t"), restarted], tmp_path) == 2
    timed_out, cut = rec.nb.cells[-2:]
    assert [o["output_type"] for o in timed_out.outputs] == ["stream", "error"]
    assert timed_out.outputs[-1]["traceback"] == [
        "Traceback (most recent call last)",
        "KeyboardInterrupt: ",
        "ExecutionTimeout: Execution exceeded timeout_s=1; the kernel was interrupted: state kept.",
    ]
    assert cut.outputs == [
        {
            "output_type": "error",
            "ename": "KernelRestarted",
            "evalue": "The kernel was restarted on request.",
            "traceback": ["KernelRestarted: The kernel was restarted on request."],
        }
    ]
    rec.save()
    nbformat.validate(nbformat.read(tmp_path / "notebook.ipynb", as_version=4))


def test_a_broker_ended_cell_of_an_older_broker_is_written_back_as_it_wrote_it(
    tmp_path: Path,
) -> None:
    """A record of a broker from before the broker's traceback line: its chain holds the
    digest of the cell as that broker wrote it (the kernel's traceback alone), so the cell
    comes back in that form, and `interp audit verify` finds it intact."""
    ex = _timed_out("ex_old")
    older = [
        {"output_type": "stream", "name": "stdout", "text": "started\n"},
        {
            "output_type": "error",
            "ename": "ExecutionTimeout",
            "evalue": ex.error.evalue if ex.error else "",
            "traceback": ["Traceback (most recent call last)", "KeyboardInterrupt: "],
        },
    ]
    # A restart on request: that broker wrote no error output (and was told it was
    # tampered with when it wrote the cell back, with its error).
    restarted = ex.model_copy(
        update={
            "id": "ex_cut",
            "status": "interrupted",
            "reason": "restarted",
            "error": ErrorInfo(ename="KernelRestarted", evalue="restarted on request"),
        }
    )
    cut = older[:1]
    digests = {"ex_old": cell_digest(ex.code, older), "ex_cut": cell_digest(ex.code, cut)}
    layouts = {"ex_old": layout_of(older), "ex_cut": layout_of(cut)}
    rec = _recorder(tmp_path)
    assert restore(rec, [ex, restarted], tmp_path, digests, layouts=layouts) == 2
    cell, cut_cell = rec.nb.cells[-2:]
    assert cell.outputs == older
    assert cell.metadata["interp"]["audit_sha256"] == digests["ex_old"]
    assert cut_cell.outputs == cut
    assert cut_cell.metadata["interp"]["audit_sha256"] == digests["ex_cut"]


def test_a_cell_the_broker_failed_on_is_written_back_with_its_line(tmp_path: Path) -> None:
    """A cell whose outputs the broker could not keep (``BrokerError``, no traceback)
    comes back with the line its broker wrote; one of an older broker, as it wrote it."""
    error = ErrorInfo(ename="BrokerError", evalue="The service failed; see its log.")
    failed = Execution(
        id="ex_f",
        session_id="s_1",
        status="error",
        reason="broker_error",
        code="plot()",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        error=error,
    )
    older = failed.model_copy(update={"id": "ex_o"})
    plain = {"output_type": "error", "ename": "BrokerError", "evalue": error.evalue}
    digests = {"ex_o": cell_digest("plot()", [{**plain, "traceback": []}])}
    rec = _recorder(tmp_path)
    assert restore(rec, [failed, older], tmp_path, digests) == 2
    new_cell, old_cell = rec.nb.cells[-2:]
    assert new_cell.outputs == [{**plain, "traceback": [f"BrokerError: {error.evalue}"]}]
    assert old_cell.outputs == [{**plain, "traceback": []}]
    assert old_cell.metadata["interp"]["audit_sha256"] == digests["ex_o"]


def test_notes_the_file_lacks_go_back_after_the_cell_they_followed(tmp_path: Path) -> None:
    """A broker killed before its notebook's next save lost the notes since: they are
    chained in the store, and written back in their place, so the session verifies (and
    a note no file holds is not reported as removed)."""
    from interpreter.audit_verify import verify
    from interpreter.store import SessionRecord, Store

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    store = Store(tmp_path / "state.db")
    store.insert_session(
        SessionRecord(
            id="s_1", owner="o", status="idle", backend="local", created_at=t0, last_activity_at=t0
        )
    )
    session_dir = tmp_path / "sessions" / "s_1"
    session_dir.mkdir(parents=True)
    rec = NotebookRecorder.create(
        session_dir / "notebook.ipynb", session_id="s_1", kernel_name="k", backend="local"
    )
    executions = []
    for i, code in enumerate(["x = 1", "print(x)"], start=1):
        ex = Execution(
            id=f"ex_{i}", session_id="s_1", status="ok", code=code, started_at=t0, duration_ms=1.0
        )
        executions.append(ex)
        store.save_execution(i, ex, notebook_sha256=cell_digest(code, []))
    first = store.record_note("s_1", "**before any cell**", None, None)
    second = store.record_note("s_1", "**Kernel restarted** ...", {"event": "restart"}, "ex_1")
    third = store.record_note("s_1", "**Broker restarted** ...", None, "ex_2")
    assert (first, second, third) == (1, 2, 3)
    # The file as the killed broker last saved it: the first note and the first cell.
    rec.add_markdown("**before any cell**", {"audit_note": 1})
    ex = executions[0]
    rec.add_cell(
        ex.code,
        [],
        execution_id=ex.id,
        execution_count=None,
        status="ok",
        started_at=t0,
        duration_ms=1.0,
        state_lost=False,
        reason=None,
        extra={"audit_sha256": cell_digest(ex.code, [])},
    )
    assert restore(rec, executions, tmp_path, notes=store.notes_of("s_1")) == 3
    rec.save()
    store.close()
    cells = rec.nb.cells
    assert [c.cell_type for c in cells] == ["markdown", "code", "markdown", "code", "markdown"]
    assert cells[2].metadata["interp"] == {"event": "restart", "audit_note": 2}
    assert cells[4].source == "**Broker restarted** ..."
    report = verify(tmp_path)
    assert report.ok, report
    assert report.sessions[0].notes == 3
