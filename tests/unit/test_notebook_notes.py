"""What the notebook says between and about cells: restart and rebuild notes, recovered
cells commented out, JupyterLab's ``metadata.execution`` timing from recorded messages."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import nbformat

from interpreter.cells import CellPlan
from interpreter.execution import ExecutionRecorder
from interpreter.notebook import NotebookRecorder
from interpreter.notes import RERUN_HEADER, commented_rerun, rebuild_note, restart_note

MESSAGES = Path(__file__).parent.parent / "messages"
TIMING_KEYS = {
    "iopub.status.busy",
    "iopub.execute_input",
    "shell.execute_reply.started",
    "shell.execute_reply",
    "iopub.status.idle",
}


def test_recovered_code_is_commented_out_and_runs_as_nothing() -> None:
    code = "x = 1\n\nif x:\n    print(x)"
    text = commented_rerun(code)
    assert text.startswith(RERUN_HEADER + "\n# x = 1\n#\n# if x:\n#     print(x)")
    namespace: dict[str, object] = {}
    exec(compile(text, "cell", "exec"), namespace)  # what Run All does with it
    assert "x" not in namespace


def test_notes_say_what_happened() -> None:
    assert restart_note("requested", 2).startswith("**Kernel restarted** on request (generation 2)")
    assert "could not be interrupted" in restart_note("timeout", 3)
    assert "after it died (oom_killed)" in restart_note("oom_killed", 4)
    # Cells are named as JupyterLab and the tools showed them, by In [n], with their first
    # line of code (numbers repeat after a restart); by their index only without a number.
    # They were named by their index alone, which neither shows.
    cells = [
        CellPlan(0, "a = 1", "ok", None, execution_count=1),
        CellPlan(2, "\ndef f(): ...\nf(0)", "error", None, execution_count=2),
        CellPlan(
            3, "sleep(99)  # `a` " + "x" * 80, "timeout", "recorded_failure", execution_count=3
        ),
        CellPlan(4, "rm()", "denied", "never_ran"),
        CellPlan(5, "b = f(1)", "ok", None),
    ]
    recovery = rebuild_note("session:s_me", True, cells)
    assert recovery.startswith(
        "**Recovery**: 3 cells (In [1], In [2], cell #5) of this notebook re-run below"
    )
    assert "; In [2] `def f(): ...` raised an error when recorded and is re-run up to it" in (
        recovery
    )
    stopped = "In [3] `sleep(99)  # 'a' " + "x" * 40 + "...` (timeout)"
    assert f"not re-run: {stopped}, stopped before the end" in recovery
    assert "names defined there may be missing" in recovery
    assert "1 cell not re-run (never ran" in recovery and "commented out" in recovery
    fork = rebuild_note("session:s_parent", False, cells[:1] + cells[-1:])
    assert fork == (
        "**Rebuilt from session `s_parent`**: 2 cells (In [1], cell #5) of its notebook re-run"
        " below."
    )
    assert rebuild_note("notebook", False, cells[:1]).startswith(
        "**Rebuilt from a notebook**: 1 cell (In [1]) of its notebook"
    )


def test_own_reruns_are_commented_forks_are_not(tmp_path: Path) -> None:
    rec = NotebookRecorder.create(
        tmp_path / "nb.ipynb", session_id="s_me", kernel_name="python3", backend="local"
    )
    common = {
        "execution_count": 1,
        "status": "ok",
        "started_at": datetime(2026, 1, 1),
        "duration_ms": 1.0,
        "state_lost": False,
        "reason": None,
    }
    outputs = [{"output_type": "stream", "name": "stdout", "text": "1\n"}]
    rec.add_cell("print(1)", outputs, execution_id="e1", **common)
    rec.add_markdown(rebuild_note("session:s_me", True, [CellPlan(0, "print(1)", "ok", None)]))
    own = {"replay_of": 0, "replay_source": "session:s_me"}
    rec.add_cell("print(1)", outputs, execution_id="e2", extra=own, **common)
    other = {"replay_of": 0, "replay_source": "session:s_other"}
    rec.add_cell("print(2)", [], execution_id="e3", extra=other, **common)
    rec.save()
    nb = nbformat.read(tmp_path / "nb.ipynb", as_version=4)
    kinds = [c.cell_type for c in nb.cells]
    assert kinds == ["code", "markdown", "code", "code"]
    assert nb.cells[2].source == commented_rerun("print(1)")
    assert nb.cells[2].outputs[0]["text"] == "1\n"  # what the re-run printed stays
    assert nb.cells[2].metadata["interp"]["replay_source"] == "session:s_me"
    assert nb.cells[3].source == "print(2)"


def test_timing_comes_from_the_messages(tmp_path: Path) -> None:
    data = json.loads((MESSAGES / "execute_result.json").read_text())
    rec = ExecutionRecorder(data["msg_id"])
    for msg in data["iopub"]:
        rec.feed_iopub(msg)
    rec.feed_reply(data["reply"])
    assert set(rec.timing) == TIMING_KEYS
    times = {k: datetime.fromisoformat(v.replace("Z", "+00:00")) for k, v in rec.timing.items()}
    assert times["iopub.status.busy"] <= times["iopub.execute_input"]
    assert times["shell.execute_reply.started"] <= times["shell.execute_reply"]
    assert times["shell.execute_reply"] <= times["iopub.status.idle"]
    nb = NotebookRecorder.create(
        tmp_path / "nb.ipynb", session_id="s", kernel_name="python3", backend="local"
    )
    nb.add_cell(
        data["code"],
        rec.notebook_outputs(),
        execution_id="e",
        execution_count=1,
        status="ok",
        started_at=None,
        duration_ms=None,
        state_lost=False,
        reason=None,
        timing=rec.timing,
    )
    nb.save()
    saved = nbformat.read(tmp_path / "nb.ipynb", as_version=4)
    assert saved.cells[0].metadata["execution"] == rec.timing
    # Hostile or missing dates are not kept.
    bare = ExecutionRecorder("m")
    bare.feed_iopub({"header": {"msg_type": "status"}, "content": {"execution_state": "busy"}})
    bare.feed_reply({"header": {"date": None}, "metadata": None, "content": {"status": "ok"}})
    assert bare.timing == {}
