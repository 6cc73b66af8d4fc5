"""Exceptions the SDK raises: one tree for the service's refusals, one class for user code.

ClientError
├── APIError                 the service answered with an error status
│   ├── BadRequestError      400, 413, 422: the request itself is wrong
│   ├── AuthenticationError  401, 403: missing or wrong API key
│   ├── NotFoundError        404: no such session, file, artifact (or not yours)
│   ├── ConflictError        409, 410: the session is closed, expired or removed, a stale generation
│   ├── BusyError            429: the session's queue is full; see ``retry_after``
│   └── ServerError          5xx: the service failed; often worth a retry
├── ConnectionFailed         the service could not be reached or broke the protocol
├── InvalidArgumentError     refused by the SDK before any request was sent (also a ValueError)
└── ExecutionError           user code failed and ``raise_on_error=True`` was asked

Errors *in user code* are data (``RunResult.error``) unless ``raise_on_error=True``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interpreter.models import Execution


class ClientError(Exception):
    """Base of every exception the SDK raises on purpose."""


class APIError(ClientError):
    """The service refused or failed a request.

    Attributes:
        status: HTTP status code of the answer.
        code: Stable machine name from the error body (e.g. ``session_not_found``).
        message: The service's human-readable explanation.
        retry_after: Seconds to wait before retrying, when the service said so.
        details: Further fields of the error body, e.g. ``execution_id`` and
            ``running_for_s`` of a ``session_running`` refusal; ``api_key_sent`` False
            on a 401 to a request that carried no API key.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str,
        retry_after: float | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.retry_after = retry_after
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        return f"{self.message} ({self.code}, HTTP {self.status})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only constructor arguments do not survive the default pickling.
        return (
            _rebuild_api_error,
            (type(self), self.message, self.status, self.code, self.retry_after, self.details),
        )


def _rebuild_api_error(
    cls: type[APIError],
    message: str,
    status: int,
    code: str,
    retry_after: float | None,
    details: dict[str, Any] | None = None,
) -> APIError:
    return cls(message, status=status, code=code, retry_after=retry_after, details=details)


class BadRequestError(APIError):
    """The request was malformed, too large or failed validation (400, 413, 422)."""


class AuthenticationError(APIError):
    """The API key is missing or not accepted (401, 403)."""


class NotFoundError(APIError):
    """No such session, execution, file or artifact for this key (404)."""


class ConflictError(APIError):
    """The request conflicts with the object's state, e.g. a closed session (409)."""


class BusyError(APIError):
    """The session or the service is at capacity (429); retry after ``retry_after`` s."""


class ServerError(APIError):
    """The service failed or is unavailable (5xx)."""


class ConnectionFailed(ClientError):
    """The service could not be reached, or its answer could not be understood."""


class InvalidArgumentError(ClientError, ValueError):
    """The SDK refused an argument before sending anything; no request was made.

    Raised for an artifact reference that is not an artifact of this service (a URL on
    another host would receive the API key), an empty file path, a byte range that cannot
    be, or a request body that JSON cannot hold (NaN). It is also a ``ValueError``.
    """


class ExecutionError(ClientError):
    """User code did not finish with status ``ok`` and ``raise_on_error=True`` was asked.

    Attributes:
        status: Execution status: ``error``, ``timeout``, ``interrupted``, ``kernel_died``
            or ``unknown``.
        ename: Exception class name raised by the code (or the status, when nothing was raised).
        evalue: Exception message.
        traceback: Traceback lines, without colour codes.
        execution: The full execution record.
    """

    def __init__(self, execution: Execution) -> None:
        self.execution = execution
        self.status = execution.status
        if execution.error is not None:
            self.ename = execution.error.ename
            self.evalue = execution.error.evalue
            self.traceback = list(execution.error.traceback)
        else:
            self.ename = execution.status
            self.evalue = execution.reason or f"execution ended with status {execution.status!r}"
            self.traceback = []
        super().__init__(f"{self.ename}: {self.evalue}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.execution,))
