"""A private, throw-away ``IPYTHONDIR`` for each kernel process.

IPython loads config files and runs startup files from its profile directory. The usual
one (``~/.ipython``) lies in the session's writable home, where user code could plant files
that would then run on every kernel restart. So each kernel gets a new empty directory under
the temporary directory instead, named after its process id.

The directory is removed when the process exits normally or on SIGTERM. A kernel killed
with SIGKILL cannot clean up after itself; the next kernel to start removes the
directories of processes that no longer exist.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import tempfile
from pathlib import Path
from types import FrameType

#: Name prefix of the directories; the process id follows, then a random part.
PREFIX = "interp-ipython-"


def private_ipython_dir() -> Path:
    """Create this process's directory, point ``IPYTHONDIR`` at it and arrange its removal.

    Returns:
        The new, empty directory.
    """
    parent = Path(tempfile.gettempdir())
    remove_stale(parent)
    owner = os.getpid()
    path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{owner}-", dir=parent))
    os.environ["IPYTHONDIR"] = str(path)
    atexit.register(_remove, path, owner)
    _remove_on_sigterm(path, owner)
    return path


def _remove(path: Path, owner: int) -> None:
    # A forked child (multiprocessing, os.fork) inherits atexit hooks and signal handlers;
    # only the kernel process itself may remove its directory.
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def remove_stale(parent: Path) -> list[Path]:
    """Remove the directories of kernels that are gone (killed before they could clean up).

    Only directories owned by this user whose process no longer exists are touched; symlinks
    never are.

    Args:
        parent: the directory to look in (the temporary directory).

    Returns:
        The directories removed.
    """
    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        pid = _owner_pid(entry.name)
        if pid is None or _alive(pid):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        # rmtree does not follow symlinks inside the tree either (fd-based on Linux).
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def _owner_pid(name: str) -> int | None:
    if not name.startswith(PREFIX):
        return None
    pid, _, _rest = name[len(PREFIX) :].partition("-")
    return int(pid) if pid.isdigit() else None


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, belongs to someone else
    return True


def _remove_on_sigterm(path: Path, owner: int) -> None:
    """Remove ``path`` on SIGTERM, then die of SIGTERM exactly as without the handler.

    The broker tells kernel exits apart by exit code and signal, so the handler only cleans
    up: it restores the default action and sends the signal again.
    """
    if owner == 1:
        # PID 1 of a container: the kernel ignores SIGTERM it has no handler for, and re-sending
        # it would not end the process. The container's tmpfs goes away with it anyway.
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        return  # someone else handles SIGTERM; do not take it over

    def handle(signum: int, frame: FrameType | None) -> None:
        _remove(path, owner)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    with contextlib.suppress(ValueError):  # not the main thread (tests, embedding)
        signal.signal(signal.SIGTERM, handle)
