"""Python SDK for the interpreter service: ``Client`` (blocking) and ``AsyncClient``.

Needs only httpx, httpx-sse and pydantic; never docker or tornado. Failed calls are sent
again where that is safe (``max_retries``, default 2), and every run carries an
``Idempotency-Key``, so a retried run never runs twice.

Example:
    >>> from interpreter.client import Client
    >>> with Client("http://127.0.0.1:8700", api_key="...") as client:  # doctest: +SKIP
    ...     with client.create_session() as session:
    ...         session.run("import pandas as pd; df = pd.DataFrame({'x': [1, 2, 3]})")
    ...         print(session.run("df.x.sum()").text)
    6
"""

from interpreter.client._async import AsyncClient, AsyncSession, AsyncStreamEvent, PendingSession
from interpreter.client._config import API_KEY_ENV, DEFAULT_URL, MAX_RETRIES_ENV, URL_ENV
from interpreter.client._errors import (
    APIError,
    AuthenticationError,
    BadRequestError,
    BusyError,
    ClientError,
    ConflictError,
    ConnectionFailed,
    ExecutionError,
    InvalidArgumentError,
    NotFoundError,
    ServerError,
)
from interpreter.client._events import (
    ApprovalRequiredEvent,
    ClearOutputEvent,
    DoneEvent,
    ErrorEvent,
    OutputEvent,
    ProgressEvent,
    StderrEvent,
    StdoutEvent,
)
from interpreter.client._results import (
    Artifact,
    AsyncArtifact,
    AsyncRunResult,
    RunResult,
)
from interpreter.client._sync import Client, Session, StreamEvent
from interpreter.mime import CHART_MIME, DATAFRAME_MIME

__all__ = [
    "API_KEY_ENV",
    "CHART_MIME",
    "DATAFRAME_MIME",
    "DEFAULT_URL",
    "MAX_RETRIES_ENV",
    "URL_ENV",
    "APIError",
    "ApprovalRequiredEvent",
    "Artifact",
    "AsyncArtifact",
    "AsyncClient",
    "AsyncRunResult",
    "AsyncSession",
    "AsyncStreamEvent",
    "AuthenticationError",
    "BadRequestError",
    "BusyError",
    "ClearOutputEvent",
    "Client",
    "ClientError",
    "ConflictError",
    "ConnectionFailed",
    "DoneEvent",
    "ErrorEvent",
    "ExecutionError",
    "InvalidArgumentError",
    "NotFoundError",
    "OutputEvent",
    "PendingSession",
    "ProgressEvent",
    "RunResult",
    "ServerError",
    "Session",
    "StderrEvent",
    "StdoutEvent",
    "StreamEvent",
]
