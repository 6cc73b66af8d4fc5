"""A session notebook's output budget: big rich values past it are kept only as artifacts.

Every notebook cell holds its outputs whole, and the broker keeps the session's notebook
in memory (and its serialised cells, for the next save), so without a bound a session
that displays a few large values per cell grows the broker and the ``.ipynb`` file by as
much per cell. ``max_notebook_bytes`` bounds it: once the notebook's outputs reach the
budget, a rich output whose large values (those above ``inline_rich_bytes``, which are
artifacts already) do not fit is written to the notebook *set aside*: those values are
left out, and its ``text/plain`` starts with a note that names each one's artifact and
says why, so that a reader of the ``.ipynb`` (JupyterLab shows the note) knows what is
missing and where it is. Nothing is lost: the artifact holds the value, and the API's
output lists it as before. The output's ``metadata.interp`` says the same for programs
(:func:`set_aside_form`, :func:`recorded_form`):

``{"set_aside": [{"mime", "id", "url", "size"}], "note_chars": N, "text_plain": T}``

where ``N`` is the length of the note at the start of ``text/plain`` and ``T`` is
``"prefixed"`` (the output had a ``text/plain``, which follows the note; cut to its head
and tail when it was large itself, as the API has it) or ``"added"`` (it had none).

The budget counts the characters of the outputs of every cell (streams, values and
their metadata, errors) as :func:`outputs_size` measures them (bytes for ASCII text such
as base64); an output's large values are kept only if all of them fit, so a reader never
sees a lesser form of an output shown as if it were whole. Small values are always kept
(they are no artifacts).
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


def note(values: Sequence[SetAside]) -> str:
    """The text a set-aside output's ``text/plain`` starts with."""
    lines = [
        f"[Not in this notebook, which reached its output budget ({REASON}); "
        "kept whole as artifacts of this session:"
    ]
    lines += [f"  {v.mime}, {v.size} bytes: {v.url}" for v in values]
    return "\n".join(lines) + "]\n"


def set_aside_form(
    output: Mapping[str, Any], values: Sequence[SetAside], plain: str | None
) -> dict[str, Any]:
    """``output`` (nbformat) with ``values`` left out and the note in front of its
    ``text/plain``. ``plain`` is the ``text/plain`` to keep after the note (its cut form
    when it is one of ``values``), None when the output has none."""
    gone = {v.mime for v in values}
    data = {m: v for m, v in output.get("data", {}).items() if m not in gone}
    text = note(values)
    data["text/plain"] = text + (plain or "")
    metadata = dict(output.get("metadata") or {})
    metadata[META_KEY] = {
        "set_aside": [v.as_json() for v in values],
        "note_chars": len(text),
        "text_plain": "added" if plain is None else "prefixed",
    }
    return {**output, "data": data, "metadata": metadata}


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
    mimes = [v.get("mime") for v in entry["set_aside"] if isinstance(v, Mapping)]
    chars = entry.get("note_chars")
    plain = data.get("text/plain")
    if isinstance(plain, list):
        plain = "".join(p for p in plain if isinstance(p, str))
    if isinstance(plain, str) and isinstance(chars, int) and 0 < chars <= len(plain):
        if entry.get("text_plain") == "added":
            data.pop("text/plain")
        else:
            data["text/plain"] = plain[chars:]
    return data, [m for m in mimes if isinstance(m, str) and m != "text/plain"]


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
