"""Connection settings shared by ``Client`` and ``AsyncClient``."""

from __future__ import annotations

import os
import socket
from typing import Any

import httpx

from interpreter._version import __version__

DEFAULT_URL = "http://127.0.0.1:8700"
URL_ENV = "INTERP_URL"
API_KEY_ENV = "INTERP_API_KEY"


def client_settings(
    base_url: str | None, api_key: str | None, headers: dict[str, str] | None
) -> tuple[str, dict[str, str]]:
    """Resolve the base URL and the default headers; arguments win over the environment."""
    url = (base_url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
    all_headers = {"User-Agent": f"interp-sdk/{__version__}"}
    if key:
        all_headers["Authorization"] = f"Bearer {key}"
    all_headers.update(headers or {})
    return url, all_headers


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
