"""A cell the notebook cannot store as recorded is repaired at the save, never dropped: the
file stays valid, the session keeps working, the original outputs are kept in the cell's
metadata and its audit digest still verifies (interpreter/notebook_repair.py).

The recorder no longer produces such outputs from kernel messages (test_message_fuzz.py);
these tests hand the notebook bad outputs directly, as a future recorder bug would.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import nbformat
import pytest

from interpreter.audit import cell_digest
from interpreter.audit_verify import format_report, verify
from interpreter.models import Execution
from interpreter.notebook import LiveNotebook, NotebookRecorder
from interpreter.notebook_repair import KEPT, original_outputs
from tests.unit.test_audit import new_store

GOOD = {"output_type": "stream", "name": "stdout", "text": "fine\n"}
BAD_OUTPUTS = {
    "number as text/plain": {
        "output_type": "display_data",
        "data": {"text/plain": 5},
        "metadata": {},
    },
    "NaN in JSON data": {
        "output_type": "display_data",
        "data": {"application/json": {"x": math.nan}},
        "metadata": {},
    },
    "lone surrogate": {"output_type": "stream", "name": "stdout", "text": "a\ud800b"},
    "unknown output type": {"output_type": "mystery", "data": {}},
}


def unrepairable_cell() -> Any:
    """A code cell whose source is a number: nothing the repair changes makes it valid."""
    return nbformat.from_dict(
        {
            "cell_type": "code",
            "id": "broken",
            "metadata": {},
            "execution_count": None,
            "source": 5,
            "outputs": [],
        }
    )


def recorder(tmp_path: Path) -> NotebookRecorder:
    return NotebookRecorder.create(
        tmp_path / "notebook.ipynb", session_id="s1", kernel_name="python3", backend="local"
    )


def add(rec: NotebookRecorder, eid: str, outputs: list[dict[str, Any]], count: Any = 1) -> None:
    rec.add_cell(
        "x",
        outputs,
        execution_id=eid,
        execution_count=count,
        status="ok",
        started_at=None,
        duration_ms=1.0,
        state_lost=False,
        reason=None,
    )


def on_disk(rec: NotebookRecorder) -> Any:
    """The file as a reader gets it: strict UTF-8 JSON, valid nbformat."""
    raw = rec.path.read_bytes().decode("utf-8")
    json.loads(raw, parse_constant=lambda c: pytest.fail(f"{c} in the file"))
    nb = nbformat.reads(raw, as_version=4)
    nbformat.validate(nb)
    return nb


@pytest.mark.parametrize("name", list(BAD_OUTPUTS))
def test_a_cell_the_notebook_cannot_store_is_repaired_and_its_outputs_kept(
    tmp_path: Path, name: str
) -> None:
    rec = recorder(tmp_path)
    add(rec, "e0", [GOOD])
    rec.save()
    bad = BAD_OUTPUTS[name]
    outputs = [GOOD, bad, GOOD]
    digest = cell_digest("x", outputs)  # as routing computes it, before the save
    add(rec, "e1", outputs)
    rec.save()  # the old code raised, and the session refused all later work

    nb = on_disk(rec)
    cell = nb.cells[1]
    assert [o["output_type"] for o in cell.outputs] == ["stream", "stream", "stream"]
    assert cell.outputs[0] == GOOD and cell.outputs[2] == GOOD
    assert cell.outputs[1]["name"] == "stderr"
    assert f"metadata.interp.{KEPT}" in cell.outputs[1]["text"]
    kept = cell.metadata["interp"][KEPT]
    assert [k["index"] for k in kept] == [1] and kept[0]["problem"]
    # The outputs it was recorded with come back, and the audit digest covers them.
    assert cell_digest(cell.source, original_outputs(cell)) == digest
    assert rec.repaired_cells == 1
    assert nb.cells[0].outputs == [GOOD]  # the cell before is untouched


def test_a_result_number_that_is_not_a_count_is_cleared_and_kept(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    add(rec, "e1", [GOOD], count="seven")
    rec.save()
    cell = on_disk(rec).cells[0]
    assert cell.execution_count is None
    assert cell.metadata["interp"]["unrepresentable_execution_count"] == '"seven"'
    assert cell.outputs == [GOOD]


def test_an_edited_kept_output_no_longer_matches_the_digest(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    outputs = [BAD_OUTPUTS["number as text/plain"]]
    digest = cell_digest("x", outputs)
    add(rec, "e1", outputs)
    rec.save()
    cell = on_disk(rec).cells[0]
    cell.metadata["interp"][KEPT][0]["output_json"] = json.dumps(
        {"output_type": "display_data", "data": {"text/plain": 6}, "metadata": {}}
    )
    assert cell_digest(cell.source, original_outputs(cell)) != digest


async def test_late_output_that_cannot_be_stored_is_repaired_at_the_next_save(
    tmp_path: Path,
) -> None:
    """A recorded cell changed in place (late output) is validated again; the old code
    wrote it unchecked, and the file on disk was no longer valid nbformat."""
    live = LiveNotebook(recorder(tmp_path), "s1")
    await live.add_cell("x", [GOOD], **cell_meta("e1"))
    await live.add_cell("y", [GOOD], **cell_meta("e2"))
    assert await live.flush()
    await live.replace_outputs("e1", [GOOD, BAD_OUTPUTS["number as text/plain"]])
    assert await live.flush()
    assert not live.degraded
    cell = on_disk(live.recorder).cells[0]
    assert cell.outputs[1]["name"] == "stderr"
    assert original_outputs(cell)[1]["data"] == {"text/plain": 5}
    # Output that arrives later again replaces the repair and what it kept.
    await live.replace_outputs("e1", [GOOD])
    assert await live.flush()
    cell = on_disk(live.recorder).cells[0]
    assert cell.outputs == [GOOD] and KEPT not in cell.metadata["interp"]


async def test_a_cell_no_repair_can_fix_degrades_the_record_as_invalid_not_unwritable(
    tmp_path: Path,
) -> None:
    live = LiveNotebook(recorder(tmp_path), "s1")
    await live.add_cell("x", [GOOD], **cell_meta("e1"))
    assert await live.flush()
    live.recorder.nb.cells.append(unrepairable_cell())
    assert not await live.flush()
    assert live.degraded and live.invalid
    assert on_disk(live.recorder).cells[0].outputs == [GOOD]  # the last good file stays


def cell_meta(eid: str) -> dict[str, Any]:
    return {
        "execution_id": eid,
        "execution_count": 1,
        "status": "ok",
        "started_at": None,
        "duration_ms": 1.0,
        "state_lost": False,
        "reason": None,
    }


def test_audit_verify_checks_a_repaired_cell_against_its_original_outputs(
    tmp_path: Path,
) -> None:
    store = new_store(tmp_path)
    # The record says what the cell's metadata says (audit verify compares them too).
    ex = Execution(
        id="ex_a", session_id="s_1", status="ok", code="x", execution_count=1, duration_ms=1.0
    )
    outputs = [GOOD, BAD_OUTPUTS["number as text/plain"]]
    digest = cell_digest("x", outputs)
    store.save_execution(1, ex, notebook_sha256=digest)
    store.close()
    path = tmp_path / "sessions" / "s_1" / "notebook.ipynb"
    path.parent.mkdir(parents=True)
    rec = NotebookRecorder.create(path, session_id="s_1", kernel_name="python3", backend="local")
    rec.add_cell("x", outputs, **{**cell_meta("ex_a"), "extra": {"audit_sha256": digest}})
    rec.save()
    assert rec.repaired_cells == 1
    assert verify(tmp_path).ok, format_report(verify(tmp_path))
    # Editing what the cell kept is named, as editing any output is.
    nb = json.loads(path.read_text())
    nb["cells"][0]["metadata"]["interp"][KEPT][0]["output_json"] = json.dumps(GOOD)
    path.write_text(json.dumps(nb))
    (problem,) = verify(tmp_path).sessions[0].problems
    assert (problem.where, problem.execution_id) == ("notebook", "ex_a")
    assert "differ from its recorded digest" in problem.message
