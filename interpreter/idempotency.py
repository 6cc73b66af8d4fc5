"""Idempotency keys: a retried request gets the first one's result, never a second run.

An agent whose HTTP call times out cannot tell whether the session was created or the code
ran. Sending the same ``Idempotency-Key`` again makes the retry safe (docs/security.md R-10):
the first request with a key does the work and records which resource it made; a repeat
with the same key and the same request gets that resource back; the same key with a
different request is refused (422). A repeat that arrives while the first is still being
processed waits for it. Keys are per API key and per scope (session creation, or the
executions of one session), and are forgotten after ``idempotency_ttl_s``.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from interpreter.errors import IdempotencyKeyReused, ValidationFailed
from interpreter.store import Store, utcnow

HEADER = "Idempotency-Key"
_VALID_KEY = re.compile(r"[\x21-\x7e]{1,255}")

Writer = Callable[[Callable[[], Any]], Awaitable[Any]]


def check_key(key: str) -> str:
    """The key itself, or ValidationFailed when it is not 1-255 visible ASCII characters."""
    if not _VALID_KEY.fullmatch(key):
        raise ValidationFailed(
            f"The {HEADER} header must be 1 to 255 visible ASCII characters "
            "(a UUID is a good choice)."
        )
    return key


def request_hash(*parts: str) -> str:
    """A fingerprint of a request, to tell a retry from a different request."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()


class IdempotencyKeys:
    """Remembers, per (owner, scope, key), which resource a request made.

    Args:
        store: where finished requests are remembered (survives broker restarts).
        write: runs a store write on the broker's ordered writer thread.
        ttl_s: how long a key is remembered.
    """

    def __init__(self, store: Store, write: Writer, ttl_s: float) -> None:
        self.store = store
        self._write = write
        self.ttl = timedelta(seconds=ttl_s)
        self._inflight: dict[tuple[str, str, str], tuple[str, asyncio.Future[str]]] = {}

    async def run(
        self,
        owner: str,
        scope: str,
        key: str,
        fingerprint: str,
        action: Callable[[], Awaitable[str]],
    ) -> tuple[str, bool]:
        """Run ``action`` once for this key; returns (resource id, whether it was a replay).

        Raises:
            IdempotencyKeyReused: the key was used for a different request.
            whatever ``action`` raises: then nothing is remembered and a retry runs again.
        """
        ident = (owner, scope, key)
        pending = self._inflight.get(ident)
        if pending is not None:
            self._same_request(pending[0], fingerprint)
            return await asyncio.shield(pending[1]), True
        found = await asyncio.to_thread(self.store.get_idempotent, owner, scope, key)
        if found is not None and not self._expired(found[2]):
            self._same_request(found[0], fingerprint)
            return found[1], True
        if ident in self._inflight:  # another request took the key while we looked
            return await self.run(owner, scope, key, fingerprint, action)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        # A failure is handed to any waiting repeat; nobody waiting must not warn.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._inflight[ident] = (fingerprint, future)
        try:
            resource_id = await action()
            # Remembered before the key leaves _inflight, so no repeat can slip between.
            await self._write(
                lambda: self.store.put_idempotent(owner, scope, key, fingerprint, resource_id)
            )
        except BaseException as exc:
            self._inflight.pop(ident, None)
            if isinstance(exc, Exception):
                future.set_exception(exc)
            else:
                future.cancel()
            raise
        future.set_result(resource_id)
        self._inflight.pop(ident, None)
        return resource_id, False

    async def expire(self) -> int:
        """Forget keys older than the TTL; returns how many."""
        cutoff = utcnow() - self.ttl
        count: int = await self._write(lambda: self.store.expire_idempotent(cutoff))
        return count

    def _expired(self, created_at: str) -> bool:
        return datetime.fromisoformat(created_at) < utcnow() - self.ttl

    @staticmethod
    def _same_request(remembered: str, fingerprint: str) -> None:
        if remembered != fingerprint:
            raise IdempotencyKeyReused(
                f"This {HEADER} was already used for a different request; use a new key "
                "for a new request, or resend the original request unchanged."
            )
