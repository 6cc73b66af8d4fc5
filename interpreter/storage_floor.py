"""The data directory's free-space floor: below it, no new work (507 ``storage_full``).

Every notebook, artifact and ``state.db`` lives on the data directory's disk. When that disk
runs low the broker refuses new sessions, executions and uploads with ``storage_full``
before anything could be half-written; what is already stored stays as it is (notebooks are
replaced atomically, so a write that fails leaves the previous copy whole).

``statvfs`` costs microseconds, so the floor is checked at every admission, not polled.
"""

from __future__ import annotations

import os
from pathlib import Path

from interpreter.errors import StorageFull


def free_mb(data_dir: Path) -> int:
    """Free MiB for an unprivileged writer on the data directory's filesystem."""
    st = os.statvfs(data_dir)
    return (st.f_bavail * st.f_frsize) >> 20


def check(data_dir: Path, floor_mb: int) -> None:
    """Raise StorageFull when the data directory has less than ``floor_mb`` MiB free."""
    if floor_mb <= 0:
        return
    try:
        free = free_mb(data_dir)
    except OSError:
        return  # not created yet: nothing to protect
    if free < floor_mb:
        raise StorageFull.floor(free, floor_mb)
