"""The errors this service raises on purpose, each with a stable code and an HTTP status.

InterpreterError
├── BadRequest (400)
│   └── PathNotAllowed (400)
├── Unauthorized (401)
├── NotFound (404)
│   ├── SessionNotFound
│   ├── ExecutionNotFound
│   ├── ArtifactNotFound
│   └── FileNotFoundInWorkspace
├── Conflict (409)
│   ├── SessionClosed
│   ├── GenerationMismatch
│   └── IdempotencyKeyInUse
├── SessionExpired (410)
├── PayloadTooLarge (413)
├── ValidationFailed (422)
│   └── IdempotencyKeyReused
├── SessionBusy (429)
├── TooManySessions (429)
├── KernelStartFailed (503)
├── BackendUnavailable (503)
├── ShuttingDown (503)
└── AuditDegraded (507)

Domain code raises these; only ``interpreter.api`` turns them into HTTP responses.
"""

from __future__ import annotations


class InterpreterError(Exception):
    """Base for errors this service raises on purpose."""

    code = "internal_error"
    status = 500

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class BadRequest(InterpreterError):
    code, status = "bad_request", 400


class PathNotAllowed(BadRequest):
    code = "path_not_allowed"


class Unauthorized(InterpreterError):
    code, status = "unauthorized", 401


class NotFound(InterpreterError):
    code, status = "not_found", 404


class SessionNotFound(NotFound):
    code = "session_not_found"


class ExecutionNotFound(NotFound):
    code = "execution_not_found"


class ArtifactNotFound(NotFound):
    code = "artifact_not_found"


class FileNotFoundInWorkspace(NotFound):
    code = "file_not_found"


class Conflict(InterpreterError):
    code, status = "conflict", 409


class SessionClosed(Conflict):
    code = "session_closed"


class GenerationMismatch(Conflict):
    """The request named a kernel generation that is no longer the current one (R-08)."""

    code = "generation_mismatch"


class IdempotencyKeyInUse(Conflict):
    """A request with the same Idempotency-Key is still being processed."""

    code = "idempotency_key_in_use"


class SessionExpired(InterpreterError):
    """The session was closed by the service (idle timeout, maximum lifetime)."""

    code, status = "session_expired", 410


class PayloadTooLarge(InterpreterError):
    code, status = "payload_too_large", 413


class ValidationFailed(InterpreterError):
    code, status = "validation_error", 422


class IdempotencyKeyReused(ValidationFailed):
    """An Idempotency-Key came back with a different request."""

    code = "idempotency_key_reused"


class SessionBusy(InterpreterError):
    code, status = "session_busy", 429


class TooManySessions(InterpreterError):
    code, status = "too_many_sessions", 429


class KernelStartFailed(InterpreterError):
    code, status = "kernel_start_failed", 503


class BackendUnavailable(InterpreterError):
    code, status = "backend_unavailable", 503


class ShuttingDown(InterpreterError):
    code, status = "shutting_down", 503


class AuditDegraded(InterpreterError):
    code, status = "audit_degraded", 507
