"""One rule for a notebook's code cells: what each holds, how it ended, whether it runs again.

Rebuilding a session (``from_session``, ``from_notebook``, ``restart(recover=True)``) and
``interp replay`` both re-run a recorded notebook; they must agree on which cells count.
They re-run what the recorded session ran, in order: a cell that raised an error ran too,
and what it did up to the error is part of the state (a cell that defines a function and
then fails on a test call of it is a common one), so it is re-run and raising the same
error again is expected. A code cell is *not* re-run when:

* it is empty (nothing to run);
* it never ran in a kernel (status ``denied`` by a policy, or ``cancelled`` while queued);
* it was stopped before it finished (status ``timeout``, ``interrupted``, ``kernel_died``,
  or ``unknown``: the broker lost track of it): running it again could take as long or
  kill the kernel again, so it is skipped, and reported, since it may have defined names
  before it stopped;
* it is a session's re-run of one of its *own* earlier cells (a ``restart(recover=True)``
  replays them into the same notebook): the original cells already cover it. Cells that a
  fork or rebuild replayed from *another* source are that session's state and count;
* for a rebuild, which restores the state as the notebook ends (not for ``interp
  replay``, which runs what the session ran): it comes before the last place where the
  state was cleared on purpose, a restart on request or a cell that called ``exit()``
  (:func:`state_start`).

How a cell ended is our ``metadata.interp.status``, unless the cell was changed since we
recorded it (its source and outputs no longer match its ``audit_sha256``, e.g. a reviewer
fixed it and re-ran it in Jupyter) or the status is ``error`` and no error output is left:
then, as for a cell from JupyterLab, which has no status of ours, its outputs decide
(``error`` when one is an error output, else ``ok``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from interpreter.audit import cell_digest

#: Why a cell is not re-run: ``never_ran`` (denied or cancelled), ``recorded_failure``
#: (stopped before it finished: timeout, interrupted, kernel_died, unknown), ``state_lost``
#: (a rebuild of the current state only: the state was cleared after it on purpose).
SkipReason = Literal["empty", "never_ran", "recorded_failure", "own_rerun", "state_lost"]

#: ``metadata.interp.event`` of a session notebook's notes (markdown cells): a restart
#: (the kernel's state was lost there), a recovery (the session's own cells re-run after a
#: requested restart: the state is back) and a rebuild from another source (its cells add
#: to the state).
RESTART_EVENT = "restart"
RECOVERY_EVENT = "recovery"
REBUILD_EVENT = "rebuild"
#: Restarts that clear the state on purpose: one on request, one after the code's exit().
_CLEARING = frozenset({"requested", "exit"})
#: How the notes of notebooks written before notes carried an event read.
_RESTART_TEXT = "**Kernel restarted**"
_CLEARING_TEXTS = ("**Kernel restarted** on request", "because the code called exit()")
_RECOVERY_TEXT = "**Recovery**"

#: Recorded statuses of cells that are re-run: they ran to their end (an error included).
RERUN_STATUSES = frozenset({"ok", "error"})
#: Recorded statuses of cells that never reached a kernel.
NEVER_RAN_STATUSES = frozenset({"denied", "cancelled"})


@dataclass(frozen=True)
class CellPlan:
    """One code cell of a notebook and what a replay does with it.

    Attributes:
        index: the cell's position among all cells of the notebook.
        source: its code.
        status: how it ended when recorded (:func:`recorded_status`).
        skip: why it is not re-run, or None when it is.
        execution_id: the id of the execution that recorded it, when the notebook says.
        execution_count: its ``In [n]`` number as recorded (repeats after a restart).
        ename: the exception name of its recorded error output, if it has one.
    """

    index: int
    source: str
    status: str
    skip: SkipReason | None
    execution_id: str | None = None
    execution_count: int | None = None
    ename: str | None = None

    @property
    def rerun(self) -> bool:
        return self.skip is None


def source_of(cell: dict[str, Any]) -> str:
    """A cell's source as one string (nbformat allows a list of lines)."""
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def recorded_status(cell: dict[str, Any]) -> str:
    """How a cell ended when recorded: our metadata's status, unless the cell changed since
    (module docstring); else ``error`` when it holds an error output, else ``ok``."""
    meta = _interp_meta(cell)
    status = meta.get("status")
    by_outputs = "error" if recorded_error(cell) is not None else "ok"
    if not isinstance(status, str) or status == by_outputs:
        return by_outputs
    if status == "error":
        return by_outputs  # no error output left: it was re-run without one
    digest = meta.get("audit_sha256")
    if isinstance(digest, str) and digest != cell_digest(
        cell.get("source", ""), list(cell.get("outputs") or [])
    ):
        return by_outputs  # changed since recorded: the metadata describes another run
    return status


def recorded_error(cell: dict[str, Any]) -> str | None:
    """The exception name of a cell's first error output, or None without one."""
    for output in cell.get("outputs") or []:
        if isinstance(output, dict) and output.get("output_type") == "error":
            return str(output.get("ename") or "")
    return None


def own_source(nb: dict[str, Any]) -> str | None:
    """``session:<id>`` of the session that recorded ``nb``, if it says."""
    session_id = _interp_meta(nb).get("session_id")
    return f"session:{session_id}" if session_id else None


def notebook_problem(nb: object) -> str | None:
    """What makes ``nb`` (parsed JSON) not a valid nbformat v4 notebook, in one line, or
    None when it is one. Only a notebook that passes can be re-run (:func:`plan` reads
    v4's ``cells``); the server's ``from_notebook`` and ``interp replay`` both check."""
    if not isinstance(nb, dict):
        return f"it is a JSON {_json_kind(nb)}, not an object"
    version = nb.get("nbformat")
    if version is None:
        return 'it has no "nbformat" version: not a Jupyter notebook'
    if version != 4:
        return (
            f"it is nbformat version {version!r}; convert it to version 4 first "
            "(jupyter nbconvert --to notebook)"
        )
    # Imported here: the SDK-side modules that use this leaf (replay) do not load
    # nbformat until a notebook is checked.
    import nbformat
    from nbformat.corpus.words import generate_corpus_id as random_cell_id

    language = notebook_language(nb)
    if language is not None and language.lower() != "python":
        return (
            f"it is a notebook of the {language!r} language (its metadata says so); "
            "this service runs Python"
        )
    cells = nb.get("cells")
    if not isinstance(cells, list):
        return 'its "cells" is not a list'
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict):
            return f"cell {index} is a JSON {_json_kind(cell)}, not an object"
    node = nbformat.from_dict(nb)  # type: ignore[no-untyped-call]  # a copy
    minor = nb.get("nbformat_minor")
    if isinstance(minor, int) and minor >= 5:
        # Cell ids became required in 4.5, but nbformat still accepts cells without one
        # (and warns, adding one): so does this check, without the warning.
        for cell in node.cells:
            if "id" not in cell:
                cell["id"] = random_cell_id()  # type: ignore[no-untyped-call]
    try:
        nbformat.validate(node)
    except Exception as exc:  # nbformat raises more than its ValidationError on odd input
        message = getattr(exc, "message", None)
        text = message if isinstance(message, str) else str(exc)
        line = (text.strip().splitlines() or [type(exc).__name__])[0][:300]
        where = getattr(exc, "absolute_path", None)  # jsonschema's: e.g. cells, 0, outputs
        if where:
            line += " (at " + "/".join(str(part) for part in where) + ")"
        return line
    for index, cell in enumerate(node.cells):
        if cell.get("cell_type") == "code":
            problem = _code_problem(source_of(cell))
            if problem is not None:
                return f"code cell {index}'s source {problem}, which code cannot hold"
    return None


def notebook_language(nb: dict[str, Any]) -> str | None:
    """The programming language a notebook says its cells are in (its kernelspec's, else
    its ``language_info``'s), or None when it does not say."""
    meta = nb.get("metadata")
    if not isinstance(meta, dict):
        return None
    for key, field in (("kernelspec", "language"), ("language_info", "name")):
        part = meta.get(key)
        value = part.get(field) if isinstance(part, dict) else None
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _code_problem(code: str) -> str | None:
    """Why ``code`` cannot be run as a cell (the execute route refuses the same), or None."""
    if "\x00" in code:
        return "contains a NUL character"
    try:
        code.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate"
    return None


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else type(value).__name__


def plan(nb: dict[str, Any], *, current_state: bool = False) -> list[CellPlan]:
    """Every code cell of ``nb`` (a notebook :func:`notebook_problem` accepts), in order,
    with whether it is re-run (module docstring). With ``current_state`` (a rebuild: the
    kernel's state as the notebook ends), cells before :func:`state_start` are not re-run
    (``state_lost``): a restart on request or an ``exit()`` after them cleared their state."""
    own = own_source(nb)
    start = state_start(nb) if current_state else 0
    plans = []
    for index, cell in enumerate(nb.get("cells") or []):
        if cell.get("cell_type") != "code":
            continue
        source = source_of(cell)
        status = recorded_status(cell)
        skip: SkipReason | None = None
        if own is not None and _interp_meta(cell).get("replay_source") == own:
            skip = "own_rerun"
        elif not source.strip():
            skip = "empty"
        elif status in NEVER_RAN_STATUSES:
            skip = "never_ran"
        elif index < start:
            skip = "state_lost"
        elif status not in RERUN_STATUSES:
            skip = "recorded_failure"
        execution_id = _interp_meta(cell).get("execution_id")
        count = cell.get("execution_count")
        plans.append(
            CellPlan(
                index=index,
                source=source,
                status=status,
                skip=skip,
                execution_id=execution_id if isinstance(execution_id, str) else None,
                execution_count=count if isinstance(count, int) else None,
                ename=recorded_error(cell),
            )
        )
    return plans


def note_event(event: str, reasons: list[str] | None = None) -> dict[str, Any]:
    """The ``metadata.interp`` of a note: its event, and a restart's reasons."""
    return {"event": event, "reasons": list(reasons)} if reasons else {"event": event}


def state_start(nb: dict[str, Any]) -> int:
    """The index of the first cell of ``nb`` whose effects are in the kernel's state as the
    notebook ends: just after the last place where the state was cleared on purpose. That
    is a requested restart (its note), unless a recovery follows it (its re-runs bring
    the state back), or a cell that called ``exit()``. A restart the kernel did not ask
    for (after a timeout, or its death) is no such place: rebuilding that state is what a
    recovery is for. A recovery's re-runs of the session's own cells are left out: they
    repeat cells above. A notebook from elsewhere (no metadata of ours) has none: 0.
    """
    own = own_source(nb)
    start = 0
    cleared_at: int | None = None
    for index, cell in enumerate(nb.get("cells") or []):
        meta = _interp_meta(cell)
        kind = cell.get("cell_type")
        if kind == "markdown":
            event = _event_of(meta, source_of(cell), own)
            if event == RESTART_EVENT:
                cleared_at = index + 1
            elif event == RECOVERY_EVENT:
                cleared_at = None
            continue
        if kind != "code" or (own is not None and meta.get("replay_source") == own):
            continue
        if cleared_at is not None:
            start, cleared_at = cleared_at, None
        if meta.get("reason") == "exit" and meta.get("state_lost") is True:
            start = index + 1
    return start if cleared_at is None else cleared_at


def _event_of(meta: dict[str, Any], text: str, own: str | None) -> str | None:
    """The event of a note that clears or brings back the state, or None: a restart on
    request or after ``exit()``, or a recovery. Notes in a session notebook written before
    notes carried their event are read by their text."""
    event = meta.get("event")
    if event == RESTART_EVENT:
        reasons = meta.get("reasons")
        cleared = isinstance(reasons, list) and bool(_CLEARING & set(map(str, reasons)))
        return RESTART_EVENT if cleared else None
    if event is not None:
        return event if event == RECOVERY_EVENT else None
    if own is None:
        return None
    if text.startswith(_RESTART_TEXT) and any(t in text for t in _CLEARING_TEXTS):
        return RESTART_EVENT
    return RECOVERY_EVENT if text.startswith(_RECOVERY_TEXT) else None


def _interp_meta(node: dict[str, Any]) -> dict[str, Any]:
    meta = (node.get("metadata") or {}).get("interp") or {}
    return meta if isinstance(meta, dict) else {}
