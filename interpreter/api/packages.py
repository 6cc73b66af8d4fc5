"""``GET /v1/sessions/{id}/packages``: the Python packages a session's kernel can import."""

from __future__ import annotations

import asyncio
import json

from interpreter.api.base import BaseHandler
from interpreter.models import SessionPackages


class PackagesHandler(BaseHandler):
    """The package list recorded for the session (as in its notebook's metadata): the
    image's recorded versions for docker, the broker's environment for local. A session
    that is no longer live answers from its notebook, which keeps the list."""

    async def get(self, session_id: str) -> None:
        session = await self.broker.get(self.owner, session_id)
        packages = session.packages
        if not packages and session.status == "closed":
            text = await self.broker.notebook_json(self.owner, session_id)
            packages = await asyncio.to_thread(_recorded_packages, text)
        self.send_json(
            SessionPackages(session_id=session.id, image=session.image, packages=packages)
        )


def _recorded_packages(notebook_json: str) -> dict[str, str]:
    """``metadata.interp.packages`` of a notebook's JSON (empty when it has none)."""
    try:
        meta = json.loads(notebook_json).get("metadata", {}).get("interp", {})
    except (ValueError, AttributeError):
        return {}
    packages = meta.get("packages") if isinstance(meta, dict) else None
    if not isinstance(packages, dict):
        return {}
    return {str(k): str(v) for k, v in packages.items()}
