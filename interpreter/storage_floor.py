"""The data directory's free-space floor: below it, no new work (507 ``storage_full``).

Every notebook, artifact and ``state.db`` lives on the data directory's disk. When that disk
runs low the broker refuses new sessions, executions and uploads with ``storage_full``
before anything could be half-written; what is already stored stays as it is (notebooks are
replaced atomically, so a write that fails leaves the previous copy whole).

``statvfs`` costs microseconds, so the floor is checked at every admission, not polled.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path
from typing import Literal

from interpreter.errors import StorageFull
from interpreter.models import ErrorInfo, Execution

_FULL = (errno.ENOSPC, errno.EDQUOT)


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


def below(data_dir: Path, floor_mb: int) -> bool:
    """Whether the data directory has less than ``floor_mb`` MiB free (where
    :func:`check` refuses)."""
    try:
        check(data_dir, floor_mb)
    except StorageFull:
        return True
    return False


def failure_reason(exc: BaseException) -> str:
    """The reason of an execution the broker could not finish: ``storage_full`` when the
    data disk ran out of space (an artifact, the notebook or the record did not fit: sqlite
    says ``SQLITE_FULL``, "database or disk is full"), else ``broker_error``."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _FULL:
            return "storage_full"
        # An error raised by hand (not by SQLite) has no code.
        code = getattr(seen, "sqlite_errorcode", None) if isinstance(seen, sqlite3.Error) else None
        if isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_FULL:
            return "storage_full"
        seen = seen.__cause__ or seen.__context__
    return "broker_error"


def unrecorded_answer(execution: Execution) -> Execution:
    """What a client is told of an execution that ran but whose final record did not fit
    on the data disk: its output, status ``error``, reason ``storage_full``, and that its
    record is written once space is freed and it must not be run again."""
    told = execution.model_copy(deep=True)
    told.status, told.reason = "error", "storage_full"
    told.error = ErrorInfo(
        ename="StorageFull",
        evalue=f"This code ran and ended '{execution.status}' (its output is here), but the "
        "service's data disk is full, so its record could not be written. The record is kept "
        "in memory and written once space is freed; GET this execution then gives it as "
        "recorded (should the service stop first, it stays as last saved while the code "
        "ran). Do not run it again: it has run.",
        traceback=[],
    )
    return told


#: How far an execution the broker could not finish got: never sent to the kernel, sent
#: (it may have run in part), or run to its end (the kernel said it was done).
Ran = Literal["not_run", "started", "ended"]

#: The error of an execution that did not fit on the data disk, by how far it got: one
#: that ran must not be told to run again (it said "Free space and run it again" of a cell
#: that had run to its end, found by an outside operations tester).
_FULL_TEXT: dict[Ran, str] = {
    "not_run": "The service's data disk is full, so this code was not run; earlier cells are "
    "kept. Free space and send it again.",
    "started": "This code was sent to the kernel and may have run, in whole or in part, but "
    "the service's data disk is full, so its outputs could not all be kept: the output here "
    "is what was kept; earlier cells are kept. Check the session's state before running it "
    "again.",
    "ended": "This code ran to its end, but the service's data disk is full, so its outputs "
    "could not all be kept: the output here is what was kept; earlier cells are kept. Do not "
    "run it again: it has run.",
}


#: Why a stream's full-text artifact was not stored, when it did not fit.
UNSTORED_BECAUSE = "the service's data disk was full"
#: Why, when the data disk refused its write for another reason (an I/O error, a directory
#: made read-only or replaced under the broker).
UNSTORED_REFUSED = "the service's data disk refused the write"


def failure_error(reason: str, ran: Ran = "not_run") -> ErrorInfo:
    """The Execution's ``error`` for :func:`failure_reason` (never null, no host path), for
    an execution that got as far as ``ran``."""
    if reason == "storage_full":
        return ErrorInfo(ename="StorageFull", evalue=_FULL_TEXT[ran], traceback=[])
    return ErrorInfo(
        ename="BrokerError",
        evalue="The service failed while handling this execution's outputs; see its log.",
        traceback=[],
    )
