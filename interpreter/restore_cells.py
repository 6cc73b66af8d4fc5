"""Cells the store has and the notebook file lacks, written back after a broker restart.

The notebook file follows the session's record in the background (saves are paced), so a
broker killed right after a cell can leave the file a cell or two behind SQLite, which
has every finished execution before its client is answered. When a restarted broker
loads a session's notebook (to reattach it, or to close it), it appends those cells from
the store: code, streams, rich outputs (images read back from their artifacts) and the
error, marked ``restored_from: "store"``, in the order the earlier broker wrote them: the
store keeps that order (:func:`layout_of`) beside each execution. Past the session's output budget
(:mod:`interpreter.notebook_budget`) values are written back set aside, as the
earlier broker wrote them: the restored cell then gives the digest the chain recorded.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from interpreter import endings
from interpreter.audit import cell_digest
from interpreter.mime import BINARY_MIMES
from interpreter.models import TERMINAL_STATUSES, Execution, Output
from interpreter.notebook import NOTE_KEY, NotebookRecorder
from interpreter.notebook_budget import NotebookBudget, SetAside, budget_form
from interpreter.notes import commented_rerun
from interpreter.store import in_flight


def missing(recorder: NotebookRecorder, executions: list[Execution]) -> list[Execution]:
    """The finished executions (in order) that ran and have no cell in the notebook.

    Not written here: a cell that never reached the kernel (no ``started_at``: cancelled,
    denied, or whatever status an older broker gave a cancelled one), which never has a
    cell; and one still in flight (``unknown`` without a duration), which recovery writes
    once it is settled (:func:`~interpreter.store.in_flight`). An ``unknown`` cell that a
    restarted broker did settle is written back like any other.
    """
    present = {c.metadata.get("interp", {}).get("execution_id") for c in recorder.nb.cells}
    return [
        ex
        for ex in executions
        if ex.id not in present
        and ex.status in TERMINAL_STATUSES
        and ex.status not in ("cancelled", "denied")
        and ex.started_at is not None
        and not in_flight(ex)
    ]


def restore(
    recorder: NotebookRecorder,
    executions: list[Execution],
    artifacts: Path,
    digests: dict[str, str] | None = None,
    *,
    inline_bytes: int = 0,
    notebook_bytes: int = 0,
    layouts: dict[str, str] | None = None,
    chained: set[str] | None = None,
    notes: list[dict[str, Any]] | None = None,
) -> int:
    """Append a cell for each execution of :func:`missing`; returns how many.

    ``digests`` (:meth:`~interpreter.store.Store.cell_digests`) tell a recovery's re-run
    cell, which its broker wrote commented out: when the recorded digest is that of the
    commented form, the cell is written back so, and verifies. With ``notebook_bytes``
    (``max_notebook_bytes``) and ``inline_bytes`` (``inline_rich_bytes``), values past
    the notebook's budget are set aside as the broker sets them aside; a cell whose
    recorded digest is that of its whole outputs is written back whole. ``layouts``
    (:meth:`~interpreter.store.Store.cell_layouts`) give the order of each cell's outputs.
    ``chained`` (:meth:`~interpreter.store.Store.chained`), when given, are the executions
    with a chain link: only their cells get a digest (an execution of a broker from before
    the chain has none, and a digest without a link reads as a stripped link).
    ``notes`` (:meth:`~interpreter.store.Store.notes_of`), the session's chained notes:
    those the file lacks are written back too, each after the cell it followed.
    """
    added = missing(recorder, executions)
    lost = missing_notes(recorder, notes or [])
    after_restored = {ex.id for ex in added}
    for note in lost:
        if note.get("after") not in after_restored:
            _add_note(recorder, note)  # it followed a cell the file has: it comes first
    budget = NotebookBudget(notebook_bytes if inline_bytes else 0)
    if budget.limit and added:
        budget.load(recorder.nb.cells)
    for ex in added:
        layout = layouts.get(ex.id) if layouts else None
        outputs = outputs_of(ex, artifacts, layout)
        recorded = digests.get(ex.id) if digests else None
        if (
            recorded is not None
            and endings.said_by_broker(ex.status, ex.reason, ex.error)
            and recorded not in _digests(ex, outputs, inline_bytes, budget)
        ):
            # Recorded by a broker from before the broker's line (interpreter/endings.py):
            # written back as that broker wrote it, which the chain has the digest of.
            older = outputs_of(ex, artifacts, layout, older=True)
            if recorded in _digests(ex, older, inline_bytes, budget):
                outputs = older
        if budget.limit:
            kept = within_budget(outputs, ex, inline_bytes, budget)
            if recorded not in (
                cell_digest(ex.code, outputs),
                cell_digest(commented_rerun(ex.code), outputs),
            ):
                outputs = kept
            budget.record(ex.id, outputs)
        source = ex.code
        rerun = commented_rerun(ex.code)
        if recorded == cell_digest(rerun, outputs):
            source = rerun
        recorder.add_cell(
            source,
            outputs,
            execution_id=ex.id,
            execution_count=ex.execution_count,
            status=ex.status,
            started_at=ex.started_at,
            duration_ms=ex.duration_ms,
            state_lost=ex.state_lost,
            reason=ex.reason,
            # Its digest as written: `interp audit verify` matches it against the chain,
            # which holds the digest of the cell the earlier broker wrote (an exact
            # restoration verifies; one that differs is reported as such, not as missing).
            extra={"restored_from": "store"}
            if chained is not None and ex.id not in chained
            else {"restored_from": "store", "audit_sha256": cell_digest(source, outputs)},
        )
        for note in lost:
            if note.get("after") == ex.id:
                _add_note(recorder, note)
    return len(added) + len(lost)


def missing_notes(recorder: NotebookRecorder, notes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chained ``notes`` that have no cell in the notebook, in order.

    The file is a prefix of what the broker wrote (cells are only ever appended), so they
    are the last of them: each goes back after the cell it followed, which is either in
    the file (the note then comes before any cell written back) or written back too."""
    present = {
        c.metadata.get("interp", {}).get(NOTE_KEY)
        for c in recorder.nb.cells
        if c.get("cell_type") == "markdown"
    }
    return [n for n in notes if isinstance(n.get("n"), int) and n["n"] not in present]


def _add_note(recorder: NotebookRecorder, note: dict[str, Any]) -> None:
    event = note.get("event")
    meta = {**(event if isinstance(event, dict) else {}), NOTE_KEY: note["n"]}
    recorder.add_markdown(str(note.get("text", "")), meta)


def _digests(
    ex: Execution, outputs: list[dict[str, Any]], inline_bytes: int, budget: NotebookBudget
) -> set[str]:
    """The digests a cell of ``ex`` with ``outputs`` may have been recorded with: its code
    as it ran or as a recovery's re-run writes it, its outputs whole or within ``budget``."""
    forms = [outputs]
    if budget.limit:
        forms.append(within_budget(outputs, ex, inline_bytes, budget))
    return {
        cell_digest(source, form)
        for source in (ex.code, commented_rerun(ex.code))
        for form in forms
    }


def layout_of(outputs: list[dict[str, Any]]) -> str:
    """The order of a cell's notebook outputs, as the store keeps it: ``"o"`` for each
    rich output (the execution's next one), ``"e"`` for the error, and ``[name, length]``
    for each stream output (its text's length in characters)."""
    items: list[Any] = []
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            items.append([out.get("name"), len(out.get("text", ""))])
        else:
            items.append("e" if kind == "error" else "o")
    return json.dumps(items, separators=(",", ":"))


def _stream_parts(ex: Execution, layout: str | None, errors_in: int) -> list[Any] | None:
    """``layout`` if it fits ``ex``: its outputs, ``errors_in`` error outputs and stream
    texts (not cut, nor rewritten by ``\\r``) are what the layout counts; else None."""
    if layout is None:
        return None
    try:
        items = json.loads(layout)
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    lengths = {"stdout": 0, "stderr": 0}
    rich = errors = 0
    for item in items:
        if item == "o":
            rich += 1
        elif item == "e":
            errors += 1
        elif (
            isinstance(item, list)
            and len(item) == 2
            and item[0] in lengths
            and isinstance(item[1], int)
            and item[1] >= 0
        ):
            lengths[item[0]] += item[1]
        else:
            return None
    fits = (
        rich == len(ex.outputs)
        and errors == errors_in
        and lengths == {"stdout": len(ex.stdout), "stderr": len(ex.stderr)}
    )
    return items if fits else None


def outputs_of(
    ex: Execution, artifacts: Path, layout: str | None = None, *, older: bool = False
) -> list[dict[str, Any]]:
    """An execution's outputs in notebook form, as well as the record allows (streams are
    kept whole only up to what the record holds): in ``layout``'s order when it fits the
    record (:func:`layout_of`), else streams first, then rich outputs, then the error.
    A cell the broker ended ends with its error as :mod:`interpreter.endings` writes it
    (with ``older``, as brokers before it did)."""
    rich = [_rich_output(ex, out, artifacts) for out in ex.outputs]
    error = _error_output(ex, older)
    items = _stream_parts(ex, layout, int(error is not None))
    if items is None:
        streams = [
            {"output_type": "stream", "name": name, "text": getattr(ex, name)}
            for name in ("stdout", "stderr")
            if getattr(ex, name)
        ]
        return streams + rich + ([error] if error is not None else [])
    outputs: list[dict[str, Any]] = []
    taken = {"stdout": 0, "stderr": 0}
    next_rich = iter(rich)
    for item in items:
        if item == "o":
            outputs.append(next(next_rich))
        elif item == "e" and error is not None:
            outputs.append(error)
        elif isinstance(item, list):
            name, length = item
            start = taken[name]
            taken[name] = start + length
            text = getattr(ex, name)[start : start + length]
            outputs.append({"output_type": "stream", "name": name, "text": text})
    return outputs


def _rich_output(ex: Execution, out: Output, artifacts: Path) -> dict[str, Any]:
    data = dict(out.data)
    for ref in out.artifacts:
        if ref.mime in data:
            continue
        value = _artifact_value(artifacts / ref.id, ref.mime)
        if value is not None:
            data[ref.mime] = value
    item: dict[str, Any] = {"output_type": out.type, "data": data, "metadata": out.metadata}
    if out.type == "execute_result":
        item["execution_count"] = ex.execution_count
    return item


def _error_output(ex: Execution, older: bool = False) -> dict[str, Any] | None:
    if ex.error is None:
        return None
    if endings.said_by_broker(ex.status, ex.reason, ex.error):
        return endings.older_error_output(ex) if older else endings.error_output(ex.error)
    return {
        "output_type": "error",
        "ename": ex.error.ename,
        "evalue": ex.error.evalue,
        "traceback": list(ex.error.traceback),
    }


def within_budget(
    outputs: list[dict[str, Any]], ex: Execution, inline_bytes: int, budget: NotebookBudget
) -> list[dict[str, Any]]:
    """``outputs`` (from :func:`outputs_of`) with the values that do not fit in ``budget``
    set aside, as ``OutputCapture`` sets them aside (all of an output's or none, by
    :func:`~interpreter.notebook_budget.budget_form`: every value counts, whatever its
    size, so ``inline_bytes`` no longer decides which)."""
    rich = iter(ex.outputs)
    result: list[dict[str, Any]] = []
    kept = 0
    for output in outputs:
        if output["output_type"] not in ("display_data", "execute_result"):
            result.append(output)
            continue
        refs = next(rich).artifacts
        data = output["data"]
        artifacts = {ref.mime: SetAside.of(ref.mime, ref) for ref in refs if ref.mime in data}
        size, form = budget_form(output, artifacts)
        if form is None or budget.fits(ex.id, kept + size):
            kept += size
            result.append(output)
            continue
        result.append(form)
    return result


def _artifact_value(path: Path, mime: str) -> Any:
    """An artifact as a notebook output value: base64 for binary data, parsed JSON for
    JSON types, text otherwise; None when it cannot be read."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    if mime in BINARY_MIMES:
        return base64.b64encode(raw).decode("ascii")
    text = raw.decode("utf-8", "replace")
    if mime == "application/json" or mime.endswith("+json"):
        try:
            return json.loads(text)
        except ValueError:
            return None
    return text
