"""The live notebook of a session: every executed cell, written atomically after each one.

:class:`NotebookRecorder` builds the nbformat document; :class:`LiveNotebook` owns it on the
event loop: one lock serialises changes with saves, saves run in a thread and coalesce
when cells finish quickly, and a failed write marks the record degraded so that the
session refuses new work until the notebook can be written again (docs/security.md R-12).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import nbformat
from nbformat import v4
from nbformat.corpus.words import generate_corpus_id as random_cell_id
from nbformat.notebooknode import NotebookNode

from interpreter.audit import cell_digest
from interpreter.errors import NotebookNotFound
from interpreter.notebook_repair import KEPT, repair_cell
from interpreter.notes import commented_rerun

NOTEBOOK_NAME = "notebook.ipynb"
#: ``metadata.interp`` key of a note the service wrote: its number in the session's notes
#: chain (``interpreter/audit.py``).
NOTE_KEY = "audit_note"
#: When the file is written. A save rewrites the whole file (atomic replacement has no
#: cheaper form), so its cost grows with the notebook; saving after every cell would make
#: a long session's cells dearer than a new one's. So the file is saved once the changes
#: not yet in it reach ``SAVE_NEW_SHARE`` of its cells (at once for the first 20 cells,
#: after 50 new cells at 1,000), or once the oldest of them is ``SAVE_MAX_LAG_S`` old,
#: whichever comes first; a close, a shutdown or a copy of the session flushes at once.
#: Every execution is in the store before its id is given, and a crash puts the cells the
#: file had not reached back into it (``interpreter/restore_cells.py``): none is lost.
#: The API serves the notebook from memory, never behind.
SAVE_NEW_SHARE = 0.05
SAVE_MAX_LAG_S = 10.0
#: Saves are also paced: after a write that took ``d`` seconds the next one starts no
#: sooner than ``SAVE_PACE * d`` later (at least ``SAVE_MIN_DELAY_S``, at most
#: ``SAVE_MAX_DELAY_S``), so writes take at most 1/(1 + SAVE_PACE) of one core however
#: quickly cells come, and quick cells share one write and one fsync.
SAVE_PACE = 40.0
SAVE_MIN_DELAY_S = 0.05
SAVE_MAX_DELAY_S = 2.0
#: Buffers per ``writev`` call: the system's limit (1024 on Linux), 16 if it names none.
IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16
IOV_MAX = IOV_MAX if IOV_MAX > 0 else 16

log = logging.getLogger(__name__)


def prime_validator() -> None:
    """Build nbformat's validator for new notebooks now: its first use compiles the JSON
    schema (about 40 ms), which the first session's ``new_notebook`` otherwise did on the
    event loop. Call off the loop; later validations reuse it (nbformat caches it)."""
    nbformat.validator.get_validator(  # type: ignore[no-untyped-call]
        version=v4.nbformat, version_minor=v4.nbformat_minor
    )


def enough_to_save(pending: int, saved_cells: int) -> bool:
    """Whether ``pending`` changes are enough to rewrite a file of ``saved_cells`` cells
    now rather than when the oldest of them is ``SAVE_MAX_LAG_S`` old."""
    return pending >= max(1.0, SAVE_NEW_SHARE * saved_cells)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never a mix."""
    atomic_write_parts(path, [text])


def atomic_write_parts(path: Path, parts: Sequence[str | bytes]) -> os.stat_result:
    """:func:`atomic_write_text` of the parts joined (text as UTF-8), without building the
    whole text: written with ``writev``, a few system calls for the whole file.

    Returns the written file's status, taken before it is renamed into place (a rename
    keeps its inode, size and mtime): a ``stat`` of ``path`` afterwards could see a file
    someone else put there or fail when it was removed meanwhile, though this write
    succeeded."""
    chunks = [part.encode("utf-8") if isinstance(part, str) else part for part in parts]
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            _write_all(fd, chunks)
            os.fsync(fd)
            written = os.fstat(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return written


def _write_all(fd: int, chunks: list[bytes]) -> None:
    """Write every chunk, in order, ``IOV_MAX`` at a time; a short write is completed."""
    for start in range(0, len(chunks), IOV_MAX):
        batch = chunks[start : start + IOV_MAX]
        written = os.writev(fd, batch)
        if written < sum(len(chunk) for chunk in batch):
            rest = memoryview(b"".join(batch))[written:]
            while rest:
                rest = rest[os.write(fd, rest) :]


def set_aside(path: Path) -> Path | None:
    """Keep an unreadable notebook as ``<name>.corrupt-<time>`` (evidence, never overwritten);
    the new path, or None when there is no file."""
    if not path.exists():
        return None
    kept = path.with_name(f"{path.name}.corrupt-{datetime.now():%Y%m%dT%H%M%S%f}")
    os.replace(path, kept)
    return kept


def read_notebook_file(path: Path, session_id: str) -> str:
    """The text of a closed session's notebook; a missing or damaged file is a clear 404."""
    try:
        text = path.read_text(encoding="utf-8")
        if not isinstance(json.loads(text), dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        raise NotebookNotFound(
            f"Session '{session_id}' has no notebook file (it was removed on disk)."
        ) from None
    except ValueError as exc:  # also UnicodeDecodeError, json.JSONDecodeError
        log.warning("notebook %s is damaged: %s", path, exc)
        raise NotebookNotFound(
            f"The notebook file of session '{session_id}' is damaged ({type(exc).__name__}); "
            "its executions are still readable one by one."
        ) from None
    return text


class NotebookRecorder:
    """Builds and saves the nbformat v4 notebook of one session.

    Mutations happen on the event loop; ``save`` (serialise + atomic write) runs in a thread.
    The session serialises the two with a lock, so a save never sees a half-made cell.
    """

    def __init__(self, path: Path, nb: nbformat.NotebookNode) -> None:
        self.path = path
        self.nb = nb
        #: Cells before this index have been validated; later ones are new.
        self._validated = 0
        #: Validated cells changed in place since (late output), keyed by ``id(cell)``:
        #: validated again at the next save.
        self._changed: dict[int, Any] = {}
        #: Cells repaired because nbformat refused them (:mod:`interpreter.notebook_repair`).
        self.repaired_cells = 0
        #: (inode, size, mtime) of the file as last written; None before the first write.
        self._written: tuple[int, int, int] | None = None
        #: Serialised JSON of each recorded cell, as UTF-8, keyed by ``id(cell)`` (with the
        #: cell kept to make the key safe): a cell is serialised and encoded once, not
        #: again at every save.
        self._cell_json: dict[int, tuple[Any, bytes]] = {}
        #: Bytes of cell JSON produced by ``json.dumps`` so far (the regression guard's count;
        #: each cell once, unless changed in place).
        self.serialised_cell_bytes = 0

    @classmethod
    def create(
        cls,
        path: Path,
        *,
        session_id: str,
        kernel_name: str,
        backend: str,
        source: dict[str, Any] | None = None,
    ) -> NotebookRecorder:
        nb = v4.new_notebook()  # type: ignore[no-untyped-call]
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        nb.metadata["language_info"] = {"name": "python"}
        nb.metadata["interp"] = {
            "session_id": session_id,
            "backend": backend,
            "kernel_name": kernel_name,
            "kernel_version": None,
            "source": source,
        }
        return cls(path, nb)

    @classmethod
    def load(cls, path: Path) -> NotebookRecorder:
        with open(path, encoding="utf-8") as fh:
            nb = nbformat.read(fh, as_version=4)  # type: ignore[no-untyped-call]
            st = os.fstat(fh.fileno())
        recorder = cls(path, nb)
        recorder._written = (st.st_ino, st.st_size, st.st_mtime_ns)
        return recorder

    def set_kernel_info(self, language_info: dict[str, Any], packages: dict[str, str]) -> None:
        if language_info:
            self.nb.metadata["language_info"] = {
                k: v
                for k, v in language_info.items()
                if k
                in (
                    "name",
                    "version",
                    "mimetype",
                    "file_extension",
                    "pygments_lexer",
                    "codemirror_mode",
                    "nbconvert_exporter",
                )
            }
        meta = self.nb.metadata["interp"]
        meta["kernel_version"] = language_info.get("version")
        if packages:
            meta["packages"] = packages

    def add_cell(
        self,
        code: str,
        outputs: list[dict[str, Any]],
        *,
        execution_id: str,
        execution_count: int | None,
        status: str,
        started_at: datetime | None,
        duration_ms: float | None,
        state_lost: bool,
        reason: str | None,
        extra: dict[str, Any] | None = None,
        timing: dict[str, str] | None = None,
    ) -> int:
        """Append one executed cell; returns its index. Its source is
        :meth:`source_of` ``code``; ``timing`` is JupyterLab's ``metadata.execution``
        (message times)."""
        code = self.source_of(code, extra)
        # Built as nbformat's new_code_cell builds it, without its validation of each new
        # cell on the event loop: the cell is validated with the others at the next save.
        cell = NotebookNode(  # type: ignore[no-untyped-call]
            id=random_cell_id(),  # type: ignore[no-untyped-call]
            cell_type="code",
            metadata=NotebookNode(),  # type: ignore[no-untyped-call]
            execution_count=None,
            source=code,
            outputs=[],
        )
        if timing:
            cell.metadata["execution"] = dict(timing)
        cell.execution_count = execution_count
        cell.outputs = [nbformat.from_dict(o) for o in outputs]  # type: ignore[no-untyped-call]
        meta: dict[str, Any] = {
            "execution_id": execution_id,
            "status": status,
            "started_at": started_at.isoformat() if started_at else None,
            "duration_ms": duration_ms,
            "state_lost": state_lost,
        }
        if reason:
            meta["reason"] = reason
        if extra:
            meta.update(extra)
        cell.metadata["interp"] = meta
        self.nb.cells.append(cell)
        return len(self.nb.cells) - 1

    def source_of(self, code: str, extra: dict[str, Any] | None) -> str:
        """The source :meth:`add_cell` writes for ``code`` with metadata ``extra``: a
        recovery's re-run of this session's own cell commented out
        (:mod:`interpreter.notes`), any other cell as it is."""
        own = f"session:{self.nb.metadata.get('interp', {}).get('session_id')}"
        if extra and extra.get("replay_source") == own:
            return commented_rerun(code)
        return code

    def add_markdown(self, text: str, event: dict[str, Any] | None = None) -> int:
        """Append a markdown cell (a note between cells); returns its index. ``event``
        (:func:`interpreter.cells.note_event`) is its ``metadata.interp``: what a later
        rebuild reads to know where the kernel's state was cleared
        (:func:`interpreter.cells.state_start`)."""
        cell = v4.new_markdown_cell(source=text)  # type: ignore[no-untyped-call]
        if event is not None:
            cell.metadata["interp"] = dict(event)
        self.nb.cells.append(cell)
        return len(self.nb.cells) - 1

    def last_execution_id(self) -> str | None:
        """The execution of the last code cell that has one (what a note added now
        follows), or None."""
        for cell in reversed(self.nb.cells):
            eid = _execution_id(cell) if cell.get("cell_type") == "code" else None
            if isinstance(eid, str):
                return eid
        return None

    def cell_changed(self, cell: Any) -> None:
        """Forget the cached JSON of ``cell`` and validate it again at the next save: call
        after changing a recorded cell in place."""
        self._cell_json.pop(id(cell), None)
        self._changed[id(cell)] = cell

    @staticmethod
    def _dumps(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)

    def _cell_bytes(self, cell: Any) -> bytes:
        cached = self._cell_json.get(id(cell))
        if cached is not None and cached[0] is cell:
            return cached[1]
        text = self._dumps(cell)
        data = text.encode("utf-8")  # raises for a lone surrogate, before the write would
        self.serialised_cell_bytes += len(text)
        self._cell_json[id(cell)] = (cell, data)
        return data

    def to_json(self) -> str:
        """The whole notebook as compact JSON (the same text as ``json.dumps(self.nb)``)."""
        return b"".join(self.parts()).decode("utf-8")

    def parts(self) -> list[bytes]:
        """The notebook's JSON text, as UTF-8, in pieces (joined, the same as
        ``json.dumps(self.nb)``).

        Cells are serialised and encoded once and their bytes reused, so this costs the
        header plus the new cells, not the whole (ever-growing) notebook again; the pieces
        are immutable, so they can be written out after the document has moved on.
        Compact: with ``indent`` json falls back to its pure-Python encoder, ~4x slower.
        """
        cells = self.nb.cells
        if len(self._cell_json) > len(cells):
            live = {id(c) for c in cells}
            self._cell_json = {k: v for k, v in self._cell_json.items() if k in live}
        out = [b"{"]
        for i, (key, value) in enumerate(self.nb.items()):
            out.append(((", " if i else "") + self._dumps(key) + ": ").encode("utf-8"))
            if key == "cells":
                out.append(b"[")
                for j, cell in enumerate(cells):
                    if j:
                        out.append(b", ")
                    out.append(self._cell_bytes(cell))
                out.append(b"]")
            else:
                out.append(self._dumps(value).encode("utf-8"))
        out.append(b"}\n")
        return out

    def save(self) -> None:
        """Validate what is new and write atomically (blocking: not on the event loop)."""
        self.write(self.serialise())

    def serialise(self) -> list[bytes]:
        """Validate what is new and return the text to write, in pieces (:meth:`parts`).
        Runs under the session's notebook lock, so the loop does not mutate the notebook
        meanwhile; the write itself needs no lock.

        A new or changed cell that cannot be stored as recorded is repaired, its originals
        kept in its metadata (:mod:`interpreter.notebook_repair`); one that cannot be
        repaired raises, and the session's record is then degraded."""
        cells = self.nb.cells
        count = len(cells)
        # Validating the whole notebook each time grows with its size; recorded cells do
        # not change unless said so (``cell_changed``), so check the metadata, the new
        # cells and the changed ones only.
        fresh = cells[self._validated :]
        known = {id(c) for c in fresh}
        check = fresh + [c for k, c in self._changed.items() if k not in known]
        try:
            self._validate(check)
            parts = self.parts()
        except (nbformat.ValidationError, ValueError) as exc:
            repaired = [c for c in check if repair_cell(c)]
            if not repaired:
                raise
            for cell in repaired:
                self._cell_json.pop(id(cell), None)
            self.repaired_cells += len(repaired)
            log.error(
                "notebook %s: %d cell(s) could not be stored as recorded (%s); their outputs "
                "were replaced by a note and kept in metadata.interp",
                self.path,
                len(repaired),
                str(getattr(exc, "message", exc))[:200],
            )
            self._validate(check)
            parts = self.parts()
        self._validated = count
        self._changed.clear()
        return parts

    def _validate(self, cells: list[Any]) -> None:
        probe = nbformat.from_dict({**self.nb, "cells": cells})  # type: ignore[no-untyped-call]
        nbformat.validate(probe)

    def write(self, parts: list[bytes]) -> None:
        """Write ``parts`` (from :meth:`serialise`) atomically, noticing first whether the
        file was changed or removed outside the broker since its last write (blocking)."""
        self._check_untouched()
        st = atomic_write_parts(self.path, parts)
        self._written = (st.st_ino, st.st_size, st.st_mtime_ns)

    def _check_untouched(self) -> None:
        """Notice a file changed or removed outside the broker since its last write: the
        document in memory is the record, so the file is rewritten from it, and said so."""
        if self._written is None:
            return
        try:
            st = self.path.stat()
            now: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            now = None
        if now != self._written:
            log.warning(
                "notebook %s was %s outside the broker; rewriting it from the session's record",
                self.path,
                "removed" if now is None else "changed",
            )


class LiveNotebook:
    """A session's notebook while the session runs: changes, reads and background saves.

    Every change and every read of the document goes through the lock, so a save (which
    serialises the document in a worker thread) never sees a half-made cell.
    """

    def __init__(self, recorder: NotebookRecorder, name: str) -> None:
        self.recorder = recorder
        self.name = name
        #: True while the last write failed: the session then runs no new code.
        self.degraded = False
        #: Whether that failure was a cell nbformat refuses and no repair could fix (not
        #: the disk): retrying does not help.
        self.invalid = False
        self._lock = asyncio.Lock()
        #: Orders the file writes; held while writing, without the document lock, so new
        #: cells are recorded (and their executions answered) while the disk syncs.
        self._write_lock = asyncio.Lock()
        self._save_task: asyncio.Task[None] | None = None
        #: Changes not yet being written, since (loop time) the oldest of them.
        self._pending = 0
        self._dirty_since = 0.0
        #: Cells the file held at the last save (the base of ``SAVE_NEW_SHARE``).
        self._saved_cells = 0
        #: Set by every change, so that a waiting save looks again at when it is due.
        self._poke = asyncio.Event()
        self._next_save_at = 0.0
        #: True while the save task writes (a flush then waits for it, else drops it).
        self._saving = False

    @property
    def path(self) -> Path:
        return self.recorder.path

    def set_kernel_info(self, language_info: dict[str, Any]) -> None:
        """Record the kernel's language info (a header-only change; saved with the next)."""
        self.recorder.set_kernel_info(language_info, {})

    def cell_digest(
        self, code: str, outputs: list[dict[str, Any]], extra: dict[str, Any] | None
    ) -> str:
        """The audit digest (``interpreter/audit.py``) of the cell that :meth:`add_cell`
        writes for ``code``, ``outputs`` and metadata ``extra``: over its source as written
        (a recovery's re-run commented out), so that ``interp audit verify`` recomputes it
        from the file."""
        return cell_digest(self.recorder.source_of(code, extra), outputs)

    async def add_cell(
        self, code: str, outputs: list[dict[str, Any]], *, replace: bool = False, **meta: Any
    ) -> None:
        """Append an executed cell (see :meth:`NotebookRecorder.add_cell`); saved soon.
        With ``replace``, it takes the place of a cell recorded for the same execution
        (a cell an earlier broker recorded as it shut down, continued by this one)."""
        async with self._lock:
            index = self.recorder.add_cell(code, outputs, **meta)
            cells = self.recorder.nb.cells
            if replace:
                for i in range(index - 1, -1, -1):
                    if _execution_id(cells[i]) == meta.get("execution_id"):
                        cells[i] = cells.pop()
                        self.recorder.cell_changed(cells[i])
                        break
        self.request_save()

    async def outputs_of(self, execution_id: str) -> list[dict[str, Any]] | None:
        """The outputs of the cell recorded for ``execution_id`` (plain data), or None."""
        async with self._lock:
            for cell in reversed(self.recorder.nb.cells):
                if _execution_id(cell) == execution_id:
                    return [json.loads(json.dumps(o)) for o in cell.get("outputs", [])]
        return None

    async def add_markdown(
        self,
        text: str,
        event: dict[str, Any] | None = None,
        record: Callable[[str | None], Awaitable[int | None]] | None = None,
    ) -> None:
        """Append a markdown note (a restart, a recovery) with its ``event``; saved soon.

        ``record``, given the execution whose cell the note follows (None: no code cell
        yet), chains the note and returns its number (``audit_note`` in its metadata), or
        None when the session's notes are not chained. It runs under the document's lock,
        so no cell comes between the note as recorded and as written."""
        async with self._lock:
            meta = dict(event) if event is not None else None
            if record is not None:
                n = await record(self.recorder.last_execution_id())
                if n is not None:
                    meta = {**(meta or {}), NOTE_KEY: n}
            self.recorder.add_markdown(text, meta)
        self.request_save()

    async def replace_outputs(
        self, execution_id: str, outputs: list[dict[str, Any]], *, audit_sha256: str | None = None
    ) -> None:
        """Replace the outputs of the cell recorded for ``execution_id`` (late output);
        ``audit_sha256`` is the cell's new digest (``interpreter/audit.py``)."""
        async with self._lock:
            for cell in reversed(self.recorder.nb.cells):
                if cell.metadata.get("interp", {}).get("execution_id") == execution_id:
                    cell.outputs = [nbformat.from_dict(o) for o in outputs]  # type: ignore[no-untyped-call]
                    cell.metadata.get("interp", {}).pop(KEPT, None)
                    if audit_sha256 is not None:
                        cell.metadata["interp"]["audit_sha256"] = audit_sha256
                    self.recorder.cell_changed(cell)
                    break
        self.request_save()

    async def to_json(self) -> str:
        async with self._lock:
            return self.recorder.to_json()

    async def snapshot(self) -> dict[str, Any]:
        """A deep copy of the document as plain JSON data."""
        data = json.loads(await self.to_json())
        assert isinstance(data, dict)
        return data

    def request_save(self) -> None:
        """Save when due (see ``SAVE_NEW_SHARE``): one save task at a time, the latest
        state wins."""
        if not self._pending:
            self._dirty_since = asyncio.get_running_loop().time()
        self._pending += 1
        if self._save_task is not None and not self._save_task.done():
            self._poke.set()
            return
        self._save_task = asyncio.create_task(self._save_loop(), name=f"save-{self.name}")

    def _due_at(self) -> float:
        """Loop time at which the changes not yet written are due in the file."""
        if enough_to_save(self._pending, self._saved_cells):
            return self._dirty_since
        return self._dirty_since + SAVE_MAX_LAG_S

    async def _save_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            self._poke.clear()  # before reading the state: a change after this wakes us
            delay = max(self._next_save_at, self._due_at()) - loop.time()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._poke.wait(), delay)
                continue
            started = loop.time()
            self._saving = True
            try:
                await self.save()
            finally:
                self._saving = False
            ended = loop.time()
            pause = min(SAVE_MAX_DELAY_S, max(SAVE_MIN_DELAY_S, SAVE_PACE * (ended - started)))
            self._next_save_at = ended + pause

    async def flush(self) -> bool:
        """Write now and wait until the file holds every recorded cell; returns whether it
        does. A background save waiting for its turn is dropped (this one covers it)."""
        task = self._save_task
        if task is not None and not task.done():
            if not self._saving:
                task.cancel()
            await asyncio.wait({task})  # its outcome is this save's to report
        return await self.save()

    async def save(self) -> bool:
        """Write the notebook now, off the loop; on failure mark it degraded (R-12).

        The document is serialised under the lock, then written (and synced) without it:
        the file holds every cell recorded before this call once it returns True.
        """
        async with self._write_lock:
            try:
                async with self._lock:
                    self._pending = 0
                    self._saved_cells = len(self.recorder.nb.cells)
                    parts = await asyncio.to_thread(self.recorder.serialise)
                await asyncio.to_thread(self.recorder.write, parts)
            except Exception as exc:
                if not self.degraded:
                    log.exception("session %s: notebook write failed; refusing new work", self.name)
                else:  # each retry: one line, not the traceback again
                    log.warning(
                        "session %s: notebook write failed again (%s: %s)",
                        self.name,
                        type(exc).__name__,
                        exc,
                    )
                self.degraded = True
                self.invalid = isinstance(exc, (nbformat.ValidationError, ValueError))
                return False
        if self.degraded:
            log.warning("session %s: the notebook is written again; new work runs", self.name)
        self.degraded = self.invalid = False
        return True


def _execution_id(cell: Any) -> object:
    """The execution a notebook cell records, if any."""
    meta = cell.get("metadata", {}).get("interp", {})
    return meta.get("execution_id") if isinstance(meta, dict) else None
