"""Host side of the ipc link: the runtime directory, its connection file and its sockets.

The kernel binds its five ZMQ sockets in a host directory that is bind-mounted into its
container; the broker connects to the same files from the host. The kernel fully controls
that directory while it starts, so the rules of docs/security.md H-30/H-31 apply:

* the directory is created fresh for every container, owned by the kernel's uid, mode 0700,
  inside a parent only the broker can write;
* the broker writes the connection file there once and never reads it back: the canonical
  connection info stays in broker memory;
* before the broker connects, every socket is ``lstat``-ed: a socket, owned by the kernel's
  uid, never a symlink; then (when the broker is root) the directory is handed back to root
  so the kernel can no longer swap a socket for a symlink to somewhere else;
* removal is ``shutil.rmtree``, which is symlink-safe on Linux.

All functions block on the filesystem; async callers run them in a thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from jupyter_client.connect import KernelConnectionInfo

from interpreter.backends.docker.config import (
    CONNECTION_FILE_NAME,
    CONTAINER_RUNTIME_DIR,
    IPC_PREFIX_NAME,
    KernelUser,
)
from interpreter.errors import KernelStartFailed

#: Fixed ipc "ports": each socket is the file ``<prefix>-<port>``.
PORTS: dict[str, int] = {
    "shell_port": 1,
    "iopub_port": 2,
    "stdin_port": 3,
    "control_port": 4,
    "hb_port": 5,
}
SIGNATURE_SCHEME = "hmac-sha256"
#: ``sizeof(sockaddr_un.sun_path)`` on Linux, including the terminating NUL (unix(7)).
AF_UNIX_PATH_MAX = 108


def host_prefix(runtime_dir: Path) -> str:
    """The ipc ``ip`` the broker uses: socket files are ``<prefix>-<port>`` on the host."""
    return str(runtime_dir / IPC_PREFIX_NAME)


def container_prefix() -> str:
    """The ipc ``ip`` the kernel binds inside its container."""
    return f"{CONTAINER_RUNTIME_DIR}/{IPC_PREFIX_NAME}"


def socket_paths(runtime_dir: Path) -> list[Path]:
    """The host paths of the five sockets."""
    prefix = host_prefix(runtime_dir)
    return [Path(f"{prefix}-{port}") for port in PORTS.values()]


def check_path_length(runtime_dir: Path) -> None:
    """Refuse a runtime directory whose socket paths would not fit in ``sun_path``.

    Raises:
        KernelStartFailed: the longest socket path has 108 bytes or more.
    """
    longest = max(len(os.fsencode(p)) for p in socket_paths(runtime_dir))
    if longest >= AF_UNIX_PATH_MAX:
        raise KernelStartFailed(
            f"the kernel runtime directory path is too long for unix sockets ({longest} of at "
            f"most {AF_UNIX_PATH_MAX - 1} bytes per socket path); configure a shorter data "
            "or runtime directory"
        )


def connection_info(prefix: str, key: bytes, kernel_name: str = "") -> KernelConnectionInfo:
    """A jupyter connection dict for the ipc transport.

    ``key`` stays bytes: jupyter_client keeps it so at run time (its TypedDict says str).
    """
    info: dict[str, Any] = {"transport": "ipc", "ip": prefix, **PORTS}
    info.update(key=key, signature_scheme=SIGNATURE_SCHEME, kernel_name=kernel_name)
    return cast(KernelConnectionInfo, info)


def prepare_runtime_dir(runtime_dir: Path, user: KernelUser) -> None:
    """Create ``runtime_dir`` fresh (anything already there is removed) for one kernel.

    The directory belongs to the kernel's uid with mode 0700: the kernel must create its
    sockets there. Its parent is created for the broker with mode 0700.
    """
    runtime_dir.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    remove_tree(runtime_dir)
    runtime_dir.mkdir(mode=0o700)
    _give_to(runtime_dir, user)


def prepare_workspace(workspace: Path, user: KernelUser) -> None:
    """Make sure the workspace exists and the kernel can write it.

    Only the directory itself is handed to the kernel's uid; files the broker puts there
    later must be made writable for that uid by whoever writes them.
    """
    workspace.mkdir(mode=0o755, parents=True, exist_ok=True)
    st = os.lstat(workspace)
    if not stat.S_ISDIR(st.st_mode):
        raise KernelStartFailed("the session workspace is not a directory")
    _give_to(workspace, user)


def write_connection_file(runtime_dir: Path, info: Mapping[str, Any], user: KernelUser) -> None:
    """Write the kernel's (in-container) connection file into the fresh runtime directory.

    Created exclusively and without following links. When the broker is root the file
    belongs to root, group the kernel's gid, mode 0640: the kernel reads it but can never
    write it (it once could append to it without bound, outside its workspace quota).
    Otherwise it belongs to the broker's user (mode 0600), which is the kernel's too.
    """
    data = dict(info)
    key = data["key"]
    data["key"] = key.decode("ascii") if isinstance(key, bytes) else key
    path = runtime_dir / CONNECTION_FILE_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, json.dumps(data, indent=1).encode())
        if os.geteuid() == 0:
            os.fchown(fd, 0, user.gid)
            os.fchmod(fd, 0o640)
    finally:
        os.close(fd)


def sockets_present(runtime_dir: Path) -> bool:
    """True when every socket path exists (whatever it is; see :func:`verify_sockets`)."""
    for path in socket_paths(runtime_dir):
        try:
            os.lstat(path)
        except FileNotFoundError:
            return False
    return True


def verify_sockets(runtime_dir: Path, user: KernelUser) -> None:
    """Check, before connecting, that every endpoint is a real socket of the kernel (H-31).

    Raises:
        KernelStartFailed: the directory or an endpoint is missing, a symlink, not a socket,
            or owned by someone else.
    """
    st = os.lstat(runtime_dir)
    if not stat.S_ISDIR(st.st_mode):
        raise KernelStartFailed("the kernel runtime directory is not a directory")
    for path in socket_paths(runtime_dir):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise KernelStartFailed(f"kernel socket {path.name} is missing") from None
        if not stat.S_ISSOCK(st.st_mode):
            raise KernelStartFailed(f"kernel endpoint {path.name} is not a unix socket")
        if st.st_uid != user.uid:
            raise KernelStartFailed(f"kernel socket {path.name} has an unexpected owner")


def lock_runtime_dir(runtime_dir: Path) -> bool:
    """Take the runtime directory back from the kernel once its sockets are bound.

    With the directory owned by root and mode 0755 the kernel can no longer unlink or
    rename its sockets, so it cannot replace one with a symlink that a later ZMQ reconnect
    would follow. Only possible when the broker is root; returns whether it was done.

    The mode is set before the owner: ipykernel binds its sockets and only then reads its
    connection file, so the kernel may be looking in the directory right now. Owned by
    root while still mode 0700, the directory was shut to the kernel for that instant,
    and under load about one start in 150 ended with "Could not find
    '/run/interp/kernel.json'".
    """
    if os.geteuid() != 0:
        return False
    os.chmod(runtime_dir, 0o755, follow_symlinks=False)
    os.chown(runtime_dir, 0, 0, follow_symlinks=False)
    return True


def remove_tree(path: Path) -> None:
    """Remove a directory tree the kernel could write, without following its symlinks."""
    # CPython's fd-based rmtree never follows links inside the tree (docs/security.md §6); it
    # also refuses a top-level symlink, which the broker's private parent rules out anyway.
    if not shutil.rmtree.avoids_symlink_attacks:  # pragma: no cover - not on Linux
        raise RuntimeError("this platform has no symlink-safe rmtree")
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)


def _give_to(path: Path, user: KernelUser) -> None:
    if os.geteuid() == 0:
        os.chown(path, user.uid, user.gid, follow_symlinks=False)
