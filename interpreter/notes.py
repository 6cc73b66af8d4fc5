"""What a session's notebook says about events between cells (pure).

A person reading the notebook sees where the kernel was restarted (and why), and which
cells a recovery or a fork re-ran, as short markdown cells placed where it happened.

The cells a recovery re-runs (a ``restart(recover=True)`` replays the session's own cells
into the same notebook) are written with their code commented out: the originals are in
the notebook above them, so JupyterLab's "Run All" runs each once. Their outputs, and the
code in metadata, stay. A fork's re-run cells are its state (the originals are in another
notebook) and stay runnable.
"""

from __future__ import annotations

from interpreter.cells import CellPlan
from interpreter.models import cell_label, first_line

#: First line of a recovered cell; the code follows, commented out.
RERUN_HEADER = (
    "# Re-run by the recovery after a restart; the original cell is above. Commented out "
    "so that Run All does not run it twice."
)

_RESTART_REASONS = {
    "requested": "on request",
    "timeout": "because a cell ran past its time limit and could not be interrupted",
    "exit": "because the code called exit()",
    "died_idle": "because it had died while no cell ran",
    "broker_restarted": "because its kernel was gone when the broker restarted",
}


def commented_rerun(code: str) -> str:
    """The source of a recovered cell: :data:`RERUN_HEADER`, then ``code`` commented out."""
    lines = code.split("\n")
    return RERUN_HEADER + "\n" + "\n".join(f"# {line}" if line else "#" for line in lines)


def restart_note(reason: str, generation: int) -> str:
    """The markdown saying that the kernel was restarted, why, and what that means."""
    why = _RESTART_REASONS.get(reason)
    if why is None:
        why = f"after it died ({reason})"
    return (
        f"**Kernel restarted** {why} (generation {generation}): variables, imports and "
        "loaded data from the cells above are gone; workspace files are kept."
    )


def replacement_failed_note(reason: str) -> str:
    """The markdown saying that the kernel ended and no new one could be started."""
    why = _RESTART_REASONS.get(reason) or f"after it died ({reason})"
    return (
        f"**Kernel lost**: it was to be restarted {why}, but no new kernel could be started "
        "(the cause is in the service's log). Variables, imports and loaded data from the "
        "cells above are gone; workspace files are kept. The next cell starts a new kernel."
    )


def backend_down_note(reason: str) -> str:
    """The markdown saying that the kernel ended and the Docker engine did not answer when
    a new one was to start (written once per outage)."""
    why = _RESTART_REASONS.get(reason) or f"after it died ({reason})"
    return (
        f"**Kernel lost**: it was to be restarted {why}, but the Docker engine did not "
        "answer, so no new kernel could start. Variables, imports and loaded data from the "
        "cells above are gone; workspace files are kept. Cells sent until the engine answers "
        "again are not run; the first one after starts a new kernel."
    )


def broker_restart_note(
    *, kernel_survived: bool, closed: bool = False, kept_before: bool = False
) -> str:
    """The markdown after a cell that was running when the broker stopped (R-07).

    Its outcome is unknown, and it is never re-run. What it printed before the restart
    was held only by the broker that stopped, so it is lost; with ``kernel_survived``
    (the next broker reattached its kernel) what it printed afterwards is in the cell.
    A kernel that did not survive is replaced by a fresh one (:func:`restart_note`
    follows), unless the session was ``closed`` instead. With ``kept_before`` the broker
    shut down and kept what it had printed.
    """
    if kernel_survived and kept_before:
        return (
            "**Broker restarted** while the cell above ran: its outcome is unknown and it "
            "was not re-run. The output shown is what it printed before the broker stopped, "
            "then what it printed after the broker came back."
        )
    if kernel_survived:
        return (
            "**Broker restarted** while the cell above ran: its outcome is unknown and it "
            "was not re-run. Output it printed before the restart is lost; the output shown "
            "is what it printed after the broker came back."
        )
    return (
        "**Broker restarted** while the cell above ran, and its kernel did not survive: "
        "its outcome is unknown and it was not re-run. The output shown is what it had "
        "printed by the broker's last save of it (every few seconds); the rest is lost. "
        + ("The session was closed." if closed else "The session goes on with a fresh kernel.")
    )


def rebuild_note(source: str, own: bool, cells: list[CellPlan]) -> str:
    """The markdown before a rebuild's re-run cells: what is re-run, from where, and why.

    Cells are named as the rebuild report's summary names them (:func:`cell_label`): by
    the ``In [n]`` JupyterLab showed for them, with their first line of code.

    Args:
        source: ``session:<id>`` or ``notebook``.
        own: whether the session re-runs its own cells (a recovery).
        cells: the plan of the source's code cells (:func:`interpreter.cells.plan`).
    """
    rerun = [c for c in cells if c.rerun]
    errors = [c for c in cells if c.rerun and c.status == "error"]
    stopped = [c for c in cells if c.skip == "recorded_failure"]
    others = sum(1 for c in cells if c.skip in ("never_ran", "own_rerun"))
    lost = [c for c in cells if c.skip == "state_lost"]
    which = (
        f"{len(rerun)} cell{'s' if len(rerun) != 1 else ''} ({_cells(rerun)})"
        if rerun
        else "no cells"
    )
    parts = []
    if errors:
        parts.append(
            f"{_cells(errors, named=True)} raised an error when recorded and "
            f"{'is' if len(errors) == 1 else 'are'} re-run up to it"
        )
    if stopped:
        listed = ", ".join(f"{_label(c)} ({c.status})" for c in stopped[:20])
        parts.append(
            f"not re-run: {listed}, stopped before the end; names defined there may be missing"
        )
    if lost:
        parts.append(
            f"not re-run: {_cells(lost, named=True)}, whose state a later restart on request or "
            "exit() cleared"
        )
    if others:
        parts.append(
            f"{others} cell{'s' if others != 1 else ''} not re-run (never ran, or re-runs)"
        )
    more = "; " + "; ".join(parts) if parts else ""
    if own:
        return (
            f"**Recovery**: {which} of this notebook re-run below to rebuild the session's "
            f"state{more}. Their code is commented out, so that Run All runs each cell once."
        )
    origin = "a notebook" if source == "notebook" else f"session `{source.split(':', 1)[-1]}`"
    return f"**Rebuilt from {origin}**: {which} of its notebook re-run below{more}."


def _label(cell: CellPlan) -> str:
    return cell_label(cell.index, cell.execution_count, first_line(cell.source))


def _cells(cells: list[CellPlan], named: bool = False) -> str:
    """``In [1] `x = 1`, In [3] `y = 2` `` (the first 20, then how many more); without
    ``named``, their ``In [n]`` alone."""
    listed = ", ".join(
        _label(c) if named else cell_label(c.index, c.execution_count, "") for c in cells[:20]
    )
    more = f" and {len(cells) - 20} more" if len(cells) > 20 else ""
    return listed + more
