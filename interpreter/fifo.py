"""A session's executions in order: those waiting, the one running, recent ones by id.

One execution runs at a time per session; the others wait here, first in first out, up
to a bound (the caller answers ``429`` past it). An execution cancelled while it waits
is finished in place and skipped when its turn comes. A recovery's re-run cells go ahead
of every waiting one (:meth:`ExecutionQueue.put_first`), outside the bound, and while the
queue is held (:meth:`ExecutionQueue.hold`) only they are taken: the cells other clients
send meanwhile wait until the recovery is over.
"""

from __future__ import annotations

import asyncio
import collections
import itertools

from interpreter.handle import KEPT_CHARS, ExecutionHandle, held_chars
from interpreter.models import TERMINAL_STATUSES

#: Finished handles kept in memory for lookups by id (the store has them all).
KEPT_HANDLES = 64
#: Finished handles whose event log is kept, for streams that resume after a break.
KEPT_EVENT_LOGS = 8


class ExecutionQueue:
    """The FIFO of a session's executions; ``current`` is the one running."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._waiting: collections.deque[ExecutionHandle] = collections.deque()
        #: Put ahead of the others (a recovery's re-run cells), outside the bound.
        self._first: collections.deque[ExecutionHandle] = collections.deque()
        self._arrived = asyncio.Event()
        self._holds = 0
        self._by_id: dict[str, ExecutionHandle] = {}
        #: :func:`held_chars` of each ended handle in ``_by_id``, as it ended, and their sum.
        self._chars: dict[str, int] = {}
        self._kept_chars = 0
        #: The ``logged_chars`` of the handles in ``_logged``, summed.
        self._logged_chars = 0
        #: Handles out of the queue, oldest first, whose event log may still be held.
        self._logged: collections.deque[ExecutionHandle] = collections.deque()
        self.current: ExecutionHandle | None = None

    @property
    def waiting(self) -> int:
        """How many wait behind the running one."""
        return len(self._waiting) + len(self._first)

    @property
    def full(self) -> bool:
        """The bound is reached (cells put first do not count)."""
        return len(self._waiting) >= self.size

    @property
    def empty(self) -> bool:
        """Nothing runs and nothing waits."""
        return self.current is None and not self.waiting

    def ahead(self) -> ExecutionHandle | None:
        """What a new execution would wait for: the running one, else the first that waits.

        One whose outcome is already decided is not waited for: a client may read that
        outcome while the broker still writes it down, and must then be served, not told
        the session runs it."""
        return next((h for h in self._by_id.values() if not _settled(h)), None)

    def held(self) -> ExecutionHandle | None:
        """The current execution if it still waits for its approval (policy ``approve``):
        taken from the queue, never sent to the kernel. It ends as a queued one does."""
        handle = self.current
        if handle is None or handle.finished.is_set():
            return None
        return handle if handle.execution.status == "pending_approval" else None

    def get(self, execution_id: str) -> ExecutionHandle | None:
        return self._by_id.get(execution_id)

    def put(self, handle: ExecutionHandle) -> None:
        """Queue ``handle`` (check :attr:`full` first)."""
        self._waiting.append(handle)
        self._by_id[handle.execution.id] = handle
        self._arrived.set()

    def put_first(self, handle: ExecutionHandle) -> None:
        """Queue ``handle`` ahead of every waiting execution but those put first before
        it; the bound does not apply."""
        self._first.append(handle)
        self._by_id[handle.execution.id] = handle
        self._arrived.set()

    def hold(self) -> None:
        """Take only executions put first until :meth:`release` (calls nest)."""
        self._holds += 1

    def release(self) -> None:
        self._holds -= 1
        self._arrived.set()

    async def next(self) -> ExecutionHandle:
        """Wait for the next execution to run (skipping cancelled ones); it is current."""
        while True:
            while not (self._first or (self._waiting and not self._holds)):
                self._arrived.clear()
                await self._arrived.wait()
            handle = (self._first or self._waiting).popleft()
            if not handle.finished.is_set():
                self.current = handle
                return handle
            self._logged.append(handle)  # cancelled while it waited

    def done(self) -> None:
        """The current execution ended; forget old finished ones.

        Only the oldest handles are looked at: it used to scan every kept handle (up to
        65) after each cell, 8.5 us against 2 us now (measured alone, issue 10).
        """
        newest = self.current
        if newest is not None:
            self._logged.append(newest)
            size = held_chars(newest.execution)
            self._kept_chars += size - self._chars.get(newest.execution.id, 0)
            self._chars[newest.execution.id] = size
            self._logged_chars += size - newest.logged_chars
            newest.logged_chars = size
        self.current = None
        # A log holds its execution's outputs as published: the logs kept hold at most
        # KEPT_CHARS of them too (the newest's whatever its size).
        while len(self._logged) > KEPT_EVENT_LOGS or (
            self._logged_chars > KEPT_CHARS and self._logged and self._logged[0] is not newest
        ):
            # One not finished yet (a drained cell being ended) keeps its log for now; past
            # KEPT_HANDLES it is let go here and its log goes when the handle is forgotten.
            if not self._logged[0].finished.is_set() and len(self._logged) <= KEPT_HANDLES:
                break
            oldest = self._logged.popleft()
            oldest.release_log()
            self._logged_chars -= oldest.logged_chars
            oldest.logged_chars = 0
        excess = len(self._by_id) - KEPT_HANDLES
        if excess > 0:
            for key in list(itertools.islice(self._by_id, excess)):
                if self._by_id[key].finished.is_set():
                    self._forget(key)
        if self._kept_chars > KEPT_CHARS:
            for key in [k for k in self._by_id if k in self._chars]:
                if self._kept_chars <= KEPT_CHARS:
                    break
                handle = self._by_id[key]
                if handle is not newest and handle.finished.is_set():
                    self._forget(key)

    def _forget(self, key: str) -> None:
        """Let a finished handle go: a lookup reads its record from the store."""
        del self._by_id[key]
        self._kept_chars -= self._chars.pop(key, 0)

    def withdraw(self, handle: ExecutionHandle) -> bool:
        """Take ``handle`` out of the queue if it still waits there (True); False when the
        worker has taken it (it runs, or has run)."""
        for queue in (self._first, self._waiting):
            if handle in queue:
                queue.remove(handle)
                self._logged.append(handle)
                return True
        return False

    def drain(self) -> list[ExecutionHandle]:
        """Take every waiting execution out (the session is closing)."""
        taken = [*self._first, *self._waiting]
        self._first.clear()
        self._waiting.clear()
        self._logged.extend(taken)
        return taken


def _settled(handle: ExecutionHandle) -> bool:
    """Finished, or its outcome set and only its writing down left."""
    return handle.finished.is_set() or handle.execution.status in TERMINAL_STATUSES
