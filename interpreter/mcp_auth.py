"""Bearer-token check in front of ``interp mcp --http`` (an ASGI wrapper).

Every HTTP request must carry ``Authorization: Bearer <token>`` with one of the configured
tokens; anything else gets ``401`` with a JSON error body and ``WWW-Authenticate: Bearer``,
before the MCP application sees it. Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Where ``interp mcp --http`` reads its accepted tokens (comma-separated) by default.
TOKEN_ENV = "INTERP_MCP_TOKENS"


class BearerAuth:
    """Wraps an ASGI app; HTTP requests without a valid bearer token get 401."""

    def __init__(self, app: ASGIApp, tokens: Iterable[str]) -> None:
        self.app = app
        self._tokens = [t.encode() for t in tokens if t]
        if not self._tokens:
            raise ValueError("BearerAuth needs at least one non-empty token")

    def accepts(self, header: bytes) -> bool:
        scheme, _, token = header.partition(b" ")
        if scheme.lower() != b"bearer" or not token.strip():
            return False
        given = token.strip()
        # Compare against every token, so the time taken does not say which one is near.
        return sum(hmac.compare_digest(given, t) for t in self._tokens) > 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = b""
            for name, value in scope.get("headers") or []:
                if name.lower() == b"authorization":
                    header = value
            if not self.accepts(header):
                await _unauthorized(send, "missing" if not header else "invalid")
                return
        await self.app(scope, receive, send)


async def _unauthorized(send: Send, what: str) -> None:
    body = json.dumps(
        {
            "error": {
                "type": "unauthorized",
                "message": f"{what} bearer token: send Authorization: Bearer <token>",
            }
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="interp-mcp"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
