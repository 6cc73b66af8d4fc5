"""A session notebook's output budget: rich values past it are left out of the notebook.

Every notebook cell holds its outputs whole, and the broker keeps the session's notebook
in memory (and its serialised cells, for the next save), so without a bound a session
that displays values in every cell grows the broker and the ``.ipynb`` file by as much
per cell. ``max_notebook_bytes`` bounds it: once the notebook's outputs reach the budget,
a rich output whose values do not fit is written to the notebook *set aside*
(:func:`budget_form`): its values are left out, and its ``text/plain`` starts with a note
that names each one and says why, so that a reader of the ``.ipynb`` (JupyterLab shows
the note) knows what is missing and where it is. A value stored as an artifact (one
larger than ``inline_rich_bytes``, an image of any size) is named by its artifact, which
holds it whole; a small value that is no artifact is named by its type and size, and the
cell's execution record (``GET /v1/sessions/{id}/executions/{eid}``, the execution id in
the cell's metadata) holds it: small values used to be always kept, and a cell of 2,000
displays of 63 KB each added 64 MB to the notebook past its budget, per cell. A
``text/plain`` of at most :data:`PLAIN_KEPT` characters that is no artifact follows the
note. The API's output is as before. The output's ``metadata.interp`` says the same for
programs (:func:`set_aside_form`, :func:`recorded_form`):

``{"set_aside": [{"mime", "id", "url", "size"}], "left_out": [{"mime", "size"}],
"note_chars": N, "text_plain": T}``

where ``left_out`` (only when there are such values) lists the small values that are no
artifacts, ``N`` is the length of the note at the start of ``text/plain`` and ``T`` is
``"prefixed"`` (the output's own ``text/plain`` follows the note; a notebook written
before small values counted may have it cut to its head and tail, as the API has it)
or ``"added"`` (it had none, or it is left out too).

The budget counts the characters of the outputs of every cell (streams, values and
their metadata, errors) as :func:`outputs_size` measures them (bytes for ASCII text such
as base64); an output's values are kept only if all of them fit, so a reader never sees
a lesser form of an output shown as if it were whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The key of the broker's own entry in a set-aside output's metadata.
META_KEY = "interp"
#: Why a value was left out, as the note says it.
REASON = "max_notebook_bytes"
#: Characters of a ``text/plain`` that is no artifact an output past the budget keeps
#: after its note (a longer one is left out, as the other values are).
PLAIN_KEPT = 1000


def value_size(value: object) -> int:
    """The size of a MIME value as the API would send it (characters of its JSON form)."""
    return len(value) if isinstance(value, str) else len(json.dumps(value))


def _text_size(value: object) -> int:
    """Characters of a notebook text field (a string, or nbformat's list of lines)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(len(v) for v in value if isinstance(v, str))
    return 0


def outputs_size(outputs: Iterable[Mapping[str, Any]]) -> int:
    """Characters of a cell's outputs: stream text, MIME values and their metadata, and
    error text."""
    size = 0
    for output in outputs:
        size += _text_size(output.get("text"))
        data = output.get("data")
        if isinstance(data, Mapping):
            size += sum(value_size(v) for v in data.values())
        metadata = output.get("metadata")
        if isinstance(metadata, Mapping) and metadata:
            size += value_size(metadata)
        size += _text_size(output.get("evalue")) + _text_size(output.get("traceback"))
    return size


@dataclass(frozen=True)
class SetAside:
    """One value left out of a notebook output: its MIME type and its artifact (id, URL
    and size in bytes, as the execution's record has them)."""

    mime: str
    size: int
    id: str
    url: str

    @classmethod
    def of(cls, mime: str, ref: Any) -> SetAside:
        """The entry of the value of type ``mime`` stored as ``ref`` (an ArtifactRef)."""
        return cls(mime, ref.size, ref.id, ref.url)

    def as_json(self) -> dict[str, Any]:
        return {"mime": self.mime, "size": self.size, "id": self.id, "url": self.url}


@dataclass(frozen=True)
class LeftOut:
    """A small value left out of a notebook output that is no artifact: its MIME type and
    its size in characters (the cell's execution record holds it)."""

    mime: str
    size: int

    def as_json(self) -> dict[str, Any]:
        return {"mime": self.mime, "size": self.size}


def note(values: Sequence[SetAside], left_out: Sequence[LeftOut] = ()) -> str:
    """The text a set-aside output's ``text/plain`` starts with."""
    head = f"[Not in this notebook, which reached its output budget ({REASON});"
    lines = []
    if values:
        lines.append(f"{head} kept whole as artifacts of this session:")
        lines += [f"  {v.mime}, {v.size} bytes: {v.url}" for v in values]
    if left_out:
        where = (
            "kept only in this cell's execution record "
            "(GET /v1/sessions/{id}/executions/{eid}, eid the cell's execution_id):"
        )
        lines.append(f"and {where}" if values else f"{head} {where}")
        lines += [f"  {v.mime}, {v.size} characters" for v in left_out]
    return "\n".join(lines) + "]\n"


def set_aside_form(
    output: Mapping[str, Any],
    values: Sequence[SetAside],
    plain: str | None,
    left_out: Sequence[LeftOut] = (),
) -> dict[str, Any]:
    """``output`` (nbformat) with ``values`` and ``left_out`` left out and the note in
    front of its ``text/plain``. ``plain`` is the ``text/plain`` to keep after the note,
    None when the output has none or it is left out."""
    gone = {v.mime for v in values} | {v.mime for v in left_out} | {"text/plain"}
    data = {m: v for m, v in output.get("data", {}).items() if m not in gone}
    text = note(values, left_out)
    data["text/plain"] = text + (plain or "")
    metadata = dict(output.get("metadata") or {})
    entry: dict[str, Any] = {"set_aside": [v.as_json() for v in values]}
    if left_out:
        entry["left_out"] = [v.as_json() for v in left_out]
    entry["note_chars"] = len(text)
    entry["text_plain"] = "added" if plain is None else "prefixed"
    metadata[META_KEY] = entry
    return {**output, "data": data, "metadata": metadata}


def budget_form(
    output: Mapping[str, Any], artifacts: Mapping[str, SetAside]
) -> tuple[int, dict[str, Any] | None]:
    """The characters of ``output``'s values and its set-aside form (None when it would
    leave nothing out), given the artifacts that hold its values by MIME type: each of
    those is named; every other value is left out too, but a ``text/plain`` of at most
    :data:`PLAIN_KEPT` characters, which follows the note. One rule for the broker
    (``OutputCapture``) and for cells written back from the store (``restore_cells``),
    which must give the digest the audit chain recorded."""
    data = output.get("data") or {}
    sizes = {mime: value_size(value) for mime, value in data.items()}
    plain = data.get("text/plain")
    keeps_plain = (
        plain is not None and "text/plain" not in artifacts and sizes["text/plain"] <= PLAIN_KEPT
    )
    # In the artifacts' order (the API's), which a cell written back from the store has too.
    values = [value for mime, value in artifacts.items() if mime in data]
    left_out = [
        LeftOut(mime, sizes[mime])
        for mime in data
        if mime not in artifacts and not (mime == "text/plain" and keeps_plain)
    ]
    size = sum(sizes.values())
    if not values and not left_out:
        return size, None
    kept = plain if isinstance(plain, str) and keeps_plain else None
    return size, set_aside_form(output, values, kept, left_out)


def recorded_form(output: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The MIME bundle of a notebook output as the kernel showed it, as far as the
    notebook has it, and the MIME types set aside from it (their values are only in
    artifacts): the note is taken off ``text/plain`` again (which is dropped when the
    broker added it). An output that was not set aside comes back as it is."""
    data = dict(output.get("data") or {})
    metadata = output.get("metadata")
    entry = metadata.get(META_KEY) if isinstance(metadata, Mapping) else None
    if not isinstance(entry, Mapping) or not isinstance(entry.get("set_aside"), list):
        return data, []
    left_out = entry.get("left_out")
    gone = entry["set_aside"] + (left_out if isinstance(left_out, list) else [])
    mimes = [v.get("mime") for v in gone if isinstance(v, Mapping)]
    # A text/plain that follows the note is its own (or, from an older broker, its cut
    # form): compared as it is, not as a value left out.
    prefixed = entry.get("text_plain") != "added"
    chars = entry.get("note_chars")
    plain = data.get("text/plain")
    if isinstance(plain, list):
        plain = "".join(p for p in plain if isinstance(p, str))
    if isinstance(plain, str) and isinstance(chars, int) and 0 < chars <= len(plain):
        if entry.get("text_plain") == "added":
            data.pop("text/plain")
        else:
            data["text/plain"] = plain[chars:]
    return data, [m for m in mimes if isinstance(m, str) and not (prefixed and m == "text/plain")]


class NotebookBudget:
    """How much output one session's notebook holds, cell by cell, against its limit.

    Args:
        limit: ``max_notebook_bytes``; 0 for no budget.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: Size of each recorded cell's outputs, by the execution it records.
        self._cells: dict[str, int] = {}
        self.total = 0

    def load(self, cells: Iterable[Mapping[str, Any]]) -> None:
        """Count the cells of a notebook read back from its file (a restarted broker)."""
        for n, cell in enumerate(cells):
            meta = (cell.get("metadata") or {}).get(META_KEY)
            eid = meta.get("execution_id") if isinstance(meta, Mapping) else None
            key = eid if isinstance(eid, str) else f"#{n}"
            self.record(key, cell.get("outputs") or [])

    def fits(self, execution_id: str, size: int) -> bool:
        """Whether ``size`` more characters in the cell of ``execution_id`` (beyond what
        it held when last recorded) keep the notebook within the budget."""
        if not self.limit:
            return True
        return self.total - self._cells.get(execution_id, 0) + size <= self.limit

    def record(self, execution_id: str, outputs: Iterable[Mapping[str, Any]]) -> None:
        """The cell of ``execution_id`` now holds ``outputs`` (replacing what it held)."""
        size = outputs_size(outputs)
        self.total += size - self._cells.get(execution_id, 0)
        self._cells[execution_id] = size
