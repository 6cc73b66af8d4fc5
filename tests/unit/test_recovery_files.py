"""A recovered session's notebook completed from the store: each execution one cell."""

from __future__ import annotations

from pathlib import Path

from interpreter.models import Execution
from interpreter.notebook import NOTEBOOK_NAME, NotebookRecorder
from interpreter.recovery import CLOSED_NOTE, _close_files
from interpreter.store import Store


def test_a_cell_kept_through_a_shutdown_is_completed_not_written_twice(tmp_path: Path) -> None:
    """A broker that shut down keeping its kernel wrote the running cell with what it had
    printed; when the next finds that kernel gone, it completes that cell in place."""
    session_dir = tmp_path / "sessions" / "s_a"
    session_dir.mkdir(parents=True)
    store = Store(tmp_path / "state.db")
    kept = Execution(
        id="ex_kept", session_id="s_a", status="unknown", code="print(1)", reason="broker_shutdown"
    )
    other = Execution(id="ex_other", session_id="s_a", status="unknown", code="print(2)")
    store.save_execution(store.next_seq("s_a"), kept)
    store.save_execution(store.next_seq("s_a"), other)
    notebook = NotebookRecorder.create(
        session_dir / NOTEBOOK_NAME, session_id="s_a", kernel_name="python3", backend="docker"
    )
    stream = {"output_type": "stream", "name": "stdout", "text": "1\n"}
    notebook.add_cell(
        "print(1)",
        [stream],
        execution_id="ex_kept",
        execution_count=1,
        status="unknown",
        started_at=None,
        duration_ms=None,
        state_lost=False,
        reason="broker_shutdown",
        extra={"audit_sha256": "d" * 64},
    )
    notebook.save()
    _close_files(session_dir, "s_a", [(1, kept), (2, other)], store, closed=True)
    # Its record says so too (audit verify compares the two; it stayed state_lost false).
    recorded = store.get_execution("s_a", "ex_kept")
    store.close()
    assert recorded is not None and recorded.state_lost is True
    cells = NotebookRecorder.load(session_dir / NOTEBOOK_NAME).nb.cells
    code = [c for c in cells if c.cell_type == "code"]
    assert [c.metadata["interp"]["execution_id"] for c in code] == ["ex_kept", "ex_other"]
    assert code[0].outputs[0]["text"] == "1\n"  # what it had printed, kept
    assert code[0].metadata["interp"]["note"] == CLOSED_NOTE
    assert code[0].metadata["interp"]["state_lost"] is True
    assert cells[-1].cell_type == "markdown"
