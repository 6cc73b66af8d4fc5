"""A recorded cell that nbformat refuses is repaired, never dropped, and the session goes on.

The recorder builds outputs that nbformat accepts (``tests/unit/test_message_fuzz.py``
feeds it kernel messages of every shape). This is the guard behind it: a save that finds
a cell invalid would otherwise leave the notebook unwritable, and the session would
refuse all further work (docs/security.md R-12) for an output it could have kept.

So each output of the cell that cannot be stored (nbformat refuses it, or it holds NaN, an
infinity or a lone surrogate, which the file's strict UTF-8 JSON cannot carry) is replaced
by a ``stderr`` stream output saying so, and the original is kept as JSON text in the
cell's ``metadata.interp`` under :data:`KEPT`, with its index and the problem. Nothing is
lost and the file stays valid.
The cell's audit digest covers the original outputs; :func:`original_outputs` puts them
back, so ``interp audit verify`` checks them (``interpreter/audit_verify.py``).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import nbformat

#: Where a repaired cell keeps the outputs it could not store.
KEPT = "unrepresentable_outputs"


def problem_of(cell: Any) -> str | None:
    """Why ``cell`` cannot be written to a notebook, or None when it can."""
    try:
        json.dumps(cell, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:  # NaN, infinity; a lone surrogate
        return f"not storable as JSON in UTF-8 ({exc})"
    probe = nbformat.from_dict(  # type: ignore[no-untyped-call]
        {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [copy.deepcopy(cell)]}
    )
    try:
        nbformat.validate(probe)
    except nbformat.ValidationError as exc:
        return str(exc.message)
    return None


def repair_cell(cell: Any) -> bool:
    """Make ``cell`` storable in place, keeping what it cannot store; whether it changed.

    A result number that is not a count is cleared (and kept), then outputs are repaired
    one by one. A cell still not storable after that is left so (the save then fails).
    """
    if problem_of(cell) is None:
        return False
    outputs = cell.get("outputs")
    if cell.get("cell_type") != "code" or not isinstance(outputs, list):
        return False
    meta = cell.get("metadata")
    if not isinstance(meta, dict):
        return False
    interp = meta.setdefault("interp", {})
    if not isinstance(interp, dict):
        return False
    changed = False
    count = cell.get("execution_count")
    if not (count is None or (type(count) is int and count >= 0)):
        interp["unrepresentable_execution_count"] = json.dumps(count, default=repr)
        cell["execution_count"] = None
        changed = True
    kept: list[dict[str, Any]] = list(interp.get(KEPT) or [])
    for index, output in enumerate(outputs):
        problem = problem_of(_bare_cell(output))
        if problem is None:
            continue
        kind = output.get("output_type") if isinstance(output, dict) else None
        kept.append(
            {
                "index": index,
                "problem": problem[:500].encode("utf-8", "replace").decode("utf-8"),
                "output_json": json.dumps(output, default=repr),
            }
        )
        outputs[index] = nbformat.from_dict(  # type: ignore[no-untyped-call]
            {
                "output_type": "stream",
                "name": "stderr",
                "text": (
                    f"[interp] output {index} ({kind if isinstance(kind, str) else 'unknown'})"
                    " cannot be stored in a notebook; it is kept as JSON in this cell's"
                    f" metadata.interp.{KEPT}.\n"
                ),
            }
        )
        changed = True
    if kept:
        interp[KEPT] = kept
    return changed


def _bare_cell(output: Any) -> dict[str, Any]:
    """A minimal valid code cell holding ``output`` alone (to judge that output)."""
    return {
        "cell_type": "code",
        "id": "probe",
        "metadata": {},
        "execution_count": None,
        "source": "",
        "outputs": [output],
    }


def original_outputs(cell: dict[str, Any]) -> list[Any]:
    """The outputs ``cell`` was recorded with: a repaired cell's kept ones put back."""
    outputs = list(cell.get("outputs") or [])
    meta = cell.get("metadata")
    interp = meta.get("interp") if isinstance(meta, dict) else None
    kept = interp.get(KEPT) if isinstance(interp, dict) else None
    for entry in kept if isinstance(kept, list) else []:
        if not isinstance(entry, dict):
            continue
        index, text = entry.get("index"), entry.get("output_json")
        if type(index) is int and 0 <= index < len(outputs) and isinstance(text, str):
            try:
                outputs[index] = json.loads(text)
            except ValueError:
                continue
    return outputs
