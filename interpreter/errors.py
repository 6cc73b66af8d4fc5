"""The errors this service raises on purpose, each with a stable code and an HTTP status.

InterpreterError
├── BadRequest (400)
│   └── PathNotAllowed (400)
├── Unauthorized (401)
├── Forbidden (403)
├── NotFound (404)
│   ├── SessionNotFound
│   ├── ExecutionNotFound
│   ├── ArtifactNotFound
│   └── FileNotFoundInWorkspace
├── Conflict (409)
│   ├── SessionClosed
│   ├── GenerationMismatch
│   ├── WorkspaceChanged
│   └── IdempotencyKeyInUse
├── SessionExpired (410)
├── SessionPurged (410)
├── EventsExpired (410)
├── PayloadTooLarge (413)
├── RangeNotSatisfiable (416)
├── ValidationFailed (422)
│   └── IdempotencyKeyReused
├── SessionBusy (429)
├── TooManySessions (429)
├── TooManyConnections (429)
├── KernelStartFailed (503)
├── BackendUnavailable (503)
├── ShuttingDown (503)
├── SessionReattaching (503)
├── TooManyUploads (503)
│   └── KeyUploadsFull (429)
├── LargeBodiesBusy (503)
│   └── KeyLargeBodiesFull (429)
├── AuditDegraded (507)
├── StorageFull (507)
└── DiskQuotaExceeded (507)

Domain code raises these; only ``interpreter.api`` turns them into HTTP responses.
"""

from __future__ import annotations


class InterpreterError(Exception):
    """Base for errors this service raises on purpose."""

    code = "internal_error"
    status = 500
    #: A 5xx that is the service's designed answer in a normal moment (it is shutting
    #: down, a session is being reattached): its access line is INFO, not ERROR.
    designed = False

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        #: Fields the error body carries beside type and message (see models.ErrorDetail).
        self.details: dict[str, object] = {}


class BadRequest(InterpreterError):
    code, status = "bad_request", 400


class PathNotAllowed(BadRequest):
    code = "path_not_allowed"


class Unauthorized(InterpreterError):
    code, status = "unauthorized", 401


class Forbidden(InterpreterError):
    code, status = "forbidden", 403


class NotFound(InterpreterError):
    code, status = "not_found", 404


class SessionNotFound(NotFound):
    code = "session_not_found"


class ExecutionNotFound(NotFound):
    code = "execution_not_found"


class EventIdAhead(BadRequest):
    """A resume gave an event id the execution has not reached: no stream gave it."""

    code = "event_id_ahead"


class EventsExpired(InterpreterError):
    """A resume asked for events no longer kept (the log of a flood is bounded): they
    existed and are gone, so 410, not 404 (the execution itself is still there to read)."""

    code, status = "events_expired", 410


class ArtifactNotFound(NotFound):
    code = "artifact_not_found"


class FileNotFoundInWorkspace(NotFound):
    code = "file_not_found"


class NotebookNotFound(NotFound):
    """A closed session's notebook file is gone, or damaged so that it is no notebook."""

    code = "notebook_not_found"


class Conflict(InterpreterError):
    code, status = "conflict", 409


class SessionClosed(Conflict):
    code = "session_closed"

    @classmethod
    def cannot_run(cls, session_id: str, status: str) -> SessionClosed:
        return cls(f"Session '{session_id}' is {status}; create a new session to run code.")


class SessionRunning(Conflict):
    """The session runs (or has queued) other code, and the request asked not to queue
    (``if_busy: reject``) or cannot wait (a rebuild). ``details`` name the execution in
    the way, when there is one."""

    code = "session_running"

    def __init__(
        self, message: str, execution_id: str | None = None, running_for_s: float = 0.0
    ) -> None:
        super().__init__(message)
        if execution_id is not None:
            self.details = {
                "execution_id": execution_id,
                "running_for_s": round(running_for_s, 3),
            }

    @classmethod
    def not_queued(cls, session_id: str, execution_id: str, running_for_s: float) -> SessionRunning:
        """An execute with ``if_busy: reject`` while ``execution_id`` runs or waits."""
        return cls(
            f"Session '{session_id}' is running execution '{execution_id}' (for "
            f"{running_for_s:.1f} s) and the request asked not to queue: wait for it "
            "(GET its execution), interrupt it, or send the request again with "
            "if_busy='queue'.",
            execution_id,
            running_for_s,
        )

    @classmethod
    def before_rebuild(
        cls,
        session_id: str,
        execution_id: str | None,
        running_for_s: float,
        *,
        rebuilding: bool,
    ) -> SessionRunning:
        """A rebuild refused: ``execution_id`` runs or waits, or (``rebuilding``) a
        restart or another rebuild is under way."""
        if rebuilding:
            what = "is being restarted or rebuilt"
            then = "wait until that is over (GET the session)"
        else:
            what = f"is running execution '{execution_id}' (for {running_for_s:.1f} s)"
            then = "wait for it and the cells queued behind it (GET the execution), or interrupt it"
        return cls(
            f"Session '{session_id}' {what}; a rebuild re-runs its notebook only in a quiet "
            f"session, so that its cells do not race with other code: {then}, then send the "
            "rebuild again.",
            execution_id,
            running_for_s,
        )


class GenerationMismatch(Conflict):
    """The request named a kernel generation that is no longer the current one (R-08)."""

    code = "generation_mismatch"

    @classmethod
    def of(cls, session_id: str, expected: int, current: int) -> GenerationMismatch:
        return cls(
            f"The request was for kernel generation {expected}, but session '{session_id}' "
            f"now runs generation {current} (it was restarted meanwhile). Fetch the session, "
            "decide again, and retry with the current generation."
        )


def session_failed_message(
    session_id: str, reason: str, restart_limit: int, restart_window_s: float
) -> str:
    """What a session that gave up on its kernel (R-03) tells every later request."""
    if reason == "restart_limit":
        return (
            f"Session '{session_id}' failed: its kernel needed more than {restart_limit} "
            f"automatic restarts within {restart_window_s:g} s (it keeps crashing, running "
            "out of memory or timing out). Its notebook stays readable; create a new session."
        )
    return f"Session '{session_id}' failed ({reason}); create a new session."


class WorkspaceChanged(Conflict):
    """Code in the session changed the workspace under a request (it removed an upload's
    temporary file while the upload arrived): doing it again is what to do."""

    code = "workspace_changed"


class IdempotencyKeyInUse(Conflict):
    """A request with the same Idempotency-Key is still being processed."""

    code = "idempotency_key_in_use"


class SessionExpired(InterpreterError):
    """The session was closed by the service (idle timeout, maximum lifetime)."""

    code, status = "session_expired", 410


class SessionPurged(InterpreterError):
    """The session closed long enough ago that the retention removed its record."""

    code, status = "session_purged", 410


class PayloadTooLarge(InterpreterError):
    code, status = "payload_too_large", 413


class UnsupportedEncoding(InterpreterError):
    """A request body in a ``Content-Encoding`` the service does not undo."""

    code, status = "unsupported_encoding", 415


class RangeNotSatisfiable(InterpreterError):
    code, status = "range_not_satisfiable", 416


class ValidationFailed(InterpreterError):
    code, status = "validation_error", 422


class IdempotencyKeyReused(ValidationFailed):
    """An Idempotency-Key came back with a different request."""

    code = "idempotency_key_reused"


class SessionBusy(InterpreterError):
    code, status = "session_busy", 429

    @classmethod
    def queue_full(cls, session_id: str, queued: int) -> SessionBusy:
        return cls(
            f"Session '{session_id}' already has {queued} executions queued behind the "
            "running one; wait for them to finish or interrupt.",
            retry_after=1,
        )


class TooManySessions(InterpreterError):
    code, status = "too_many_sessions", 429


class TooManyConnections(InterpreterError):
    """The API key already holds its share of the broker's connections, each with a
    request in progress: the connection is closed after this answer."""

    code, status = "too_many_connections", 429


class KernelStartFailed(InterpreterError):
    code, status = "kernel_start_failed", 503


class BackendUnavailable(InterpreterError):
    code, status = "backend_unavailable", 503


class ShuttingDown(InterpreterError):
    code, status = "shutting_down", 503
    designed = True


class SessionReattaching(InterpreterError):
    code, status = "session_reattaching", 503
    designed = True

    @classmethod
    def of(cls, session_id: str) -> SessionReattaching:
        return cls(
            f"Session '{session_id}' is being reattached after a broker restart; retry in a "
            "few seconds.",
            retry_after=2,
        )


class AuditDegraded(InterpreterError):
    code, status = "audit_degraded", 507

    @classmethod
    def notebook_unwritable(cls) -> AuditDegraded:
        return cls(
            "The session's notebook cannot be written (disk full or unwritable), so no "
            "new code runs until it can; free space and retry.",
            retry_after=30,
        )

    @classmethod
    def notebook_invalid(cls, session_id: str) -> AuditDegraded:
        return cls(
            f"Session '{session_id}' holds a cell that its notebook cannot store and that "
            "could not be repaired (a fault in the service; the broker's log names it), so "
            "no new code runs in it. Its executions stay readable; start a new session."
        )


class TooManyUploads(InterpreterError):
    """The broker already receives its maximum of concurrent uploads."""

    code, status = "too_many_uploads", 503


class KeyUploadsFull(TooManyUploads):
    """The API key already sends its share of the concurrent uploads."""

    status = 429


class LargeBodiesBusy(InterpreterError):
    """The broker already holds its budget of large (notebook) request bodies."""

    code, status = "too_many_large_bodies", 503


class KeyLargeBodiesFull(LargeBodiesBusy):
    """The API key's requests already hold its share of the budget of large bodies."""

    status = 429


class StorageFull(InterpreterError):
    """The data directory's disk is below its free-space floor: no new work is taken."""

    code, status = "storage_full", 507

    @classmethod
    def floor(cls, free_mb: int, floor_mb: int) -> StorageFull:
        return cls(
            f"The service's data disk is nearly full ({free_mb} MiB free, below the "
            f"{floor_mb} MiB floor), so it takes no new work; what is stored is kept. "
            "Retry once space is freed.",
            retry_after=60,
        )

    @classmethod
    def not_queued(cls, session_id: str) -> StorageFull:
        return cls(
            f"The service's data disk is full: the code sent to session '{session_id}' "
            "could not be written down, so it was not queued and will not run. Retry once "
            "space is freed.",
            retry_after=60,
        )

    @classmethod
    def unrecorded(cls, session_id: str, waiting: int) -> StorageFull:
        return cls(
            f"The service's data disk is full: {waiting} finished execution(s) of session "
            f"'{session_id}' could not be written down yet (they are kept in memory). No new "
            "code runs in it until they are; retry once space is freed.",
            retry_after=60,
        )


class DiskQuotaExceeded(InterpreterError):
    """A write into a session's workspace went past its disk quota."""

    code, status = "disk_quota_exceeded", 507
