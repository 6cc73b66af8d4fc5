"""Rebuilding a session's state by replay: from another session, a notebook, or itself.

A rebuilt session re-runs, in order, the code cells that the cell rule says to re-run
(cells that failed when recorded are skipped, and so are a session's replays of its own
cells); the result is a :class:`~interpreter.models.RebuildReport` on the session. Used by
``from_session`` (fork), ``from_notebook`` and ``restart(recover=True)``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interpreter.cells import notebook_problem, plan
from interpreter.errors import ValidationFailed
from interpreter.handle import ExecutionHandle
from interpreter.models import RebuildReport
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


def from_notebook(nb: dict[str, Any]) -> RebuildSource:
    """A client's ``from_notebook``, checked to be a valid nbformat v4 notebook."""
    problem = notebook_problem(nb)
    if problem is not None:
        raise ValidationFailed(f"from_notebook is not a valid nbformat v4 notebook: {problem}")
    return RebuildSource(notebook=dict(nb), description="notebook")


async def replay_into(
    session: LiveSession,
    nb: dict[str, Any],
    source: str,
    timeout_s: float,
    submit: Submit | None = None,
) -> RebuildReport:
    """Re-run the cells of ``nb`` that the cell rule keeps, in order, in ``session``.

    The report counts the cells with code (empty ones are not counted); ``failed`` holds
    positions among the re-run cells. ``submit`` queues one cell (default
    ``session.submit``; the broker passes one that applies the key's policy).
    """
    if submit is None:
        submit = session.submit
    cells = [c for c in plan(nb) if c.skip != "empty"]
    sources = [c.source for c in cells if c.rerun]
    report = RebuildReport(
        source=source, cells_total=len(cells), cells_skipped=len(cells) - len(sources)
    )
    all_cells = nb.get("cells") or []
    counts = [all_cells[c.index].get("execution_count") for c in cells if c.rerun]
    own = source == f"session:{session.id}"
    await session.notebook.add_markdown(rebuild_note(source, own, counts, report.cells_skipped))
    for index, code in enumerate(sources):
        handle = await submit(
            code, timeout_s, extra_meta={"replay_of": index, "replay_source": source}
        )
        await handle.finished.wait()
        report.cells_ran += 1
        if handle.execution.status != "ok":
            report.failed.append(index)
    return report
