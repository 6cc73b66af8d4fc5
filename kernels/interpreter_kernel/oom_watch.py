"""Say at once when the session's memory limit kills one of its processes.

In a container, a process the user's code started (a ``multiprocessing`` worker, a
subprocess) that goes over the session's memory limit is killed by the cgroup's OOM
killer. The kernel lives on, and code waiting for that process may wait until the cell's
timeout: ``multiprocessing.Pool`` waits forever for a lost worker's task, so such a cell
was reported as a plain timeout, nothing saying why. While a cell runs, a thread reads the
cgroup's count of OOM kills; when it grows, a notice goes to the cell's stderr at once
(and a kill noticed only as the cell ends is reported then).

Only where the Docker backend asks for it (``INTERP_OOM_WATCH``): there the cgroup under
``/sys/fs/cgroup`` is the container's own (a private cgroup namespace). Elsewhere that
file is some other cgroup's, counting kills that are not the session's. A kernel killed
itself is reported by the broker (``kernel_died``, reason ``oom_killed``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

#: The count of OOM kills: cgroup v2's file, then v1's.
KILL_COUNTS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")
#: The memory limit in bytes: v2, then v1.
LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
#: How often a running cell's count is read, in seconds.
INTERVAL_S = 0.5


def read_kills(paths: tuple[str, ...] = KILL_COUNTS) -> int | None:
    """The cgroup's ``oom_kill`` count, or None when no file gives it."""
    for path in paths:
        try:
            with open(path) as f:
                for line in f:
                    name, _, value = line.partition(" ")
                    if name == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def read_limit_mb(paths: tuple[str, ...] = LIMITS) -> int | None:
    """The cgroup's memory limit in MiB, or None when there is none or it is unknown."""
    for path in paths:
        try:
            with open(path) as f:
                raw = f.read().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < 1 << 60:  # v1 says "no limit" with a huge number
            return int(raw) >> 20
        return None
    return None


def notice(killed: int, limit_mb: int | None, *, again: bool = False) -> str:
    """The stderr line for ``killed`` processes killed for memory during a cell; short
    when ``again`` (the cell has had the whole notice)."""
    if again:
        what = "process" if killed == 1 else "processes"
        return f"[interp] {killed} more {what} of this session killed for memory.\n"
    what, was, it = (
        ("A process", "was", "it") if killed == 1 else (f"{killed} processes", "were", "they")
    )
    limit = f" ({limit_mb} MB)" if limit_mb is not None else ""
    return (
        f"[interp] {what} of this session {was} killed for memory: {it} went over the "
        f"session's limit{limit}. The kernel and its variables are intact. Code that waits on "
        f"{'that process' if killed == 1 else 'those processes'} (a multiprocessing pool, say) "
        "may wait until the cell's timeout: interrupt it, then use less memory per process or "
        "fewer processes.\n"
    )


class OomWatch:
    """Reads the kill count while a cell runs (:meth:`begin` to :meth:`end`) and writes
    :func:`notice` when it grows."""

    def __init__(
        self,
        read: Callable[[], int | None] = read_kills,
        limit_mb: int | None = None,
        stderr: Callable[[], TextIO] = lambda: sys.stderr,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._read = read
        self._limit_mb = limit_mb
        self._stderr = stderr
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._seen = read()
        self._told = False  # the running cell has had the whole notice
        self._running = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the reading thread (before any cell: a thread started during a cell
        would have its output taken for that cell's, ever after)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="interp-oom-watch", daemon=True)
            self._thread.start()

    def begin(self, *_: Any) -> None:
        with self._lock:
            self._seen = self._read()  # kills between cells are no cell's
            self._told = False
        self._running.set()

    def end(self, *_: Any) -> None:
        self._running.clear()
        self.check()

    def check(self) -> int:
        """Write the notice if the count grew since last read; returns the kills seen."""
        with self._lock:
            now = self._read()
            if now is None or self._seen is None or now <= self._seen:
                if now is not None:
                    self._seen = now
                return 0
            killed, self._seen = now - self._seen, now
            again, self._told = self._told, True
        stream = self._stderr()
        stream.write(notice(killed, self._limit_mb, again=again))
        stream.flush()
        return killed

    def _loop(self) -> None:
        while True:
            self._running.wait()
            time.sleep(self._interval_s)
            if self._running.is_set():
                self.check()


def install(shell: Any) -> OomWatch | None:
    """Watch for OOM kills during each of ``shell``'s cells, if the environment asks
    (``INTERP_OOM_WATCH``) and the cgroup gives a count; returns the watch. Once per
    process: called again, it returns the first."""
    global _installed
    if _installed is not None:
        return _installed
    if os.environ.get("INTERP_OOM_WATCH") != "1" or read_kills() is None:
        return None
    watch = OomWatch(limit_mb=read_limit_mb())
    shell.events.register("pre_run_cell", watch.begin)
    shell.events.register("post_run_cell", watch.end)
    watch.start()
    _installed = watch
    return watch


_installed: OomWatch | None = None
