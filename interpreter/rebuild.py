"""Rebuilding a session's state by replay: from another session, a notebook, or itself.

A rebuilt session re-runs, in order, the code cells that the cell rule says to re-run
(:mod:`interpreter.cells`: what ran, errors included; not cells that never ran or were
stopped, nor a session's replays of its own cells); the result is a
:class:`~interpreter.models.RebuildReport` on the session, naming cells by their index in
the source notebook. Used by ``from_session`` (fork), ``from_notebook``,
``restart(recover=True)`` and a rebuild on request (``POST .../rebuild``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interpreter.cells import (
    REBUILD_EVENT,
    RECOVERY_EVENT,
    CellPlan,
    note_event,
    notebook_problem,
    plan,
)
from interpreter.errors import ValidationFailed
from interpreter.handle import ExecutionHandle
from interpreter.models import Execution, RebuildCell, RebuildReport, first_line
from interpreter.notes import rebuild_note
from interpreter.session import LiveSession

#: Queues one cell: (code, timeout_s, extra_meta=...) -> its handle.
Submit = Callable[..., Awaitable[ExecutionHandle]]


@dataclass(frozen=True)
class RebuildSource:
    """What a session is rebuilt from.

    Attributes:
        notebook: the notebook whose cells are re-run.
        description: ``session:<id>`` or ``notebook``; recorded on the replayed cells.
        workspace: a workspace whose files are copied first (a fork's source), or None.
    """

    notebook: dict[str, Any]
    description: str
    workspace: Path | None = None


def from_notebook(nb: dict[str, Any], field: str = "from_notebook") -> RebuildSource:
    """A client's notebook, checked to be a valid nbformat v4 notebook; ``field`` names
    it in the error (creation's ``from_notebook``, a rebuild's ``notebook``). Validating
    a large notebook takes a while: call it off the event loop."""
    problem = notebook_problem(nb)
    if problem is not None:
        raise ValidationFailed(f"{field} is not a valid nbformat v4 notebook: {problem}")
    return RebuildSource(notebook=dict(nb), description="notebook")


async def replay_into(
    session: LiveSession,
    nb: dict[str, Any],
    source: str,
    timeout_s: float,
    submit: Submit | None = None,
) -> RebuildReport:
    """Re-run the cells of ``nb`` that the cell rule keeps, in order, in ``session``.

    The report counts the cells with code (empty ones are not counted) and names cells by
    their index in ``nb`` (:func:`report_rerun`). ``submit`` queues one cell (default
    ``session.submit``; the broker passes one that applies the key's policy).
    """
    if submit is None:
        submit = session.submit
    cells = [c for c in plan(nb, current_state=True) if c.skip != "empty"]
    sources = [c for c in cells if c.rerun]
    report = RebuildReport(
        source=source, cells_total=len(cells), cells_skipped=len(cells) - len(sources)
    )
    for cell in cells:
        if cell.skip is not None:
            report.skipped_because[cell.skip] = report.skipped_because.get(cell.skip, 0) + 1
    own = source == f"session:{session.id}"
    await session.notebook.add_markdown(
        rebuild_note(source, own, cells), note_event(RECOVERY_EVENT if own else REBUILD_EVENT)
    )
    generation = session.generation
    for cell in sources:
        handle = await submit(
            cell.source, timeout_s, extra_meta={"replay_of": cell.index, "replay_source": source}
        )
        await handle.finished.wait()
        report.cells_ran += 1
        report_rerun(report, cell, handle.execution)
        if session.generation != generation:
            # Its kernel was replaced (it died, or a timeout needed a restart): what the
            # cells before had rebuilt is gone, and the cells after would run without it.
            ex = handle.execution
            report.stopped = ex.reason or ex.status
            report.stopped_at = cell.index
            left = len(sources) - report.cells_ran
            await session.notebook.add_markdown(
                f"**{'Recovery' if own else 'Rebuild'} stopped**: the kernel was replaced while "
                f"the cell above ran ({report.stopped}), so what the re-run cells had rebuilt "
                f"is gone; the {left} cell{'' if left == 1 else 's'} after it "
                f"{'was' if left == 1 else 'were'} not re-run.",
                note_event(RECOVERY_EVENT if own else REBUILD_EVENT),
            )
            break
    report_not_rerun(report, cells)
    return report


def report_rerun(report: RebuildReport, cell: CellPlan, execution: Execution) -> None:
    """Add a re-run ``cell``'s outcome to ``report``: a cell that raised the error it was
    recorded with (same exception name) did what it did then (``errors_again``); one that
    ended otherwise than recorded failed, unless it now succeeds. A re-run that called
    ``exit()`` failed: it threw away the state the cells before it had built."""
    status = execution.status
    if status == "ok" and execution.reason != "exit":
        return
    ename = execution.error.ename if execution.error is not None else None
    again = status == "error" and cell.status == "error" and ename == cell.ename
    (report.errors_again if again else report.failed).append(cell.index)
    named = _named(cell, status, execution.id)
    if not again:
        named.error = failure_of(execution)
    report.cells.append(named)


def failure_of(execution: Execution) -> str:
    """How a re-run ended, in a line: its error's ``ename: evalue`` (cut), else its status
    and reason (a timeout, a dead kernel, ``exit()``)."""
    error = execution.error
    if error is not None and (error.ename or error.evalue):
        text = f"{error.ename}: {error.evalue}" if error.evalue else error.ename
        return text if len(text) <= FAILURE_CHARS else text[: FAILURE_CHARS - 3] + "..."
    return execution.status + (f" ({execution.reason})" if execution.reason else "")


#: Characters of a failed re-run's error a rebuild's report quotes at most.
FAILURE_CHARS = 200


def report_not_rerun(report: RebuildReport, cells: list[CellPlan]) -> None:
    """Add to ``report`` the cells that ran but were stopped, so were not re-run."""
    for cell in cells:
        if cell.skip == "recorded_failure":
            report.not_rerun.append(cell.index)
            report.cells.append(_named(cell, None, None))
    report.cells.sort(key=lambda c: c.index)


def _named(cell: CellPlan, status: str | None, rerun_id: str | None) -> RebuildCell:
    return RebuildCell(
        index=cell.index,
        execution_id=cell.execution_id,
        execution_count=cell.execution_count,
        recorded_status=cell.status,
        status=status,
        rerun_execution_id=rerun_id,
        first_line=first_line(cell.source),
    )
