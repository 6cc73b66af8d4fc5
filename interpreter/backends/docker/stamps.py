"""The broker's side of the kernels' orphan watchdog: stamps that say "a broker is here".

While a Docker broker runs, it touches ``broker-alive`` in every kernel runtime directory
in its directory of them (sessions' and warm-pool kernels' alike, rundirs) every
``interval_s`` seconds.
A kernel whose stamp goes stale for ``orphan_kernel_timeout_s`` ends itself
(``interpreter_kernel.watchdog``), so a container kept for a broker that never comes back
does not run forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

from interpreter.backends.docker.config import BROKER_STAMP

log = logging.getLogger(__name__)


def runtime_dirs(root: Path) -> list[str]:
    """The kernel runtime directories in ``root`` (the broker's directory of them).
    Symlinks are not followed."""
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]


def stamp_all(root: Path) -> int:
    """Touch the stamp in each kernel runtime directory in ``root``; returns how many.

    Never follows a symlink: a kernel may own its runtime directory (a broker that is not
    root cannot take it back), and must not be able to redirect the broker's write.
    """
    count = 0
    for directory in runtime_dirs(root):
        path = os.path.join(directory, BROKER_STAMP)
        try:
            try:
                os.utime(path, follow_symlinks=False)
            except FileNotFoundError:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
                os.close(fd)
            count += 1
        except OSError as exc:  # a directory going away, or a planted symlink: skip it
            log.debug("could not stamp %s: %s", path, exc)
    return count


async def stamp_forever(root: Path, interval_s: float) -> None:
    """Stamp every ``interval_s`` seconds until cancelled (file work off the loop)."""
    while True:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(stamp_all, root)
        await asyncio.sleep(interval_s)


def stamp_interval(orphan_after_s: float) -> float:
    """How often to stamp so that a live broker is never taken for gone."""
    return max(0.5, min(60.0, orphan_after_s / 4))
