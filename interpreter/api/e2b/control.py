"""E2B's control plane (``E2B_API_URL``): create, inspect, time out and kill sandboxes.

``POST /sandboxes`` (and ``/v2/sandboxes``, which newer SDKs call) creates a session; its
``timeout`` becomes the session's idle timeout, ``envVars`` its kernel environment. The
answer carries an access token that the SDK sends with every data-plane request.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from interpreter.api.e2b.base import E2BHandler
from interpreter.api.e2b.sandboxes import DEFAULT_TIMEOUT_S, E2BSandbox, SandboxNotFound
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
    return {
        **sandbox_json(sandbox),
        "startedAt": sandbox.started_at.isoformat(),
        "endAt": sandbox.ends_at.isoformat(),
        "cpuCount": max(1, int(settings.default_cpus)),
        "memoryMB": settings.default_memory_mb,
        "diskSizeMB": 0,
        "state": "running",
        "metadata": sandbox.metadata,
    }


class SandboxesHandler(E2BHandler):
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


class SandboxHandler(E2BHandler):
    async def get(self, sandbox_id: str) -> None:
        sandbox = self.sandboxes.get(self.owner, sandbox_id)
        if not self.sandboxes.running(sandbox):
            raise SandboxNotFound(f"Sandbox '{sandbox_id}' is no longer running.")
        self.send_json(detail_json(sandbox, self.conf))

    async def delete(self, sandbox_id: str) -> None:
        await self.sandboxes.kill(self.owner, sandbox_id)
        self.set_status(204)
        self.finish()


class SandboxTimeoutHandler(E2BHandler):
    async def post(self, sandbox_id: str) -> None:
        body = self.parse(SetTimeout)
        await self.sandboxes.set_timeout(self.owner, sandbox_id, body.timeout)
        self.set_status(204)
        self.finish()
