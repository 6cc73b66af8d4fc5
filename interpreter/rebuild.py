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
from interpreter.errors import SessionClosed, ValidationFailed
from interpreter.handle import ExecutionHandle
from interpreter.models import (
    BROKER_STOPS,
    Execution,
    RebuildCell,
    RebuildReport,
    first_line,
)
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
    *,
    stopping: Callable[[], str | None] | None = None,
    progress: Callable[[RebuildReport], Awaitable[None]] | None = None,
) -> RebuildReport:
    """Re-run the cells of ``nb`` that the cell rule keeps, in order, in ``session``.

    The report counts the cells with code (empty ones are not counted) and names cells by
    their index in ``nb`` (:func:`report_rerun`). ``submit`` queues one cell (default
    ``session.submit``; the broker passes one that applies the key's policy).

    The re-runs stop where the kernel is replaced (what they rebuilt is gone), and where
    the broker stops: ``stopping`` says why it does (``broker_shutdown``), checked before
    each cell, and a cell its shutdown cut off ends so. The report then says where
    (``stopped``, ``stopped_at``, ``not_run``) and so does the notebook, after the cells
    that re-ran. ``progress`` is given, before the first cell and as each cell is sent
    (before, then with its execution id), the report the rebuild would end with if its
    broker were killed there (:func:`if_killed`), for the next broker to complete
    (:func:`cut_by_restart`).
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
    event = note_event(RECOVERY_EVENT if own else REBUILD_EVENT)
    await session.add_note(rebuild_note(source, own, cells), event)
    if progress is not None:
        # On file before any cell runs: a broker killed now leaves its cells under it.
        await session.notebook.flush()
        await progress(if_killed(report, cells, sources, None, None))
    generation = session.generation
    for at, cell in enumerate(sources):
        why = stopping() if stopping is not None else None
        if why is None:
            if progress is not None:
                # Before it is sent too: killed as it is put on record, it is not left out.
                await progress(if_killed(report, cells, sources, cell, None))
            try:
                handle = await submit(
                    cell.source,
                    timeout_s,
                    extra_meta={"replay_of": cell.index, "replay_source": source},
                )
            except SessionClosed:
                why = stopping() if stopping is not None else None
                if why is None:
                    raise
        if why is not None:
            _stop(report, sources[at:], why, None)
            break
        if progress is not None:
            await progress(if_killed(report, cells, sources, cell, handle.execution.id))
        await handle.finished.wait()
        ex = handle.execution
        if ex.status == "cancelled" and ex.reason == "broker_shutdown":
            # Taken off the queue by the shutdown before it started: not re-run.
            _stop(report, sources[at:], "broker_shutdown", None)
            break
        report.cells_ran += 1
        report_rerun(report, cell, ex)
        if ex.reason == "broker_shutdown":
            # The shutdown cut it off (interrupted, or left running on a kept kernel).
            _stop(report, sources[at + 1 :], "broker_shutdown", cell.index)
            break
        if session.generation != generation:
            # Its kernel was replaced (it died, or a timeout needed a restart): what the
            # cells before had rebuilt is gone, and the cells after would run without it.
            _stop(report, sources[at + 1 :], ex.reason or ex.status, cell.index)
            left = len(sources) - report.cells_ran
            await session.add_note(
                f"**{'Recovery' if own else 'Rebuild'} stopped**: the kernel was replaced while "
                f"the cell above ran ({report.stopped}), so what the re-run cells had rebuilt "
                f"is gone; the {left} cell{'' if left == 1 else 's'} after it "
                f"{'was' if left == 1 else 'were'} not re-run.",
                event,
            )
            break
    report_not_rerun(report, cells)
    if report.stopped in BROKER_STOPS:
        await session.add_note(stopped_note(report, own), {**event, "stopped": report.stopped})
    return report


def _stop(report: RebuildReport, left: list[CellPlan], why: str, at: int | None) -> None:
    """Record in ``report`` that the re-runs stopped (``why``) at cell ``at`` (None:
    between two cells), the cells ``left`` not re-run."""
    report.stopped = why
    report.stopped_at = at
    report.not_run = [c.index for c in left]
    # Those its summary names: a report kept on record at every cell stays small.
    report.cells.extend(_named(c, None, None) for c in left[:NAMED_NOT_RUN])


#: The cells of ``not_run`` a report names in ``cells`` (as many as its summary names).
NAMED_NOT_RUN = 20


def if_killed(
    report: RebuildReport,
    cells: list[CellPlan],
    sources: list[CellPlan],
    cell: CellPlan | None,
    execution_id: str | None,
) -> RebuildReport:
    """The report a rebuild ends with if its broker is killed now (``broker_restarted``):
    ``report`` so far, then ``cell`` (sent as ``execution_id``; None: before the first)
    with an unknown outcome, and the cells after it not re-run."""
    cut = report.model_copy(deep=True)
    left = sources[sources.index(cell) + 1 :] if cell is not None else sources
    if cell is not None:
        cut.cells_ran += 1
        cut.failed.append(cell.index)
        named = _named(cell, "unknown", execution_id)
        named.error = "unknown (broker_restarted)"
        cut.cells.append(named)
    _stop(cut, left, "broker_restarted", cell.index if cell is not None else None)
    report_not_rerun(cut, cells)
    return cut


def cut_by_restart(report: RebuildReport, execution: Execution | None) -> RebuildReport:
    """Complete the report a rebuild left on record when its broker was killed
    (:func:`if_killed`) with the final record of the cell it had sent last
    (``execution``, the re-run at ``stopped_at``): a cell that ended before the kill is
    reported as it ended, and the re-runs stopped after it (or, if it was the last, did
    not stop at all); one that did not stays ``unknown``."""
    done = report.model_copy(deep=True)
    at = done.stopped_at
    if at is None or execution is None or execution.status in ("unknown", "running", "queued"):
        return done
    done.failed.remove(at)
    done.cells = [c for c in done.cells if c.index != at or c.status != "unknown"]
    if execution.status != "ok" or execution.reason == "exit":
        again = execution.status == "error" and _recorded(report, at) == "error"
        (done.errors_again if again else done.failed).append(at)
        named = next(c for c in report.cells if c.index == at)
        named = named.model_copy(update={"status": execution.status, "error": None})
        if not again:
            named.error = failure_of(execution)
        done.cells.append(named)
        done.cells.sort(key=lambda c: c.index)
    done.stopped_at = None
    if not done.not_run:
        done.stopped = None  # it had re-run every cell; only its report was not written
    return done


def _recorded(report: RebuildReport, index: int) -> str | None:
    return next((c.recorded_status for c in report.cells if c.index == index), None)


def stopped_note(report: RebuildReport, own: bool) -> str:
    """The notebook's note after the cells a rebuild (``own``: a recovery) re-ran before
    its broker stopped."""
    named = {c.index: c for c in report.cells}

    def called(i: int) -> str:
        return named[i].label() if i in named else f"cell #{i}"

    return f"**{'Recovery' if own else 'Rebuild'} stopped** {report.where_stopped(called)}."


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
