"""Replaying a notebook: run its code cells in a fresh session through the SDK, compare
each with its recording (:mod:`interpreter.replay.compare`), and report.

Which cells run again is the rule of :mod:`interpreter.cells`: what the recorded session
ran is re-run, a cell that raised an error included (raising the same error again is a
match); a cell that was stopped (timeout, interrupted, kernel_died, unknown) is not re-run
but reported as a recorded failure, and does not make the replay fail; a cell that never
ran (denied, cancelled, or with no execution count and no outputs: added or cleared by
hand) is skipped; cells that an in-place recovery re-ran are skipped,
since their originals are in the notebook too; the re-run cells at the top of a fork's
notebook are run, as they build the state it inherited.

A notebook records a display as it was last updated, possibly by a later cell
(``display(..., display_id=True)`` then ``handle.update(...)``): a cell whose outputs
differ and include such a display is compared again once every cell has run, with its
execution fetched anew (the service updates it too), and reported then.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel

from interpreter.cells import CellPlan, notebook_problem, plan
from interpreter.client import ApprovalRequiredEvent, Client, DoneEvent, Session
from interpreter.models import Approval, Execution
from interpreter.replay.compare import compare_outputs, outputs_from_cell, outputs_from_execution
from interpreter.terminal import visible

CellStatus = Literal["match", "mismatch", "recorded_failure", "skipped"]

# ------------------------------------------------------------------------------ replay


class CellReport(BaseModel):
    """The verdict on one code cell."""

    index: int
    execution_count: int | None = None
    status: CellStatus
    recorded_status: str = "ok"
    replay_status: str | None = None
    note: str = ""
    differences: list[str] = []
    recorded_ms: float | None = None
    replay_ms: float | None = None
    source: str = ""


class ReplayReport(BaseModel):
    """The verdict on a whole notebook."""

    notebook: str
    session_id: str | None = None
    cells: list[CellReport] = []
    matched: int = 0
    mismatched: int = 0
    recorded_failures: int = 0
    skipped: int = 0
    stopped_early: bool = False
    replay_s: float = 0.0
    replay_cells_s: float = 0.0
    recorded_cells_s: float | None = None
    ok: bool = True


def _recorded_ms(cell: dict[str, Any]) -> float | None:
    meta = cell.get("metadata") or {}
    duration = (meta.get("interp") or {}).get("duration_ms")
    if isinstance(duration, int | float):
        return float(duration)
    timing = meta.get("execution") or {}
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if isinstance(start, str) and isinstance(end, str):
        from datetime import datetime

        try:
            delta = datetime.fromisoformat(end) - datetime.fromisoformat(start)
        except ValueError:
            return None
        return delta.total_seconds() * 1000
    return None


def replay_notebook(
    client: Client,
    nb: dict[str, Any],
    *,
    stop_on_mismatch: bool = False,
    image_tolerance: float = 0.02,
    timeout_s: float | None = None,
    on_cell: Callable[[CellReport], None] | None = None,
    name: str = "notebook",
    prepare: Callable[[Session], object] | None = None,
    on_held: Callable[[CellReport, Approval], None] | None = None,
) -> ReplayReport:
    """Run a notebook's code cells in a fresh session and compare outputs cell by cell.

    Args:
        client: Client of the service to replay on.
        nb: The nbformat v4 notebook (JSON dict).
        stop_on_mismatch: Stop at the first cell that does not match.
        image_tolerance: Largest mean pixel difference (0..1) for images to match.
        timeout_s: Time limit per cell (the service default if None).
        on_cell: Called with each cell's report as soon as it is known.
        name: How the report names the notebook.
        prepare: Called with the fresh session before the first cell runs, e.g. to put
            the notebook's input files in its workspace (:mod:`interpreter.replay.inputs`).
        on_held: Called when the service's policy holds a cell's code for an operator's
            approval (the replay waits for the decision): the cell, and its approval.

    Returns:
        The report; ``report.ok`` is True when no replayed cell mismatched.

    Raises:
        ValueError: ``nb`` is not a valid nbformat v4 notebook (the message says why);
            raised before any session is created.
    """
    problem = notebook_problem(nb)
    if problem is not None:
        raise ValueError(f"{name} is not a valid nbformat v4 notebook: {problem}")
    started = time.monotonic()
    report = ReplayReport(notebook=name)
    recorded_ids = tuple(
        str(v) for v in [((nb.get("metadata") or {}).get("interp") or {}).get("session_id")] if v
    )
    recorded_total = 0.0
    recorded_known = False
    cells = nb.get("cells") or []
    with client.create_session(metadata={"replay_of": name}) as session:
        report.session_id = session.id
        if prepare is not None:
            prepare(session)
        ids = (*recorded_ids, session.id)
        # Cells compared again at the end (a later cell may update their display): their
        # position in report.cells, plan, and replayed execution's id.
        later: list[tuple[int, CellPlan, str]] = []
        for cell_plan in plan(nb):
            cell_report, execution = _replay_cell(
                session,
                cell_plan,
                cells[cell_plan.index],
                report.stopped_early,
                image_tolerance,
                timeout_s,
                ids,
                on_held,
            )
            if cell_report.recorded_ms is not None and cell_report.status != "skipped":
                recorded_total += cell_report.recorded_ms
                recorded_known = True
            if cell_report.replay_ms is not None:
                report.replay_cells_s += cell_report.replay_ms / 1000
            report.cells.append(cell_report)
            if (
                cell_report.status == "mismatch"
                and execution is not None
                and any(o.display_id for o in execution.outputs)
            ):
                later.append((len(report.cells) - 1, cell_plan, execution.id))
                continue
            _count(report, cell_report, stop_on_mismatch)
            if on_cell is not None:
                on_cell(cell_report)
        for position, cell_plan, execution_id in later:
            execution = session.execution(execution_id).execution
            cell_report = _compared(
                report.cells[position],
                cells[cell_plan.index],
                execution,
                session,
                image_tolerance,
                ids,
            )
            report.cells[position] = cell_report
            _count(report, cell_report, stop_on_mismatch)
            if on_cell is not None:
                on_cell(cell_report)
    report.recorded_cells_s = recorded_total / 1000 if recorded_known else None
    report.replay_s = time.monotonic() - started
    report.ok = report.mismatched == 0
    return report


def _count(report: ReplayReport, cell_report: CellReport, stop_on_mismatch: bool) -> None:
    if cell_report.status == "match":
        report.matched += 1
    elif cell_report.status == "mismatch":
        report.mismatched += 1
        report.stopped_early = report.stopped_early or stop_on_mismatch
    elif cell_report.status == "recorded_failure":
        report.recorded_failures += 1
    else:
        report.skipped += 1


def _replay_cell(
    session: Session,
    cell_plan: CellPlan,
    cell: dict[str, Any],
    stopped: bool,
    image_tolerance: float,
    timeout_s: float | None,
    ids: tuple[str, ...],
    on_held: Callable[[CellReport, Approval], None] | None = None,
) -> tuple[CellReport, Execution | None]:
    source = cell_plan.source
    base = CellReport(
        index=cell_plan.index,
        execution_count=cell.get("execution_count"),
        status="skipped",
        recorded_status=cell_plan.status,
        recorded_ms=_recorded_ms(cell),
        source=source.strip().split("\n", 1)[0][:60],
    )
    if stopped:
        return base.model_copy(update={"note": "not reached (stopped at a mismatch)"}), None
    if cell_plan.skip == "own_rerun":
        return base.model_copy(update={"note": "re-run of an earlier cell by a recovery"}), None
    if cell_plan.skip == "empty":
        return base.model_copy(update={"note": "empty"}), None
    if cell_plan.skip == "never_ran":
        note = f"recorded as {base.recorded_status}: it never ran"
        return base.model_copy(update={"note": note}), None
    if cell_plan.skip is None and _never_executed(cell):
        # Nothing to compare with, and the recorded run had none of its effects.
        note = "never executed when recorded (no execution count, no outputs)"
        return base.model_copy(update={"note": note}), None
    if cell_plan.skip == "recorded_failure":
        update = {
            "status": "recorded_failure",
            "note": f"recorded as {base.recorded_status}; not re-run",
        }
        return base.model_copy(update=update), None
    if on_held is None:
        execution = session.run(source, timeout_s=timeout_s).execution
    else:
        execution = _watched_run(session, source, timeout_s, lambda a: on_held(base, a))
    return _compared(base, cell, execution, session, image_tolerance, ids), execution


def _never_executed(cell: dict[str, Any]) -> bool:
    """A code cell as a notebook holds one it never ran: added, or cleared, by hand."""
    return (
        cell.get("execution_count") is None
        and not cell.get("outputs")
        and "status" not in ((cell.get("metadata") or {}).get("interp") or {})
    )


def _watched_run(
    session: Session,
    source: str,
    timeout_s: float | None,
    on_held: Callable[[Approval], None],
) -> Execution:
    """Run ``source`` as a stream, to hear when it is held for approval."""
    for event in session.stream(source, timeout_s=timeout_s):
        if isinstance(event, ApprovalRequiredEvent):
            on_held(event.approval)
        elif isinstance(event, DoneEvent):
            return event.execution
    raise AssertionError("a stream ends with its done event")  # pragma: no cover


def _compared(
    base: CellReport,
    cell: dict[str, Any],
    execution: Execution,
    session: Session,
    image_tolerance: float,
    ids: tuple[str, ...],
) -> CellReport:
    """``base`` with the verdict on ``execution``, the replay of ``cell``."""
    replayed = outputs_from_execution(execution, session.artifact)
    diffs = compare_outputs(
        outputs_from_cell(cell), replayed, image_tolerance=image_tolerance, extra_ids=ids
    )
    if execution.status not in ("ok", "error"):
        diffs.insert(0, f"replay ended with status {execution.status}")
    note = ""
    if not diffs and execution.status == "error":
        note = "raised its recorded error again"
    return base.model_copy(
        update={
            "status": "mismatch" if diffs else "match",
            "differences": diffs,
            "replay_status": execution.status,
            "replay_ms": execution.duration_ms,
            "note": note,
        }
    )


# ------------------------------------------------------------------------------ output

_LABELS = {
    "match": "match",
    "mismatch": "MISMATCH",
    "recorded_failure": "recorded failure",
    "skipped": "skipped",
}


def _seconds(ms: float | None) -> str:
    return "    -  " if ms is None else f"{ms / 1000:6.2f}s"


def print_cell(cell: CellReport) -> None:
    """One line per cell (and one per difference) on stdout."""
    count = f"[{cell.execution_count}]" if cell.execution_count is not None else "[ ]"
    line = (
        f"cell {cell.index:3d} {count:>6}  {_LABELS[cell.status]:<16} "
        f"{_seconds(cell.replay_ms)} (recorded {_seconds(cell.recorded_ms).strip()})  "
        f"{cell.source}"
    )
    # The notebook's code and outputs are an agent's text: shown, never obeyed.
    print(visible(line.rstrip()))
    if cell.note:
        print(f"      {visible(cell.note)}")
    for diff in cell.differences:
        print(f"      - {visible(diff)}")
    sys.stdout.flush()


def print_summary(report: ReplayReport) -> None:
    """The closing summary lines on stdout."""
    total = len(report.cells)
    print(
        f"\n{report.notebook}: {total} code cells: {report.matched} match, "
        f"{report.mismatched} mismatch, {report.recorded_failures} recorded failure(s) "
        f"(stopped) not re-run, {report.skipped} skipped"
    )
    timing = f"replay took {report.replay_s:.1f}s (cells {report.replay_cells_s:.1f}s)"
    if report.recorded_cells_s is not None:
        timing += f"; the recorded run's cells took {report.recorded_cells_s:.1f}s"
    print(timing)
    print("ALL MATCH" if report.ok else "MISMATCH")
