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
  fork or rebuild replayed from *another* source are that session's state and count.

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
#: (stopped before it finished: timeout, interrupted, kernel_died, unknown).
SkipReason = Literal["empty", "never_ran", "recorded_failure", "own_rerun"]

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


def plan(nb: dict[str, Any]) -> list[CellPlan]:
    """Every code cell of ``nb`` (a notebook :func:`notebook_problem` accepts), in order,
    with whether it is re-run (module docstring)."""
    own = own_source(nb)
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


def _interp_meta(node: dict[str, Any]) -> dict[str, Any]:
    meta = (node.get("metadata") or {}).get("interp") or {}
    return meta if isinstance(meta, dict) else {}
