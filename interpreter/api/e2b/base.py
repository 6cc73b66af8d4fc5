"""The handler base of the E2B surface: who is asking, which sandbox, and E2B's error shape.

Auth follows ``/v1``: without configured keys every request is the anonymous owner (and
the service binds loopback only); with keys, a request carries one of them (``X-API-Key``
as E2B's control plane gets it, or ``Authorization: Bearer``), or the access token of a
sandbox the control plane made (``X-Access-Token``, ``E2B-Traffic-Access-Token``). A
token is that one sandbox's, as E2B's envd token is: it reaches the data-plane routes
for that sandbox only (another ``E2b-Sandbox-Id`` is 401), never the control plane
(401: the SDK sends the API key there), and once its sandbox is gone its routes answer
that it is not running (an ``Authorization: Basic`` header, envd's choice of user, is not
a key and is ignored: there is one user). Errors are
``{"code": <status>, "message": ...}``, the body E2B's API and envd answer with, plus our
``type``.
"""

from __future__ import annotations

import json
from typing import Any

import tornado.web

from interpreter.api.base import BaseHandler, _matching
from interpreter.api.connections import mark_authenticated
from interpreter.api.e2b.sandboxes import (
    DEBUG_SANDBOX_ID,
    E2BSandbox,
    Sandboxes,
    SandboxNotFound,
)
from interpreter.broker import SessionBroker, owner_of
from interpreter.errors import InterpreterError, NotFound, Unauthorized
from interpreter.settings import Settings

SANDBOX_HEADER = "E2b-Sandbox-Id"
TOKEN_HEADERS = ("X-Access-Token", "E2B-Traffic-Access-Token")
#: The longest reason phrase of an error answer (the message, shortened).
REASON_CHARS = 300


def reason_phrase(message: str) -> str:
    """``message`` as an HTTP reason phrase: one line of printable ASCII (anything else,
    and the ``<`` and ``>`` tornado would refuse, become ``?``), at most
    :data:`REASON_CHARS` characters."""
    text = "".join(
        c if " " <= c <= "~" and c not in "<>" else "?" for c in " ".join(message.split())
    )
    if len(text) > REASON_CHARS:
        text = text[: REASON_CHARS - 3] + "..."
    return text or "Error"


class SandboxNotRunning(InterpreterError):
    """A data-plane call for a sandbox that is not running (killed, timed out, unknown, or
    another key's): 502 with "was not found", as E2B's proxy answers, which the SDK raises
    as ``SandboxNotRunningException`` for files and ``TimeoutException`` for ``run_code``;
    never a 404, which the SDK would read as a missing file or context."""

    code, status = "sandbox_not_running", 502
    designed = True

    @classmethod
    def named(cls, sandbox_id: str) -> SandboxNotRunning:
        return cls(
            f"Sandbox '{sandbox_id[:100]}' was not found: it was killed or timed out, or it "
            "belongs to another API key. Create a new sandbox."
        )


class E2BHandler(BaseHandler):
    #: Whether a sandbox's access token may authenticate this route (the data plane);
    #: the control plane's handlers say False and need an API key.
    accepts_token = True
    #: The sandbox whose access token authenticated this request (None: a key did, or
    #: there are no keys): the only sandbox the request reaches.
    token_sandbox: E2BSandbox | None = None

    def initialize(  # type: ignore[override]
        self, broker: SessionBroker, settings: Settings, sandboxes: Sandboxes, route: str = ""
    ) -> None:
        super().initialize(broker, settings, route or "e2b:unmatched")
        self.sandboxes = sandboxes

    def check_auth(self) -> None:
        self._identify()
        # The connection is the key's from now on, as on /v1 (its share of them).
        mark_authenticated(self.request, self.owner)

    def _identify(self) -> None:
        keys = self.conf.api_keys
        if not keys:
            self.key_id = self.owner
            return
        headers = self.request.headers
        presented = headers.get("X-API-Key")
        scheme = headers.get("Authorization", "").partition(" ")[0].lower()
        # ``Basic <user>:`` is envd's choice of user (the SDK's ``user=``), not a key.
        if presented is None and scheme == "bearer":
            presented = self.bearer_token()
        if presented is not None:
            key = _matching(presented.strip(), keys)
            if key is None:
                raise Unauthorized("Invalid API key.")
            self.owner = self.key_id = owner_of(key)
            return
        for name in TOKEN_HEADERS:
            token = headers.get(name)
            sandbox = self.sandboxes.by_token(token) if token else None
            if sandbox is not None:
                if not self.accepts_token:
                    raise Unauthorized(
                        f"{name} is a sandbox's access token: it reaches that sandbox's "
                        "files and code only. Creating, listing, connecting to, timing out "
                        "and killing sandboxes need the API key: send 'X-API-Key: <key>' "
                        "(E2B_API_KEY)."
                    )
                self.owner = self.key_id = sandbox.owner
                self.token_sandbox = sandbox
                return
        if self.get_query_argument("signature", None) is not None:
            raise Unauthorized(
                "Signed file URLs (download_url, upload_url) are not supported by this "
                "service: send the API key (X-API-Key) or the sandbox's access token."
            )
        raise Unauthorized(
            "Missing API key: send 'X-API-Key: <key>' (E2B_API_KEY), or the access token of "
            "a sandbox created through this service's control plane (E2B_API_URL)."
        )

    def sandbox_id(self) -> str | None:
        """The sandbox this data-plane request names (``E2b-Sandbox-Id``; None: none, or
        the debug id). With an access token: the token's sandbox, and 401 for another."""
        named = self.request.headers.get(SANDBOX_HEADER)
        if named in (None, "", DEBUG_SANDBOX_ID):
            named = None
        own = self.token_sandbox
        if own is None:
            return named
        if named is not None and named != own.id:
            raise Unauthorized(
                f"The access token belongs to sandbox '{own.id}': it reaches that sandbox "
                f"only, not '{named[:100]}'. Send that sandbox's own access token."
            )
        return own.id

    async def sandbox(self) -> E2BSandbox:
        """The running sandbox this data-plane request is for (debug clients: the key's
        default); :class:`SandboxNotRunning` for one that is gone or not this key's."""
        sandbox_id = self.sandbox_id()
        try:
            sandbox = await self.sandboxes.resolve(self.owner, sandbox_id)
        except SandboxNotFound as exc:
            raise SandboxNotRunning.named(sandbox_id or "") from exc
        if not self.sandboxes.running(sandbox):
            # Its session ended (idle timeout, lifetime): gone, though still registered.
            raise SandboxNotRunning.named(sandbox.id)
        return sandbox

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, InterpreterError):
            self.designed_error = self.designed_error or exc.designed
            code, message = exc.code, exc.message
            if exc.retry_after is not None:
                self.set_header("Retry-After", str(max(1, int(exc.retry_after))))
        elif isinstance(exc, tornado.web.HTTPError) and exc.status_code in (404, 405):
            code = "not_found" if exc.status_code == 404 else "method_not_allowed"
            message = f"Method {self.request.method} is not allowed on {self.request.path}."
            if exc.status_code == 404:
                message = exc.log_message or f"No route {self.request.path}."
        else:
            code, message = "internal_error", "Internal error; the service logged the details."
        self.error_type = code
        # E2B's JS SDK shows only the status line of most errors, not the body.
        self.set_status(status_code, reason=reason_phrase(message))
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps({"code": status_code, "message": message, "type": code}))


class E2BNotFoundHandler(E2BHandler):
    def prepare(self) -> None:
        super().prepare()
        if self._rejected is None:
            self._reject_after_body(
                NotFound(f"No route {self.request.path} on the E2B-compatible surface.")
            )
