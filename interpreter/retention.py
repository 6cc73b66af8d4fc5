"""Removing closed sessions once they are older than the retention (``retain_closed_days``).

A closed session keeps its notebook, artifacts, workspace files, executions and audit links
so that a reviewer can read and verify it. Without a retention they stay for ever and the
data directory only grows. With one, a closed session is removed that many days after it
closed: first its rows in ``state.db`` (one transaction, which leaves a tombstone saying
whose it was and when it went: its routes then answer ``410 session_purged``), then its
directory. A broker that stops between the two finds the directory at its next sweep by
the tombstone and removes it then. Each session's chain is its own, so removing one leaves
every other one verifiable.

A session still mounted on its workspace quota is left for a later sweep (the broker
releases quotas of closed sessions when it starts), and so is one whose close is still
under way (its notebook may still be flushed).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

from interpreter import quota
from interpreter.store import Store, Writer
from interpreter.tree import remove_tree

log = logging.getLogger(__name__)

#: Sessions removed per sweep at most: a broker with a long backlog (a retention just
#: turned on) catches up over a few sweeps instead of holding the store's writer.
BATCH = 50


class Retention:
    """Removes closed sessions older than ``days`` (0: never) under ``sessions_dir``."""

    def __init__(
        self,
        store: Store,
        writer: Writer,
        sessions_dir: Path,
        days: float,
    ) -> None:
        self.store = store
        self.writer = writer
        self.sessions_dir = sessions_dir
        self.days = days
        #: Directories of removed sessions may be left (a stop between the store and the
        #: disk, a removal that failed): looked for at the first sweep and after a failure.
        self._look_for_leftovers = True

    async def sweep(self, now: datetime, busy: Callable[[str], bool]) -> list[str]:
        """Remove what is due at ``now`` but the sessions that are ``busy`` (whose close is
        still under way); returns the ids of the sessions removed."""
        if not self.days:
            return []
        if self._look_for_leftovers:
            self._look_for_leftovers = False
            await self._remove_leftovers()
        cutoff = now - timedelta(days=self.days)
        due = await asyncio.to_thread(self.store.closed_before, cutoff, BATCH)
        removed = []
        for session_id in due:
            if busy(session_id):
                continue
            directory = self.sessions_dir / session_id
            if await asyncio.to_thread(quota.is_mounted, directory / "workspace"):
                log.warning(
                    "session %s is past its retention but its workspace quota is still "
                    "mounted; it is kept until the quota is released",
                    session_id,
                )
                continue
            if not await self.writer.run(partial(self.store.purge_session, session_id)):
                continue
            await self._remove_directory(session_id)
            removed.append(session_id)
        if removed:
            log.info(
                "removed %d closed session%s older than the retention of %g days: %s",
                len(removed),
                "" if len(removed) == 1 else "s",
                self.days,
                ", ".join(removed),
            )
        return removed

    async def _remove_leftovers(self) -> None:
        names = await asyncio.to_thread(_names, self.sessions_dir)
        for session_id in await asyncio.to_thread(self.store.purged_among, names):
            await self._remove_directory(session_id)

    async def _remove_directory(self, session_id: str) -> None:
        try:
            await asyncio.to_thread(_remove, self.sessions_dir, session_id)
        except OSError as exc:
            self._look_for_leftovers = True
            log.error(
                "the files of removed session %s could not all be deleted (%s); the next "
                "sweep tries again",
                session_id,
                exc,
            )


def _names(directory: Path) -> list[str]:
    try:
        return [entry.name for entry in os.scandir(directory) if entry.is_dir()]
    except FileNotFoundError:
        return []


def _remove(sessions_dir: Path, name: str) -> None:
    fd = os.open(sessions_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        remove_tree(fd, name)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)
