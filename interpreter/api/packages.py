"""``GET /v1/sessions/{id}/packages``: the Python packages a session's kernel can import."""

from __future__ import annotations

from interpreter.api.base import BaseHandler
from interpreter.models import SessionPackages


class PackagesHandler(BaseHandler):
    """The package list recorded for the session (as in its notebook's metadata): the
    image's recorded versions for docker, the broker's environment for local."""

    async def get(self, session_id: str) -> None:
        session = await self.broker.get(self.owner, session_id)
        self.send_json(
            SessionPackages(session_id=session.id, image=session.image, packages=session.packages)
        )
