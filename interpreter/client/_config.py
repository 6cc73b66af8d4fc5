"""Connection settings shared by ``Client`` and ``AsyncClient``."""

from __future__ import annotations

import os
import socket
from typing import Any

import httpx

from interpreter._version import __version__
from interpreter.client._errors import InvalidArgumentError
from interpreter.client._retry import (
    DEFAULT_BACKOFF_S,
    DEFAULT_MAX_RETRIES,
    RetryPolicy,
    check_max_retries,
)

DEFAULT_URL = "http://127.0.0.1:8700"
URL_ENV = "INTERP_URL"
API_KEY_ENV = "INTERP_API_KEY"
MAX_RETRIES_ENV = "INTERP_MAX_RETRIES"


def client_settings(
    base_url: str | None, api_key: str | None, headers: dict[str, str] | None
) -> tuple[str, dict[str, str]]:
    """Resolve the base URL and the default headers; arguments win over the environment."""
    url = check_url(
        (base_url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/"),
        "base_url" if base_url else f"${URL_ENV}",
    )
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
    if key and not (key.isascii() and key.isprintable()):
        where = "api_key" if api_key is not None else f"${API_KEY_ENV}"
        raise InvalidArgumentError(
            f"{where} is not an API key the service can have: keys are printable ASCII "
            "(check for a typographic quote or a line break pasted with it)"
        )
    all_headers = {"User-Agent": f"interp-sdk/{__version__}"}
    if key:
        all_headers["Authorization"] = f"Bearer {key}"
    all_headers.update(headers or {})
    return url, all_headers


def check_url(url: str, source: str) -> str:
    """``url`` if it can be a service's address (http or https, with a host); else an
    InvalidArgumentError naming where it came from, before anything is sent."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"{source} is not a URL ({exc}): got {url!r}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidArgumentError(
            f"{source} must be the service's http:// or https:// URL with a host, "
            f"e.g. {DEFAULT_URL}: got {url!r}"
        )
    return url


def retry_policy(max_retries: int | None, retry_backoff: float | None) -> RetryPolicy:
    """The retry policy; the argument wins over ``$INTERP_MAX_RETRIES``, then the default 2."""
    if max_retries is not None:
        count = check_max_retries(max_retries, "max_retries")
    elif (env := os.environ.get(MAX_RETRIES_ENV)) is not None and env.strip():
        count = check_max_retries(env, f"${MAX_RETRIES_ENV}")
    else:
        count = DEFAULT_MAX_RETRIES
    backoff = DEFAULT_BACKOFF_S if retry_backoff is None else retry_backoff
    return RetryPolicy(max_retries=count, backoff_s=backoff)


#: Requests go out as two writes (headers, then body); without TCP_NODELAY, Nagle's
#: algorithm and the server's delayed ACK stall every small request by tens of ms.
SOCKET_OPTIONS = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


def request_timeout(default: httpx.Timeout, call: Any) -> httpx.Timeout:
    """The call's timeout: the client default, or no read limit while user code runs."""
    if getattr(call, "unbounded", False):
        return httpx.Timeout(
            connect=default.connect, read=None, write=default.write, pool=default.pool
        )
    return default
