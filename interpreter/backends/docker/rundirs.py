"""Where kernels' ipc directories live on the host: short, neutral paths the kernel may see.

A kernel's runtime directory is bind-mounted into its container at ``/run/interp``, and
``/proc/self/mountinfo`` in the container shows the host path of a bind mount's source
(docs/security.md H-30). So the directory is not under the data directory (whose path may
name a user, e.g. ``/home/alice/...``) and its name says nothing of the session:

``<root>/<broker>/<random>``

* ``root``: ``--runtime-dir`` (``INTERP_RUNTIME_DIR``), else ``$XDG_RUNTIME_DIR/interp``,
  else ``interp-<uid>`` in the system's temporary directory. Private to the broker's user
  (mode 0700); one found owned by someone else, writable by others or a symlink is refused.
* ``broker``: 8 hex characters of a keyed hash of the data directory's path (the key is a
  random file in the root), so brokers with different data directories sharing a root never
  touch each other's entries, and a kernel cannot confirm a guess of the path.
* ``random``: 12 hex characters, fresh for each session start and each warm-pool kernel.

The full path of each kernel's directory is recorded with its session (provisioner info),
so a restarted broker finds a live kernel's directory there; at startup it removes the
entries of its own ``broker`` directory that no container mounts any more (:func:`sweep`),
and those of other brokers' that none mounts and that are old (:func:`sweep_others`).

Everything here blocks on the filesystem; async callers run it in a thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Collection, Iterable
from pathlib import Path

from interpreter.backends.docker import ipc

#: The key of the per-data-directory names, in the root.
KEY_FILE = "key"
#: Hex characters of a kernel directory's random name, and of a broker's directory name.
KERNEL_NAME_HEX = 12
BROKER_NAME_HEX = 8


class RuntimeRootUnusable(Exception):
    """The runtime root cannot be used safely; the message says why and what to do."""


def default_root() -> Path:
    """``$XDG_RUNTIME_DIR/interp`` when that is set (an absolute path, a directory of this
    user: ``sudo`` may pass on another user's), else ``interp-<uid>`` in the system's
    temporary directory."""
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    with contextlib.suppress(OSError):
        if os.path.isabs(xdg) and os.path.isdir(xdg) and os.stat(xdg).st_uid == os.geteuid():
            return Path(xdg) / "interp"
    return Path(tempfile.gettempdir()) / f"interp-{os.geteuid()}"


def ensure_private(path: Path) -> None:
    """Create ``path`` with mode 0700 (parents as needed), or check that the existing one
    is a real directory of this user that nobody else can write.

    Raises:
        RuntimeRootUnusable: it is a symlink, not a directory, someone else's, or writable
            by others (in a shared temporary directory another user could have made it).
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
        return
    except FileExistsError:
        pass
    st = os.lstat(path)
    why = None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        why = "is not a directory (or is a symbolic link)"
    elif st.st_uid != os.geteuid():
        why = f"belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    elif st.st_mode & 0o022:
        why = f"can be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
    if why is not None:
        raise RuntimeRootUnusable(
            f"the kernels' runtime directory {path} {why}; remove it, or give another "
            "path with --runtime-dir (INTERP_RUNTIME_DIR)"
        )


def broker_dir(root: Path, data_dir: Path) -> Path:
    """The directory of the broker on ``data_dir`` in ``root`` (made private if needed).

    Raises:
        RuntimeRootUnusable: see :func:`ensure_private`.
    """
    ensure_private(root)
    mine = root / _broker_name(root, data_dir)
    ensure_private(mine)
    ipc.check_path_length(mine / ("0" * KERNEL_NAME_HEX))
    return mine


def new_kernel_dir(broker: Path) -> Path:
    """A fresh random path for one kernel's runtime directory (not created)."""
    return broker / secrets.token_hex(KERNEL_NAME_HEX // 2)


def entries(broker: Path) -> list[str]:
    """The paths of the entries in ``broker`` now (for :func:`sweep`)."""
    try:
        return [entry.path for entry in os.scandir(broker)]
    except FileNotFoundError:
        return []


def sweep(listed: Iterable[str], keep: Collection[str]) -> list[str]:
    """Remove the entries ``listed`` (by :func:`entries`) whose paths are not in ``keep``
    (the directories containers still mount, and those handed out since the start);
    returns the paths removed.

    Listed first, kept second: a directory handed out after the listing is not in it.
    Symlink-safe (:func:`ipc.remove_tree`); an entry that is not a directory is unlinked.
    """
    removed = []
    for path in listed:
        if path in keep:
            continue
        with contextlib.suppress(FileNotFoundError):
            if os.path.isdir(path) and not os.path.islink(path):
                ipc.remove_tree(Path(path))
            else:
                os.unlink(path)
        removed.append(path)
    return removed


def sweep_others(root: Path, mine: Path, mounted: Collection[str], older_than_s: float) -> int:
    """Remove what brokers of other data directories left in ``root`` (a data directory
    deleted with its broker's kernels, say): their entries no container mounts that have
    not changed for ``older_than_s`` seconds (a directory is mounted within seconds of its
    making), then their directories left empty. Returns how many entries went."""
    cutoff = time.time() - older_than_s
    count = 0
    for broker in entries(root):
        if broker == str(mine) or os.path.islink(broker) or not os.path.isdir(broker):
            continue
        old = []
        for path in entries(Path(broker)):
            with contextlib.suppress(FileNotFoundError):
                if path not in mounted and os.lstat(path).st_mtime < cutoff:
                    old.append(path)
        count += len(sweep(old, ()))
        with contextlib.suppress(OSError):  # not empty: still some broker's
            if os.lstat(broker).st_mtime < cutoff:
                os.rmdir(broker)
    return count


def owns(broker: Path, path: str | Path) -> bool:
    """Whether ``path`` is a kernel directory directly in ``broker`` (never a path a
    container's metadata could point elsewhere with)."""
    candidate = Path(path)
    return candidate.parent == broker and candidate.name not in ("", ".", "..")


def _broker_name(root: Path, data_dir: Path) -> str:
    key = _key(root)
    digest = hmac.new(key, str(data_dir.resolve()).encode(), hashlib.sha256).hexdigest()
    return digest[:BROKER_NAME_HEX]


def _key(root: Path) -> bytes:
    """The root's key: made once, atomically (written in full, then linked into place),
    so brokers starting together on one root read the same key."""
    path = root / KEY_FILE
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".key-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(secrets.token_hex(32).encode("ascii"))
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            os.unlink(tmp)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        return os.read(fd, 256)
    finally:
        os.close(fd)
