"""The data directory's owner: one broker at a time, by a lock held for its lifetime.

Two brokers on one data directory would each take the other's sessions for leftovers of
a crash (the second's startup recovery closes the first's live sessions in the shared
``state.db`` and unmounts their workspaces). The lock is ``flock`` on ``broker.lock`` in
the data directory: the kernel releases it when the holder exits however it ends, so a
broker restarted after a SIGKILL starts normally. Read-only tools (``interp audit verify``)
do not take it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

#: The lock file, in the data directory.
LOCK_NAME = "broker.lock"


class DataDirInUse(Exception):
    """Another process (a broker) holds the data directory's lock."""


class DataDirLock:
    """The exclusive lock on a data directory; :meth:`release` (or exiting) lets it go."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirLock:
        """Take the lock of ``data_dir`` (which exists), or raise DataDirInUse at once."""
        path = data_dir / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            raise DataDirInUse(
                f"the data directory {data_dir} is in use by another broker{who}; "
                "stop it first, or give this one its own --data-dir"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        # Who holds it, for the message above (best effort: the disk may be full).
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd, path)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor releases the flock
            self._fd = None


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode().strip())
    return None
