"""envd's Connect-RPC routes (``/<package>.<Service>/<Method>``) as the SDK calls them.

The SDK calls envd's ``filesystem.Filesystem`` and ``process.Process`` services with the
Connect protocol and its JSON codec: a unary call is ``POST`` with an ``application/json``
body, answered ``200`` with the response message, or with an error status and
``{"code": "<connect code>", "message": ...}`` (the SDK reads a plain 404 as
``not_found``, so an unserved method must never answer that). A server-streaming call
(``application/connect+json``: ``commands.run``, ``pty.create``, ``files.watch_dir``)
gets its error as Connect streams carry one: ``200`` and an end-of-stream envelope. Every
method this service does not serve answers ``unimplemented`` (HTTP 501 for a unary
call), naming the method.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import tornado.web

from interpreter.api.e2b.base import E2BHandler, SandboxNotRunning
from interpreter.api.e2b.sandboxes import E2BSandbox
from interpreter.errors import InterpreterError, UnsupportedEncoding, ValidationFailed

#: Connect's error codes by our statuses (the SDK maps them to its exceptions:
#: ``not_found`` -> FileNotFoundException, ``invalid_argument`` -> InvalidArgumentException).
CODES = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "already_exists",
    413: "resource_exhausted",
    415: "invalid_argument",
    422: "invalid_argument",
    429: "resource_exhausted",
    501: "unimplemented",
    503: "unavailable",
    507: "resource_exhausted",
}
#: The HTTP status Connect gives each code (connectrpc.com/docs/protocol, error codes).
STATUSES = {
    "invalid_argument": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "already_exists": 409,
    "resource_exhausted": 429,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
}


#: The Content-Type of a Connect streaming call, before its codec's name.
STREAM_TYPE = "application/connect+"
#: The flag of the envelope that ends a Connect stream (its message is always JSON).
END_STREAM = 0b10


def streaming_codec(content_type: str) -> str | None:
    """The codec of a Connect streaming call (``application/connect+json``: ``json``;
    only ``json`` or ``proto``), None for a unary call."""
    mime = content_type.split(";", 1)[0].strip().lower()
    if not mime.startswith(STREAM_TYPE):
        return None
    return "proto" if mime == STREAM_TYPE + "proto" else "json"


def end_stream(code: str, message: str) -> bytes:
    """A Connect stream that ends at once with an error: HTTP 200 and one end-of-stream
    envelope (flags, big-endian length, ``{"error": {"code", "message"}}``)."""
    payload = json.dumps({"error": {"code": code, "message": message}}).encode()
    return struct.pack(">BI", END_STREAM, len(payload)) + payload


class Unimplemented(InterpreterError):
    code, status = "unimplemented", 501


class SandboxGone(InterpreterError):
    """A call for a sandbox that is not running: Connect's ``unavailable`` with "was not
    found" in its message, which the SDK raises as SandboxNotRunningException (as for
    E2B's proxy), never ``not_found``, which ``files.exists`` would read as False."""

    code, status = "sandbox_not_running", 503
    designed = True


def connect_code(exc: InterpreterError) -> str:
    return CODES.get(exc.status, "internal")


class ConnectHandler(E2BHandler):
    """A Connect-RPC route: answers and errors in the Connect protocol's JSON shape."""

    async def sandbox(self) -> E2BSandbox:
        try:
            return await super().sandbox()
        except SandboxNotRunning as exc:
            raise SandboxGone(exc.message) from exc

    def message(self) -> dict[str, Any]:
        """The request message of a unary JSON call (``{}`` for an empty body)."""
        content_type = self.request.headers.get("Content-Type", "")
        if content_type.split(";", 1)[0].strip().lower() != "application/json":
            raise UnsupportedEncoding(
                f"Content-Type {content_type[:100]!r} is not served: this service speaks "
                "Connect with the JSON codec only (application/json)."
            )
        raw = self.raw_body()
        if not raw.strip():
            return {}
        try:
            parsed = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise ValidationFailed(f"Malformed JSON: {str(exc)[:200]}") from exc
        if not isinstance(parsed, dict):
            raise ValidationFailed("The request message must be a JSON object.")
        return parsed

    def answer(self, message: dict[str, Any]) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(message))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, InterpreterError):
            code, message, self.error_type = connect_code(exc), exc.message, exc.code
        elif isinstance(exc, tornado.web.HTTPError) and exc.status_code == 405:
            code = self.error_type = "unimplemented"
            message = f"Connect-RPC methods are called with POST, not {self.request.method}."
        else:
            code, self.error_type = "internal", "internal_error"
            message = "Internal error; the service logged the details."
        if code == "unimplemented":
            self.designed_error = True
        codec = streaming_codec(self.request.headers.get("Content-Type", ""))
        if codec is not None:
            # A streaming call's client reads its error from the stream's end only: from an
            # HTTP error status it learns nothing but "HTTP 501".
            self.set_status(200)
            self.set_header("Content-Type", f"{STREAM_TYPE}{codec}")
            self.finish(end_stream(code, message))
            return
        self.set_status(STATUSES[code])
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"code": code, "message": message}))


class UnimplementedHandler(ConnectHandler):
    """Any Connect-RPC method not served here: ``unimplemented``, naming it."""

    async def _refuse(self, service: str, method: str) -> None:
        raise Unimplemented(
            f"{service}/{method} is not supported by this service (an E2B-compatible "
            "code interpreter: it serves code execution, files and the filesystem "
            "calls Stat, ListDir, MakeDir, Move and Remove; see docs/design.md)."
        )

    post = get = put = delete = _refuse
