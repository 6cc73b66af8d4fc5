"""What a local kernel process itself writes (ipykernel's own log, a crash's traceback),
relayed into the broker's log one record per line.

The kernel's stdout and stderr are a pipe the event loop reads, not the broker's stderr:
a broker logging JSON (``INTERP_LOG_FORMAT=json``) would otherwise have the kernel's plain
lines among its objects. A cell's output never comes this way (ipykernel sends it over
iopub, its file descriptors included). Bounded: a kernel that writes without end has its
first :data:`LOGGED_LINES` lines logged and the rest only read; its last lines are kept
for the report of a kernel that did not start.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import IO, Any

log = logging.getLogger("interpreter.kernel_output")

#: Lines of one kernel process logged; the rest are read and dropped (said once).
LOGGED_LINES = 200
#: Characters of one line kept; a longer line is cut (and the rest of it dropped).
LINE_CHARS = 2000
#: Last lines kept for a start failure's report (:meth:`KernelOutput.tail`).
TAIL_LINES = 20


class KernelOutput(asyncio.Protocol):
    """Reads one kernel process's output pipe and logs it line by line."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.lines = 0
        self.closed = asyncio.get_running_loop().create_future()
        self._partial = bytearray()
        self._cut = False  # the current line is past LINE_CHARS: the rest of it is dropped
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)

    def data_received(self, data: bytes) -> None:
        *complete, rest = data.split(b"\n")
        for piece in complete:
            self._take(piece)
            self._line(bytes(self._partial))
            self._partial.clear()
            self._cut = False
        self._take(rest)

    def _take(self, piece: bytes) -> None:
        if self._cut:
            return
        room = LINE_CHARS * 4 - len(self._partial)  # UTF-8: at most 4 bytes a character
        self._partial += piece[:room]
        self._cut = len(piece) > room

    def eof_received(self) -> bool | None:
        if self._partial:
            self._line(bytes(self._partial))
            self._partial.clear()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def _line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r")[:LINE_CHARS]
        if not text.strip():
            return
        self._tail.append(text)
        self.lines += 1
        fields = {"event": "kernel_output", "session_id": self.session_id}
        if self.lines <= LOGGED_LINES:
            log.warning("session %s: the kernel wrote: %s", self.session_id, text, extra=fields)
        elif self.lines == LOGGED_LINES + 1:
            log.warning(
                "session %s: the kernel wrote more than %d lines; the rest are not logged",
                self.session_id,
                LOGGED_LINES,
                extra=fields,
            )

    def tail(self) -> str:
        """The last lines the kernel wrote (for the report of a start failure)."""
        return "\n".join(self._tail)


async def follow(pipe: IO[Any], session_id: str) -> KernelOutput:
    """Read ``pipe`` (a kernel's stdout and stderr) on the event loop from now on; the
    pipe is the reader's to close (at end of file)."""
    loop = asyncio.get_running_loop()
    _, protocol = await loop.connect_read_pipe(lambda: KernelOutput(session_id), pipe)
    return protocol
