"""Stream text past the in-memory limit, kept on disk until the full-text artifact is built.

An :class:`~interpreter.execution.ExecutionRecorder` keeps at most ``max_output_hard_bytes``
characters of one execution's stdout and stderr in memory. Whatever the cell prints after
that goes to its :class:`StreamSpill`: one temporary file per stream in the session's
artifact directory (``.spill-*.tmp``: never served, since artifact ids are 64 hex digits).
When the execution ends, each stream's full-text artifact is its kept text followed by its
spill file, stored by :meth:`~interpreter.artifacts.ArtifactStore.put_file` in chunks, so a
cell that prints gigabytes costs the broker ``max_output_hard_bytes`` plus the buffer here,
not what it printed (issue 12, item 3).

* **Carriage returns.** The in-memory part has ``\\r`` and ``\\b`` applied, as a front end
  shows them (:mod:`interpreter.overwrite`); the spilled part is kept as the kernel wrote
  it. A progress bar takes no room in memory, so it spills only after the limit was
  reached by other text, and then its frames are in the artifact one after another.
* **Bounds.** At most ``limit`` bytes (``max_output_spill_bytes``) are written per
  execution; past it text is dropped, and :attr:`Spilled.dropped` counts its characters
  (the cut falls between two characters). When the disk refuses (``ENOSPC``, any other
  ``OSError``, or free space under the data directory's floor, ``min_free_mb``), spilling
  stops: what was written stays, the rest is dropped and counted, and
  :attr:`Spilled.stopped` says why. Nothing here raises into the execution.
* **The tail.** The last ``tail_chars`` characters each stream was given (spilled or
  dropped) are also kept in memory, so the inline text of a result ends with what the
  cell printed last, not with the end of the in-memory part.
* **clear_output.** The cell cleared its outputs: what was spilled so far is dropped from
  the files (they are truncated), as the in-memory text is.
* **Threads.** :meth:`StreamSpill.write` only queues text (the recorder calls it on the
  event loop); :meth:`~StreamSpill.flush`, :meth:`~StreamSpill.close` and
  :meth:`~StreamSpill.discard` do the file work in a worker thread, one at a time. Text
  is queued in order and whichever thread runs next writes all of it, so a flush whose
  task was cancelled (a restart cancels the kernel's readers) loses nothing and mixes no
  order; :meth:`~StreamSpill.discard` waits for a write in progress before it removes the
  files. The session discards the spill of every execution, whatever way it ended; the
  files of a broker killed mid-cell are removed by the next one
  (:func:`~interpreter.artifacts.remove_temporaries`, when it reattaches or closes the
  session).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import tempfile
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from interpreter import storage_floor
from interpreter.errors import StorageFull

log = logging.getLogger(__name__)

#: Bytes queued in memory before the recorder's caller should :meth:`StreamSpill.flush`.
FLUSH_BYTES = 1 << 20
#: Characters encoded at a time when queued text is written.
ENCODE_CHARS = 1 << 20
#: Name of a spill file: a hidden temporary of the artifact directory.
PREFIX, SUFFIX = ".spill-", ".tmp"

#: Why spilling stopped: the byte limit, a full disk (or any refused write), the data
#: directory's free-space floor.
StopReason = Literal["limit", "session_limit", "disk_full", "disk_error", "floor"]
_FULL = (errno.ENOSPC, errno.EDQUOT)
_DISK_STOPS = ("disk_full", "disk_error", "floor")
#: Queue item that truncates every spill file (the cell cleared its output).
_TRUNCATE = ("", "")


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (no copy for ASCII text, the common case)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _utf8_prefix(text: str, size: int) -> str:
    """The longest prefix of ``text`` that is at most ``size`` bytes in UTF-8."""
    return text.encode("utf-8")[: max(size, 0)].decode("utf-8", "ignore")


@dataclass(frozen=True)
class Spilled:
    """What a closed spill holds.

    Attributes:
        files: per stream that has spilled text, its file (removed by
            :meth:`StreamSpill.discard` unless consumed before).
        chars: characters in each file.
        dropped: characters given to the spill and not kept (past the limit or refused).
        stopped: why spilling stopped, if it did.
        tails: the last characters each stream was given (spilled or dropped).
    """

    files: dict[str, Path]
    chars: dict[str, int]
    dropped: int
    stopped: StopReason | None
    #: The last characters each stream was given (at most ``tail_chars``).
    tails: dict[str, str] = field(default_factory=dict)
    #: Characters each stream was given in all (spilled or dropped).
    given: dict[str, int] = field(default_factory=dict)


class StreamSpill:
    """The spill files of one execution's stdout and stderr.

    Args:
        directory: where the files go (the session's artifact directory).
        limit: bytes written at most (``max_output_spill_bytes``).
        min_free_mb: the data directory's free-space floor; nothing is written below it.
        flush_bytes: queued bytes at which :attr:`full` says to flush.
        tail_chars: the last characters of each stream kept in memory (:attr:`Spilled.tails`).
        limit_reason: what :attr:`stopped` says once ``limit`` is reached: ``limit`` (the
            execution's), or ``session_limit`` (what its session may still spill).
    """

    def __init__(
        self,
        directory: Path,
        *,
        limit: int,
        min_free_mb: int = 0,
        flush_bytes: int = FLUSH_BYTES,
        tail_chars: int = 0,
        limit_reason: Literal["limit", "session_limit"] = "limit",
    ) -> None:
        self.directory = directory
        self.limit_reason: StopReason = limit_reason
        self.tail_chars = tail_chars
        self._tails: dict[str, _Tail] = {}
        self.limit = limit
        self.min_free_mb = min_free_mb
        self.flush_bytes = flush_bytes
        self.stopped: StopReason | None = None
        # Event-loop side: what is queued, and what the limit has accepted.
        self._queue: deque[tuple[str, str]] = deque()
        self._unflushed = 0
        self._accepted = 0
        self._refused_chars = 0
        self._closed = False
        #: Anything was queued: until then there is no file and nothing to do in a thread
        #: (most executions never get here).
        self._used = False
        # Thread side, under the lock: the files and what they hold.
        self._lock = threading.Lock()
        self._files: dict[str, BinaryIO] = {}
        self._paths: dict[str, Path] = {}
        self._sizes: dict[str, int] = {}
        self._chars: dict[str, int] = {}
        self._lost_chars = 0

    # -- event loop ---------------------------------------------------------------------

    def write(self, name: str, text: str) -> None:
        """Queue ``text`` of stream ``name`` (no I/O, and no copy: it is encoded when
        written); past the limit it is dropped."""
        if self.tail_chars and not self._closed:
            self._tails.setdefault(name, _Tail(self.tail_chars)).add(text)
        if self._closed or self.stopped is not None:
            self._refused_chars += len(text)
            return
        size = utf8_size(text)
        room = self.limit - self._accepted
        if size > room:
            # Cut between two characters: the bytes of a partial one are dropped too.
            kept = text[: max(room, 0)] if text.isascii() else _utf8_prefix(text, room)
            self._refused_chars += len(text) - len(kept)
            text, size = kept, utf8_size(kept)
            self.stopped = self.limit_reason
        if not text:
            return
        self._accepted += size
        self._unflushed += size
        self._used = True
        self._queue.append((name, text))

    def tail(self, name: str) -> tuple[str, int] | None:
        """The last characters stream ``name`` was given here, and how many it was given
        in all; None when it was given none (or :attr:`tail_chars` is 0)."""
        kept = self._tails.get(name)
        return None if kept is None else (kept.text(), kept.given)

    @property
    def accepted(self) -> int:
        """Bytes taken to be written so far (less after a ``clear_output``)."""
        return self._accepted

    def clear(self) -> None:
        """The cell cleared its outputs: drop what was spilled so far."""
        if self._closed:
            return
        self._queue.clear()
        self._tails.clear()
        if self._used:
            self._queue.append(_TRUNCATE)
        self._accepted = 0
        self._unflushed = 0

    @property
    def full(self) -> bool:
        """Enough is queued that the caller should :meth:`flush` before feeding more."""
        return self._unflushed >= self.flush_bytes

    async def flush(self) -> None:
        """Write what is queued, in a worker thread."""
        if not self._queue:
            return
        self._unflushed = 0
        await asyncio.to_thread(self._drain_locked)

    async def close(self) -> Spilled:
        """Write what is queued and close the files; they stay until :meth:`discard`.
        Text written after this is dropped (and counted)."""
        self._closed = True
        self._unflushed = 0
        tails = {name: tail.text() for name, tail in self._tails.items()}
        given = {name: tail.given for name, tail in self._tails.items()}
        if not self._used:
            return Spilled({}, {}, self._refused_chars, self.stopped, tails, given)
        files, chars, lost = await asyncio.to_thread(self._close_locked)
        return Spilled(files, chars, self._refused_chars + lost, self.stopped, tails, given)

    async def discard(self) -> None:
        """Remove the files (idempotent): after the artifact is built, or instead of it."""
        self._closed = True
        self._queue.clear()
        if self._used:
            await asyncio.to_thread(self._discard_locked)

    # -- worker thread ------------------------------------------------------------------

    def _drain_locked(self) -> None:
        with self._lock:
            self._drain()

    def _close_locked(self) -> tuple[dict[str, Path], dict[str, int], int]:
        with self._lock:
            self._drain()
            for fh in self._files.values():
                try:
                    fh.close()
                except OSError:
                    self._stop("disk_error")
            self._files.clear()
            files = {n: p for n, p in self._paths.items() if self._chars.get(n)}
            return files, {n: self._chars[n] for n in files}, self._lost_chars

    def _discard_locked(self) -> None:
        with self._lock:
            for fh in self._files.values():
                try:
                    fh.close()
                except OSError:
                    continue
            self._files.clear()
            for path in self._paths.values():
                try:
                    path.unlink(missing_ok=True)
                except OSError:
                    log.warning("could not remove the spill file %s", path.name)
            self._paths.clear()
            self._chars.clear()

    def _drain(self) -> None:
        """Write every queued item in order (the caller holds the lock)."""
        checked = False
        while True:
            try:
                item = self._queue.popleft()
            except IndexError:
                return
            if item is _TRUNCATE:
                self._truncate()
                continue
            name, text = item
            if self.stopped in _DISK_STOPS:
                self._lost_chars += len(text)
                continue
            if not checked:
                # Once per batch (statvfs costs microseconds).
                checked = True
                if not self._room_on_disk():
                    self._lost_chars += len(text)
                    continue
            self._append(name, text)

    def _room_on_disk(self) -> bool:
        """Whether the directory exists and its disk is above the data directory's floor."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            storage_floor.check(self.directory, self.min_free_mb)
        except StorageFull:
            self._stop("floor")
            return False
        except OSError as exc:
            self._stop("disk_full" if exc.errno in _FULL else "disk_error")
            return False
        return True

    def _append(self, name: str, text: str) -> None:
        fh = self._files.get(name)
        written = 0
        try:
            if fh is None:
                fd, path = tempfile.mkstemp(prefix=PREFIX, suffix=SUFFIX, dir=self.directory)
                self._paths[name] = Path(path)
                fh = self._files[name] = os.fdopen(fd, "wb", buffering=0)
                self._sizes[name] = self._chars[name] = 0
            # Encoded a slice at a time: a large message is not copied whole once more.
            for start in range(0, len(text), ENCODE_CHARS):
                view = memoryview(text[start : start + ENCODE_CHARS].encode("utf-8"))
                while view:
                    done = fh.write(view)
                    written += done
                    view = view[done:]
        except OSError as exc:
            self._lost_chars += len(text)
            self._stop("disk_full" if exc.errno in _FULL else "disk_error")
            self._cut_back(name)
            return
        self._sizes[name] += written
        self._chars[name] += len(text)

    def _cut_back(self, name: str) -> None:
        """Drop the part of a failed write: the file ends with its last whole item."""
        fh = self._files.get(name)
        if fh is None:
            return
        size = self._sizes.get(name, 0)
        try:
            fh.truncate(size)
            fh.seek(size)
        except OSError:
            log.warning("could not cut back the spill file %s", self._paths[name].name)

    def _truncate(self) -> None:
        for name, fh in self._files.items():
            try:
                fh.seek(0)
                fh.truncate(0)
            except OSError:
                self._stop("disk_error")
            self._sizes[name] = self._chars[name] = 0

    def _stop(self, reason: StopReason) -> None:
        if self.stopped is None:
            self.stopped = reason
            log.warning("output spill stopped (%s) in %s", reason, self.directory)


class _Tail:
    """The last ``size`` characters of a stream, kept as the pieces that hold them (a flood
    of one-line messages costs no copying of the window per message)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._pieces: deque[str] = deque()
        self._chars = 0
        #: Characters added in all.
        self.given = 0

    def add(self, text: str) -> None:
        self.given += len(text)
        if len(text) >= self.size:
            self._pieces.clear()
            self._pieces.append(text[-self.size :])
            self._chars = self.size
            return
        self._pieces.append(text)
        self._chars += len(text)
        while self._chars - len(self._pieces[0]) >= self.size:
            self._chars -= len(self._pieces.popleft())

    def text(self) -> str:
        return "".join(self._pieces)[-self.size :]
