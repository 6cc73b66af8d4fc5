"""E2B sandboxes and code contexts as broker sessions, per API key.

A sandbox is a session: its id is the session's id and its default code context. Each
further context (``create_code_context``) is a session of its own, so contexts never share
state, as in E2B. Debug-mode clients (``E2B_DEBUG``) name no sandbox: each key gets one
default sandbox, created on first use and created again once its session has closed.

A sandbox made through the control plane gets an access token; data-plane requests for
that sandbox that carry it (``X-Access-Token``, or ``E2B-Traffic-Access-Token``) act with
the key that created it, since the SDK sends no API key there; it reaches no other
sandbox and not the control plane (``base.E2BHandler``). The registry lives in memory:
after a broker restart, sessions stay readable through ``/v1`` but not as sandboxes.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from interpreter.api.e2b import envs
from interpreter.broker import SessionBroker
from interpreter.errors import InterpreterError, NotFound
from interpreter.models import CreateSessionRequest

#: The sandbox id the SDK sends in debug mode.
DEBUG_SANDBOX_ID = "debug_sandbox_id"
#: E2B's default sandbox lifetime, when the client gives none.
DEFAULT_TIMEOUT_S = 300


class SandboxNotFound(NotFound):
    code = "sandbox_not_found"


@dataclass
class E2BSandbox:
    id: str
    owner: str
    token: str
    template: str
    timeout_s: float | None
    metadata: dict[str, str] = field(default_factory=dict)
    contexts: list[str] = field(default_factory=list)
    #: The ``cwd`` each context was created with (echoed back; see docs/design.md).
    cwds: dict[str, str] = field(default_factory=dict)
    killed: bool = False
    #: Debug mode: what the first run of this default sandbox is told of the one it
    #: replaced (it ended: culled, its kernel failed), then None.
    replaced: str | None = None
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    ends_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def session_of(self, context_id: str | None) -> str:
        """The session behind a context id of this sandbox (None: the default context)."""
        if context_id is None or context_id in ("", self.id):
            return self.id
        if context_id in self.contexts:
            return context_id
        raise NotFound(f"No code context '{context_id}' in this sandbox.")


class Sandboxes:
    def __init__(self, broker: SessionBroker) -> None:
        self.broker = broker
        self._by_id: dict[str, E2BSandbox] = {}
        self._defaults: dict[str, str] = {}
        self._lock = asyncio.Lock()

    async def create(
        self,
        owner: str,
        *,
        template: str = "code-interpreter-v1",
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        env: dict[str, str] | None = None,
        metadata: dict[str, str] | None = None,
    ) -> E2BSandbox:
        req = CreateSessionRequest(
            idle_timeout_s=timeout_s,
            env=envs.checked(env or {}),
            metadata={"origin": "e2b", "e2b_template": template, **(metadata or {})},
        )
        session = await self.broker.create(owner, req)
        sandbox = E2BSandbox(
            id=session.id,
            owner=owner,
            token=secrets.token_urlsafe(24),
            template=template,
            timeout_s=timeout_s,
            metadata=dict(metadata or {}),
        )
        if timeout_s:
            sandbox.ends_at = sandbox.started_at + timedelta(seconds=timeout_s)
        self._by_id[sandbox.id] = sandbox
        return sandbox

    async def default(self, owner: str) -> E2BSandbox:
        """The key's debug-mode sandbox; a fresh one when there is none or it has closed."""
        async with self._lock:
            known = self._by_id.get(self._defaults.get(owner, ""))
            if known is not None and known.id in self.broker.live:
                return known
            # The service's idle timeout, as for /v1 sessions: debug clients set none.
            sandbox = await self.create(owner, timeout_s=None)
            self._defaults[owner] = sandbox.id
            if known is not None and not known.killed:
                # Ended on the service's account: the client, which names no sandbox, is
                # told, or its variables and files are simply gone.
                try:
                    why = (await self.broker.get(owner, known.id)).closed_reason or "closed"
                except InterpreterError:
                    why = "closed"
                sandbox.replaced = (
                    f"[interp] The default sandbox of debug mode ({known.id}) ended ({why}); "
                    "this code runs in a fresh one: the variables and files of the old one "
                    f"are gone (its notebook stays readable at /v1/sessions/{known.id}/"
                    "notebook).\n"
                )
            return sandbox

    async def resolve(self, owner: str, sandbox_id: str | None) -> E2BSandbox:
        """The sandbox a data-plane request names (none, or the debug id: the default)."""
        if sandbox_id in (None, "", DEBUG_SANDBOX_ID):
            return await self.default(owner)
        return self.get(owner, sandbox_id)

    def get(self, owner: str, sandbox_id: str, *, killed: bool = False) -> E2BSandbox:
        """The key's sandbox by id (404 when unknown, or killed unless ``killed``)."""
        sandbox = self._by_id.get(sandbox_id)
        if sandbox is None or sandbox.owner != owner or (sandbox.killed and not killed):
            raise SandboxNotFound(f"Sandbox '{sandbox_id}' not found.")
        return sandbox

    def running(self, sandbox: E2BSandbox) -> bool:
        return not sandbox.killed and sandbox.id in self.broker.live

    def running_of(self, owner: str) -> list[E2BSandbox]:
        """The key's running sandboxes, oldest first."""
        found = [s for s in self._by_id.values() if s.owner == owner and self.running(s)]
        return sorted(found, key=lambda s: (s.started_at, s.id))

    async def connect(self, owner: str, sandbox_id: str, timeout_s: float | None) -> E2BSandbox:
        """The key's running sandbox (404 otherwise); a ``timeout_s`` longer than the
        time it has left extends it (a shorter one changes nothing, as on E2B)."""
        sandbox = self.get(owner, sandbox_id)
        if not self.running(sandbox):
            raise SandboxNotFound(f"Sandbox '{sandbox_id}' is no longer running.")
        if timeout_s and datetime.now(UTC) + timedelta(seconds=timeout_s) > sandbox.ends_at:
            await self.set_timeout(owner, sandbox_id, timeout_s)
        return sandbox

    def by_token(self, token: str) -> E2BSandbox | None:
        for sandbox in self._by_id.values():
            if secrets.compare_digest(sandbox.token.encode(), token.encode()):
                return sandbox
        return None

    async def kill(self, owner: str, sandbox_id: str) -> None:
        sandbox = self.get(owner, sandbox_id)
        # Kept, marked: its data-plane calls, the token's only ones, answer 502 (it is
        # not running), as E2B's proxy does and the SDK expects.
        sandbox.killed = True
        for session_id in [*sandbox.contexts, sandbox.id]:
            if session_id in self.broker.live:
                await self.broker.delete(owner, session_id)

    async def set_timeout(self, owner: str, sandbox_id: str, timeout_s: float) -> None:
        sandbox = self.get(owner, sandbox_id)
        for session_id in [sandbox.id, *sandbox.contexts]:
            await self.broker.set_idle_timeout(owner, session_id, timeout_s)
        sandbox.timeout_s = timeout_s
        sandbox.ends_at = datetime.now(UTC) + timedelta(seconds=timeout_s)

    async def add_context(self, sandbox: E2BSandbox) -> str:
        req = CreateSessionRequest(
            idle_timeout_s=sandbox.timeout_s,
            metadata={"origin": "e2b", "e2b_sandbox": sandbox.id},
        )
        session = await self.broker.create(sandbox.owner, req)
        sandbox.contexts.append(session.id)
        return session.id

    async def remove_context(self, sandbox: E2BSandbox, context_id: str) -> None:
        session_id = sandbox.session_of(context_id)
        if session_id == sandbox.id:
            raise NotFound("The default context cannot be removed; kill the sandbox instead.")
        sandbox.contexts.remove(session_id)
        sandbox.cwds.pop(session_id, None)
        if session_id in self.broker.live:
            await self.broker.delete(sandbox.owner, session_id)
