"""A disk quota per session workspace: a fixed-size ext4 filesystem, loop-mounted.

Mechanism (issue 12, docs/security.md H-55): each session with a quota gets an image file
``<session-dir>/workspace.img`` of ``disk_mb`` MiB, formatted ext4 and loop-mounted on the
host at ``<session-dir>/workspace`` (``nosuid,nodev``). The kernel (bind mount in a
container, or working directory of a local kernel) and the broker's files API see the same
filesystem, so the filesystem itself refuses a write past its size with ``ENOSPC``: no
polling, no race, and it covers every way of writing (the kernel, uploads, forks).

Why this and not another mechanism: XFS project quotas need the data directory on XFS; a
Docker volume with ``o=loop`` is mounted by the engine, out of reach of the broker's files
API; a tmpfs is memory. A loop-mounted image works on any host filesystem and for both
backends. It needs root (or CAP_SYS_ADMIN) and ``mkfs.ext4``: :func:`unavailable_reason`
says why it cannot be used, and the broker then runs without quotas and says so.

The image is sparse: it costs host disk only for what is written, so the data directory's
free-space floor (``min_free_mb``) is what protects the host when quotas are overcommitted.

Lifecycle: :func:`attach` creates and mounts (idempotent: after a broker restart the mount
is still there, or is mounted again from the image); :func:`detach` copies what the
workspace holds into a plain directory (closed sessions keep their files readable, bounded
by the quota they had), unmounts (the loop device is freed with it: ``autoclear``) and
removes the image. :func:`sweep` detaches what a crashed broker left.

Everything here blocks; async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from interpreter.errors import KernelStartFailed
from interpreter.tree import remove_tree

log = logging.getLogger(__name__)

IMAGE_NAME = "workspace.img"
#: Smallest quota that still holds an ext4 filesystem with room for files.
MIN_DISK_MB = 8
_MOUNT_OPTIONS = "loop,nosuid,nodev"
_TIMEOUT_S = 60
#: mount(2)'s flag for moving a mount (linux/mount.h), what ``mount --move`` passes.
MS_MOVE = 8192


@dataclass(frozen=True)
class Usage:
    """Size and free bytes of a quota filesystem (as ``statvfs`` sees it)."""

    total: int
    free: int


@functools.cache
def unavailable_reason() -> str | None:
    """None when quotas can be made here; else why not (for /v1/info and errors)."""
    if os.geteuid() != 0:
        return "the broker is not root, so it cannot loop-mount a filesystem per session"
    for tool in ("mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed on the broker's host"
    if not Path("/dev/loop-control").exists():
        return "the host has no loop devices (/dev/loop-control)"
    return None


def image_path(session_dir: Path) -> Path:
    return session_dir / IMAGE_NAME


def is_mounted(workspace: Path) -> bool:
    return os.path.ismount(workspace)


def attach(session_dir: Path, workspace: Path, size_mb: int) -> None:
    """Make ``workspace`` a ``size_mb`` MiB filesystem (create the image if needed, mount it).

    Raises:
        KernelStartFailed: the image cannot be created or mounted (logged with the tool's
            own message; the error names no host path).
    """
    if is_mounted(workspace):
        return
    image = image_path(session_dir)
    workspace.mkdir(mode=0o755, parents=True, exist_ok=True)
    fresh = not image.exists()
    if fresh:
        with open(image, "xb") as fh:
            fh.truncate(size_mb << 20)
        os.chmod(image, 0o600)
        # No reserved blocks and no journal: a scratch workspace keeps nearly all of
        # its size for files (29 of 32 MiB, 1013 of 1024 MiB); a host crash means fsck.
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", str(image)], "format")
    _run(["mount", "-o", _MOUNT_OPTIONS, str(image), str(workspace)], "mount")
    if fresh:
        with contextlib.suppress(OSError):
            (workspace / "lost+found").rmdir()  # the kernel's workspace starts empty


#: Copies a workspace tree without following what the kernel planted
#: (``interpreter.workspace.copy_tree_safely``).
Copier = Callable[[Path, Path], object]


def detach(session_dir: Path, workspace: Path, *, copy: Copier | None = None) -> None:
    """Unmount ``workspace`` and remove its image; with ``copy`` its files stay, copied into a
    plain directory at the same path. A no-op without an image or mount."""
    image = image_path(session_dir)
    if copy is not None and image.exists() and not is_mounted(workspace):
        # Not mounted any more (the host restarted): mount it once more to keep its files.
        workspace.mkdir(mode=0o755, parents=True, exist_ok=True)
        with contextlib.suppress(KernelStartFailed):
            _run(["mount", "-o", _MOUNT_OPTIONS, str(image), str(workspace)], "mount")
    if is_mounted(workspace):
        kept = session_dir / ".workspace-kept"
        if copy is not None:
            _remove(kept)  # a copy an earlier, failed detach left
            copy(workspace, kept)
        try:
            _run(["umount", str(workspace)], "unmount")
        except KernelStartFailed:
            # Still busy (a kernel process that outlived its broker): detach it now; the
            # filesystem and its loop device go once the last user lets go.
            _run(["umount", "-l", str(workspace)], "unmount")
        if copy is not None:
            workspace.rmdir()
            os.rename(kept, workspace)
    with contextlib.suppress(FileNotFoundError):
        image.unlink()


def _remove(path: Path) -> None:
    """Remove the tree at ``path`` if there is one, however deep (no recursion)."""
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(FileNotFoundError):
            remove_tree(parent, path.name)
    finally:
        os.close(parent)


def move(src_dir: Path, src_ws: Path, dst_dir: Path, dst_ws: Path) -> None:
    """Hand the mounted quota of ``src_ws`` to ``dst_ws`` (a warm-pool claim).

    ``dst_ws`` may hold a fresh, empty quota of its own: it is released first. Bind mounts
    of ``src_ws`` (a running container's ``/workspace``) keep the same filesystem.

    Raises:
        KernelStartFailed: the move failed; ``dst_ws`` may then have no quota (attach again).
    """
    if is_mounted(dst_ws):
        if any(dst_ws.iterdir()):
            raise KernelStartFailed("The session's workspace is not empty.")
        _run(["umount", str(dst_ws)], "unmount")
    with contextlib.suppress(FileNotFoundError):
        image_path(dst_dir).unlink()
    dst_ws.mkdir(mode=0o755, parents=True, exist_ok=True)
    _move_mount(src_ws, dst_ws)
    os.rename(image_path(src_dir), image_path(dst_dir))


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulong,
        ctypes.c_void_p,
    ]
    libc.mount.restype = ctypes.c_int
    return libc


def _move_mount(src: Path, dst: Path) -> None:
    """Move the mount at ``src`` to ``dst`` with one mount(2) call, as ``mount --move``
    does: on a warm-pool claim, starting that tool was most of the claim's time (3-4 ms of
    a 5 ms claim, measured, issue 10)."""
    done = _libc().mount(os.fsencode(src), os.fsencode(dst), None, MS_MOVE, None)
    if done != 0:
        err = ctypes.get_errno()
        log.error("disk quota: move failed: %s", os.strerror(err))
        raise KernelStartFailed(
            "The workspace disk quota could not move; the broker's log says why."
        )


def sweep(sessions_root: Path, keep: set[str], *, copy: Copier | None = None) -> list[str]:
    """Detach every session quota under ``sessions_root`` whose id is not in ``keep``."""
    done: list[str] = []
    if not sessions_root.is_dir():
        return done
    for session_dir in sessions_root.iterdir():
        if session_dir.name in keep:
            continue
        workspace = session_dir / "workspace"
        if image_path(session_dir).exists() or is_mounted(workspace):
            try:
                detach(session_dir, workspace, copy=copy)
            except Exception:
                log.exception("disk quota of %s not released", session_dir.name)
                continue
            done.append(session_dir.name)
    return done


def usage(workspace: Path) -> Usage:
    st = os.statvfs(workspace)
    return Usage(total=st.f_blocks * st.f_frsize, free=st.f_bavail * st.f_frsize)


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.error("disk quota: %s failed: %s", what, exc)
        raise KernelStartFailed(f"The workspace disk quota could not {what}.") from exc
    if done.returncode != 0:
        log.error("disk quota: %s failed (exit %d): %s", what, done.returncode, done.stderr)
        raise KernelStartFailed(
            f"The workspace disk quota could not {what} (exit {done.returncode}); "
            "the broker's log says why."
        )
