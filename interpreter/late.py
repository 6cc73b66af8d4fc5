"""Writes of finished cells that changed afterwards, coalesced per cell.

A finished cell changes when a background thread of the kernel prints after it ended (late
output) or when a later cell updates a display it showed. Each such change is applied to
the cell's recorder at once (cheap), but writing it down (its notebook cell, its record
and so a link of the audit chain) costs far more than a message, and a kernel can send
tens of thousands of them a second. :class:`LateWrites` writes each changed cell at most
once per :data:`LATE_WRITE_INTERVAL_S`, and always once more after the last change, so
nothing is lost (docs/security.md R-01, R-12). A session's close writes what is pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from interpreter.handle import ExecutionHandle

log = logging.getLogger(__name__)

#: Seconds between two writes of the changes of finished cells (per session).
LATE_WRITE_INTERVAL_S = 1.0

#: Writes one changed cell: the handle, and whether its stream text changed.
WriteLate = Callable[[ExecutionHandle, bool], Awaitable[None]]


class LateWrites:
    """The finished cells of one session with changes not yet written.

    Args:
        write: writes one cell's changes (called from the loop, one cell at a time).
        interval_s: the least time between two rounds of writes.
    """

    def __init__(self, write: WriteLate, interval_s: float = LATE_WRITE_INTERVAL_S) -> None:
        self._write = write
        self.interval_s = interval_s
        #: By execution id: the handle, and whether its streams changed.
        self._due: dict[str, tuple[ExecutionHandle, bool]] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        #: Rounds of writes done (what the tests count).
        self.rounds = 0

    @property
    def pending(self) -> int:
        """Cells with changes not yet written."""
        return len(self._due)

    def changed(self, handle: ExecutionHandle, *, streams: bool) -> None:
        """``handle``'s finished cell changed (its stream text if ``streams``): written at
        the end of the current interval."""
        key = handle.execution.id
        before = self._due.get(key)
        self._due[key] = (handle, streams or (before is not None and before[1]))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="late-writes")

    async def flush(self) -> None:
        """Write every pending change now."""
        while self._due:
            await self._round()

    async def _round(self) -> None:
        """Write each cell changed so far, once."""
        due, self._due = self._due, {}
        self.rounds += 1
        for handle, streams in due.values():
            try:
                await self._write(handle, streams)
            except Exception:
                log.exception("could not record the late output of %s", handle.execution.id)

    async def close(self) -> None:
        """Write what is pending and stop (the session closes); later changes are not
        written. Lets go of ``write`` (a bound method of the session: no reference cycle
        keeps a closed session for the cyclic collector)."""
        self._closing.set()
        task = self._task
        if task is not None:
            await asyncio.wait({task})
        await self.flush()
        self._write = _written_nowhere

    async def _run(self) -> None:
        while self._due:
            if not self._closing.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.interval_s):
                        await self._closing.wait()
            await self._round()


async def _written_nowhere(handle: ExecutionHandle, streams: bool) -> None:
    """The write of a closed session's :class:`LateWrites`: nothing is written."""
