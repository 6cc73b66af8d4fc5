"""The policy file: read and checked (TOML, stdlib ``tomllib``), and reloaded when it changes.

A file that is not valid TOML, or whose content does not fit the schema
(:class:`~interpreter.policy.rules.PolicyFile`), raises :class:`PolicyFileError` with a
one-line message naming the line and the problem. :class:`PolicyWatcher` polls the file's
modification time off the event loop; a bad edit keeps the last good policy and is logged
(and shown by ``GET /v1/policy``) until the file is fixed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from interpreter.policy.rules import PolicyFile

log = logging.getLogger(__name__)


class PolicyFileError(Exception):
    """The policy file cannot be used; ``str()`` is one line naming the line and problem."""


@dataclass(frozen=True)
class LoadedPolicy:
    """A policy file that passed its checks."""

    path: Path
    policy: PolicyFile
    sha256: str
    mtime_ns: int
    loaded_at: datetime


def parse(text: str, path: str = "policy file") -> PolicyFile:
    """Check the text of a policy file; raises PolicyFileError."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyFileError(f"{path}: {exc}") from None
    try:
        return PolicyFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err.get("loc", ()))
        where = _line_of(text, loc)
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise PolicyFileError(f"{path}: line {where}: {dotted}: {msg}{more}") from None


def load(path: Path) -> LoadedPolicy:
    """Read and check the file at ``path`` (blocking: call off the event loop)."""
    try:
        raw = path.read_bytes()
        mtime = path.stat().st_mtime_ns
    except OSError as exc:
        raise PolicyFileError(f"{path}: cannot read the policy file: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyFileError(f"{path}: not UTF-8 text") from None
    policy = parse(text, str(path))
    return LoadedPolicy(
        path=path,
        policy=policy,
        sha256=hashlib.sha256(raw).hexdigest(),
        mtime_ns=mtime,
        loaded_at=datetime.now(UTC),
    )


def _line_of(text: str, loc: tuple[Any, ...]) -> int:
    """Best line for a schema error at ``loc``: the last line naming its innermost key,
    searched after the line of its enclosing table; 1 when nothing is found."""
    lines = text.splitlines()
    line = 0
    for part in loc:
        if isinstance(part, int):
            # The n-th [[...]] array entry after the current line.
            found = [
                i for i, text_line in enumerate(lines) if i >= line and text_line.startswith("[[")
            ]
            if part < len(found):
                line = found[part]
            continue
        pattern = re.compile(rf"(^|[\s.\[\"']){re.escape(str(part))}(\s*=|[\]\".'\s]|$)")
        for i in range(line, len(lines)):
            if pattern.search(lines[i].split("#", 1)[0]):
                line = i
                break
    return line + 1


class PolicyWatcher:
    """The current policy of a running service, reloaded when its file changes."""

    def __init__(self, loaded: LoadedPolicy, interval_s: float) -> None:
        self.current = loaded
        self.interval_s = interval_s
        #: Why the last change of the file was refused (None when it is in use).
        self.error: str | None = None
        self._seen_mtime = loaded.mtime_ns
        self._task: asyncio.Task[None] | None = None

    @property
    def policy(self) -> PolicyFile:
        return self.current.policy

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll(), name="policy-reload")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.check()
            except Exception:
                log.exception("checking the policy file failed")

    async def check(self) -> bool:
        """Reload when the file changed; returns whether a new policy is in use."""
        path = self.current.path
        try:
            mtime = (await asyncio.to_thread(path.stat)).st_mtime_ns
        except OSError as exc:
            self._refuse(mtime=None, why=f"{path}: cannot read the policy file: {exc.strerror}")
            return False
        if mtime == self._seen_mtime:
            return False
        try:
            loaded = await asyncio.to_thread(load, path)
        except PolicyFileError as exc:
            self._refuse(mtime, str(exc))
            return False
        self._seen_mtime = loaded.mtime_ns
        self.error = None
        if loaded.sha256 == self.current.sha256:
            return False
        self.current = loaded
        log.info("policy reloaded from %s (sha256 %s)", path, loaded.sha256[:12])
        return True

    def _refuse(self, mtime: int | None, why: str) -> None:
        if mtime is not None:
            self._seen_mtime = mtime
        if why != self.error:
            log.warning("policy file change refused, the last good policy stays: %s", why)
        self.error = why

    def status(self) -> dict[str, Any]:
        """What ``GET /v1/policy`` shows."""
        return {
            "file": str(self.current.path),
            "sha256": self.current.sha256,
            "loaded_at": self.current.loaded_at.isoformat(),
            "error": self.error,
            "policies": sorted(self.policy.policies),
            "keys": [{"name": k.name, "policy": k.policy} for k in self.policy.keys],
        }
