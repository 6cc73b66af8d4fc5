"""The policy file: read and checked (TOML, stdlib ``tomllib``), and reloaded when it changes.

A file that is not valid TOML, or whose content does not fit the schema
(:class:`~interpreter.policy.rules.PolicyFile`), raises :class:`PolicyFileError` with a
one-line message naming the line and the problem. :class:`PolicyWatcher` polls the file
off the event loop and compares its content's digest with the last one it saw (not its
size and mtime: two edits within one tick of the file system's clock, or a tool that
restores the mtime, leave those unchanged); a policy file is a few kilobytes, so reading
it at every poll costs nothing worth saving. A bad edit keeps the last good policy and is
logged once (and shown by ``GET /v1/policy``) until the file is fixed.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
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
        # A misspelt field is two errors, the one required missing and an unknown one:
        # the unknown one is what to fix, so it is said first, with the name it misses.
        errors = sorted(exc.errors(), key=lambda e: e.get("type") != "extra_forbidden")
        err = errors[0]
        loc = tuple(err.get("loc", ()))
        where = _line_of(text, loc)
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field" + _meant(loc, errors[1:])
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise PolicyFileError(f"{path}: line {where}: {dotted}: {msg}{more}") from None


def _meant(loc: tuple[Any, ...], others: list[Any]) -> str:
    """``; did you mean 'x'?`` when a field required beside the unknown one at ``loc`` is
    missing and its name is close (``defualt`` for ``default``)."""
    missing = [
        str(e["loc"][-1])
        for e in others
        if e.get("type") == "missing" and tuple(e.get("loc", ()))[:-1] == loc[:-1]
    ]
    close = difflib.get_close_matches(str(loc[-1]), missing, n=1) if loc else []
    return f"; did you mean '{close[0]}'?" if close else ""


def load(path: Path) -> LoadedPolicy:
    """Read and check the file at ``path`` (blocking: call off the event loop)."""
    return _checked(path, _read(path))


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise PolicyFileError(f"{path}: cannot read the policy file: {exc.strerror}") from None


def _checked(path: Path, raw: bytes) -> LoadedPolicy:
    """Check the content ``raw`` read from ``path``; raises PolicyFileError."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyFileError(f"{path}: not UTF-8 text") from None
    policy = parse(text, str(path))
    return LoadedPolicy(
        path=path,
        policy=policy,
        sha256=_digest(raw),
        loaded_at=datetime.now(UTC),
    )


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


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
        #: Digest of the content last looked at, loaded or refused (None: unreadable).
        self._seen: str | None = loaded.sha256
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
        """Reload when the file's content changed; returns whether a new policy is in use.

        Unchanged content (the same digest as at the last check) is neither parsed nor
        logged, whatever its mtime says."""
        path = self.current.path
        try:
            raw = await asyncio.to_thread(_read, path)
        except PolicyFileError as exc:
            self._seen = None  # whatever it holds when it is back is looked at
            self._refuse(str(exc))
            return False
        digest = _digest(raw)
        if digest == self._seen:
            return False
        self._seen = digest
        try:
            loaded = await asyncio.to_thread(_checked, path, raw)
        except PolicyFileError as exc:
            self._refuse(str(exc))
            return False
        self.error = None
        if loaded.sha256 == self.current.sha256:
            return False
        self.current = loaded
        log.info("policy reloaded from %s (sha256 %s)", path, loaded.sha256[:12])
        return True

    def _refuse(self, why: str) -> None:
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
