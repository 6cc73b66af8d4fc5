"""envd's Connect-RPC routes (``/<package>.<Service>/<Method>``) as the SDK calls them.

The SDK calls envd's ``filesystem.Filesystem`` and ``process.Process`` services with the
Connect protocol and its JSON codec: a unary call is ``POST`` with an ``application/json``
body, answered ``200`` with the response message, or with an error status and
``{"code": "<connect code>", "message": ...}`` (the SDK reads a plain 404 as
``not_found``, so an unserved method must never answer that). Every method this service
does not serve answers ``unimplemented`` (HTTP 501), naming the method.
"""

from __future__ import annotations

import json
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
