"""Per-request observability: the ``X-Request-Id`` of a request and its one access line.

A client may name its request with ``X-Request-Id``; a value of 1 to 128 characters from
``A-Z a-z 0-9 . _ : = + / @ -`` is kept, anything else (or nothing) is replaced by a fresh
id. The id is echoed on every response, errors included, and appears in the request's
access line and in the line of the execution it submitted.
"""

from __future__ import annotations

import logging
import re
import uuid

from interpreter import logs

HEADER = "X-Request-Id"
_VALID = re.compile(r"[A-Za-z0-9._:=+/@-]{1,128}")
#: Methods kept as metric labels; any other becomes ``other`` (labels stay few).
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
#: Route label of requests that matched no route.
UNMATCHED = "unmatched"


def request_id(given: str | None) -> str:
    """``given`` when it is a reasonable id, else a new random one."""
    if given is not None and _VALID.fullmatch(given):
        return given
    return uuid.uuid4().hex


def method_label(method: str | None) -> str:
    return method if method in METHODS else "other"


def log_request(
    *,
    request_id: str,
    method: str,
    route: str,
    session_id: str | None,
    status: int,
    duration_ms: float,
    key_id: str | None,
    error: str | None,
    designed: bool = False,
) -> None:
    """Write the access line of one answered request (at ERROR level for a 5xx, else INFO;
    ``designed``: a 5xx that is the route's normal answer, at INFO). ``key_id`` names the
    API key (its owner id), never the key itself; ``error`` is the error type of an error
    answer."""
    fields = {
        "request_id": request_id,
        "method": method,
        "route": route,
        "session_id": session_id,
        "status": status,
        "duration_ms": round(duration_ms, 3),
        "key_id": key_id,
        "error": error,
    }
    level = logging.ERROR if status >= 500 and not designed else logging.INFO
    logs.emit(logs.ACCESS, "http_request", fields, level)
