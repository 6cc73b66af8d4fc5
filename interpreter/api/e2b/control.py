"""E2B's control plane (``E2B_API_URL``): create, list, connect to, inspect, time out
and kill sandboxes.

``POST /sandboxes`` (and ``/v2/sandboxes``, which newer SDKs call) creates a session; its
``timeout`` becomes the session's idle timeout, ``envVars`` its kernel environment. The
answer carries an access token that the SDK sends with every data-plane request for
that sandbox (it opens no route here: every one needs the API key);
``POST /sandboxes/{id}/connect`` gives it again for a running sandbox of the same key, and
``GET /v2/sandboxes`` lists the key's running sandboxes. Other sandbox actions (pause,
resume, metrics, fork, snapshots, network) answer 501 naming the action.
"""

from __future__ import annotations

import json
import urllib.parse
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from interpreter.api.e2b.base import E2BHandler
from interpreter.api.e2b.sandboxes import DEFAULT_TIMEOUT_S, E2BSandbox, SandboxNotFound
from interpreter.errors import InterpreterError, ValidationFailed
from interpreter.models import check_json_text
from interpreter.settings import Settings

#: The envd version we claim: new enough that the SDK sends no user name and may upload
#: octet-stream, old enough that it refuses file metadata (which is not kept here).
ENVD_VERSION = "0.5.7"
CLIENT_ID = "interp"
#: The longest sandbox timeout E2B accepts (24 h); also ours.
MAX_TIMEOUT_S = 86400


class NewSandbox(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    template_id: str = Field("code-interpreter-v1", alias="templateID", max_length=200)
    timeout: int = Field(DEFAULT_TIMEOUT_S, ge=0, le=MAX_TIMEOUT_S)
    metadata: dict[str, str] | None = None
    env_vars: dict[str, str] | None = Field(None, alias="envVars")

    @field_validator("metadata", "env_vars")
    @classmethod
    def _valid_unicode(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return None if value is None else check_json_text(value)


class ConnectBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    timeout: int | None = Field(None, ge=0, le=MAX_TIMEOUT_S)


class SetTimeout(BaseModel):
    model_config = ConfigDict(extra="ignore")
    timeout: int = Field(..., ge=0, le=MAX_TIMEOUT_S)


def sandbox_json(sandbox: E2BSandbox) -> dict[str, Any]:
    return {
        "templateID": sandbox.template,
        "sandboxID": sandbox.id,
        "clientID": CLIENT_ID,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": sandbox.token,
        "trafficAccessToken": sandbox.token,
        "domain": None,
    }


def detail_json(sandbox: E2BSandbox, settings: Settings) -> dict[str, Any]:
    return {**sandbox_json(sandbox), **listed_json(sandbox, settings)}


def listed_json(sandbox: E2BSandbox, settings: Settings) -> dict[str, Any]:
    """A sandbox as ``GET /v2/sandboxes`` lists it (no access tokens)."""
    return {
        "templateID": sandbox.template,
        "sandboxID": sandbox.id,
        "clientID": CLIENT_ID,
        "envdVersion": ENVD_VERSION,
        "startedAt": sandbox.started_at.isoformat(),
        "endAt": sandbox.ends_at.isoformat(),
        "cpuCount": max(1, int(settings.default_cpus)),
        "memoryMB": settings.default_memory_mb,
        "diskSizeMB": 0,
        "state": "running",
        "metadata": sandbox.metadata,
    }


class Unsupported(InterpreterError):
    code, status = "not_supported", 501


#: The most sandboxes one page lists (E2B's ``limit`` maximum).
MAX_LIMIT = 100


class ControlHandler(E2BHandler):
    """A control-plane route: an API key, never a sandbox's access token (E2B's SDK
    sends ``X-API-Key`` here)."""

    accepts_token = False


class SandboxesHandler(ControlHandler):
    async def get(self) -> None:
        """The key's running sandboxes, oldest first, filtered as E2B's list filters
        (``metadata``, ``state``, ``template``, ``startedAfter``), a page at a time
        (``limit``, ``nextToken``; the next page's token in ``X-Next-Token``)."""
        found = [s for s in self.sandboxes.running_of(self.owner) if self._matches(s)]
        if self.get_query_argument("order", "asc") == "desc":
            found.reverse()
        start, limit = self._page()
        page = found[start : start + limit]
        if start + limit < len(found):
            self.set_header("X-Next-Token", str(start + limit))
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps([listed_json(s, self.conf) for s in page]))

    def _matches(self, sandbox: E2BSandbox) -> bool:
        states = self.get_query_argument("state", "")
        if states and "running" not in states.split(","):
            return False  # nothing is ever paused here
        template = self.get_query_argument("template", "")
        if template and template != sandbox.template:
            return False
        after = self.get_query_argument("startedAfter", "")
        if after and sandbox.started_at <= _timestamp(after):
            return False
        wanted = self.get_query_argument("metadata", "")
        pairs = urllib.parse.parse_qsl(wanted, keep_blank_values=True)
        return all(
            sandbox.metadata.get(urllib.parse.unquote(k)) == urllib.parse.unquote(v)
            for k, v in pairs
        )

    def _page(self) -> tuple[int, int]:
        token = self.get_query_argument("nextToken", "0")
        limit = self.get_query_argument("limit", str(MAX_LIMIT))
        if not token.isdigit() or len(token) > 9:
            raise ValidationFailed("nextToken must be a token from X-Next-Token.")
        if not limit.isdigit() or not 1 <= int(limit) <= MAX_LIMIT:
            raise ValidationFailed(f"limit must be an integer from 1 to {MAX_LIMIT}.")
        return int(token), int(limit)

    async def post(self) -> None:
        body = self.parse(NewSandbox, optional=True)
        sandbox = await self.sandboxes.create(
            self.owner,
            template=body.template_id,
            timeout_s=body.timeout,
            env=body.env_vars,
            metadata=body.metadata,
        )
        self.send_json(sandbox_json(sandbox), 201)


class SandboxHandler(ControlHandler):
    async def get(self, sandbox_id: str) -> None:
        sandbox = self.sandboxes.get(self.owner, sandbox_id)
        if not self.sandboxes.running(sandbox):
            raise SandboxNotFound(f"Sandbox '{sandbox_id}' is no longer running.")
        self.send_json(detail_json(sandbox, self.conf))

    async def delete(self, sandbox_id: str) -> None:
        await self.sandboxes.kill(self.owner, sandbox_id)
        self.set_status(204)
        self.finish()


class SandboxTimeoutHandler(ControlHandler):
    async def post(self, sandbox_id: str) -> None:
        body = self.parse(SetTimeout)
        await self.sandboxes.set_timeout(self.owner, sandbox_id, body.timeout)
        self.set_status(204)
        self.finish()


class SandboxConnectHandler(ControlHandler):
    async def post(self, sandbox_id: str) -> None:
        body = self.parse(ConnectBody, optional=True)
        sandbox = await self.sandboxes.connect(self.owner, sandbox_id, body.timeout)
        self.send_json(sandbox_json(sandbox))


class SandboxActionHandler(ControlHandler):
    """Sandbox actions this service has no equivalent for: 501, never a 404 that the SDK
    would read as "sandbox not found"."""

    async def _refuse(self, sandbox_id: str, action: str) -> None:
        self.designed_error = True
        raise Unsupported(
            f"'{self.request.method} .../{action}' (sandbox {action}) is not supported by "
            "this service; see docs/design.md for what its E2B surface serves."
        )

    get = post = put = delete = _refuse


def _timestamp(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationFailed("startedAfter must be an ISO 8601 time.") from None
    if when.tzinfo is None:
        raise ValidationFailed("startedAfter must carry its time zone.")
    return when
