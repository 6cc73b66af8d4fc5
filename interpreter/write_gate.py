"""The writes into one session's workspace through the files API, and their end.

A live session's workspace takes uploads and deletions; a closed one is read-only. Each write
(an upload's piece, its commit, a deletion) runs inside :meth:`WriteGate.writing`, and an
upload in progress is registered from its first byte to its commit or abort. Closing the
gate (when the session closes) refuses new writes, waits for the ones under way, and aborts
the uploads still arriving, so their temporary files are gone and nothing of theirs holds the
workspace's filesystem (its quota mount) busy when it is copied out and unmounted. A write
refused by a closed gate raises the gate's error (409 ``session_closed``), never a success
for a file that is not kept.

Writes run in worker threads (``asyncio.to_thread``); the gate is thread-safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from interpreter.errors import InterpreterError, SessionClosed, ShuttingDown

log = logging.getLogger(__name__)

#: How long closing waits for writes under way (one piece, one commit) to finish.
CLOSE_WAIT_S = 60.0


class Abortable(Protocol):
    """An upload in progress: :meth:`abort` removes what it wrote so far (idempotent)."""

    def abort(self) -> None: ...

    @property
    def temp_name(self) -> str:
        """Its temporary file's name in the workspace's top directory ("" once gone)."""
        ...


class WriteGate:
    """Admits writes into one workspace until :meth:`close`.

    Args:
        on_activity: called (in the writer's thread) when an upload starts or ends and after
            each write; the session counts it as activity for its idle timeout.
        refused: the error to raise for every write, for a gate that starts closed.
    """

    def __init__(
        self,
        on_activity: Callable[[], None] | None = None,
        refused: Callable[[], InterpreterError] | None = None,
    ) -> None:
        self._cond = threading.Condition()
        self._busy = 0
        self._refused = refused
        self._uploads: set[Abortable] = set()
        self._on_activity = on_activity

    @property
    def closed(self) -> bool:
        return self._refused is not None

    @property
    def uploads(self) -> int:
        """Uploads in progress (registered, neither committed nor aborted)."""
        with self._cond:
            return len(self._uploads)

    def temp_names(self) -> frozenset[str]:
        """The temporary files of the uploads in progress (the broker's, not the user's:
        listings leave them out)."""
        with self._cond:
            return frozenset(u.temp_name for u in self._uploads if u.temp_name)

    def check(self) -> None:
        """Raise the gate's error if it is closed."""
        refused = self._refused
        if refused is not None:
            raise refused()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Run one write; raises the gate's error once it is closed."""
        with self._cond:
            self.check()
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                if not self._busy:
                    self._cond.notify_all()
            self._activity()

    def register(self, upload: Abortable) -> None:
        """Count ``upload`` as in progress until :meth:`unregister`; raises when closed
        (the caller then aborts it)."""
        with self._cond:
            self.check()
            self._uploads.add(upload)
        self._activity()

    def unregister(self, upload: Abortable) -> None:
        with self._cond:
            if upload not in self._uploads:
                return
            self._uploads.discard(upload)
        self._activity()

    def close(self, refused: Callable[[], InterpreterError]) -> None:
        """Refuse every write from now on with ``refused()``; wait for those under way,
        then abort the uploads still in progress. Blocks (call it off the event loop)."""
        with self._cond:
            if self._refused is None:
                self._refused = refused
            # Let go of the owner's callback (a bound method of the session, which holds
            # this gate): kept, it made the closed session a cycle only the collector frees.
            self._on_activity = None
            if not self._cond.wait_for(lambda: self._busy == 0, CLOSE_WAIT_S):
                # A write hangs (a stuck disk): its descriptors are not closed under it;
                # each upload aborts itself at its next step, refused by the gate.
                log.warning("workspace writes still under way %.0f s after close", CLOSE_WAIT_S)
                return
            pending = list(self._uploads)
        for upload in pending:
            upload.abort()

    def _activity(self) -> None:
        if self._on_activity is not None:
            self._on_activity()


def refusal(session_id: str, reason: str) -> Callable[[], InterpreterError]:
    """The error every write into a closed session's workspace gets (an upload still
    arriving when it closed included): 409 ``session_closed``, or 503 ``shutting_down``
    when the broker is stopping."""
    if reason == "broker_shutdown":
        return lambda: ShuttingDown(
            "The service is shutting down; this write was not kept. Retry shortly.",
            retry_after=5,
        )
    message = (
        f"Session '{session_id}' is closed ({reason}): its workspace is read-only and a "
        "write still under way when it closed was not kept. Listing and downloading its "
        "files still work; create a session with from_session to work on a copy of them."
    )
    return lambda: SessionClosed(message)
