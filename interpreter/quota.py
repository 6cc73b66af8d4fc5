"""A disk quota per session workspace: a fixed-size ext4 filesystem, loop-mounted.

Mechanism (issue 12, docs/security.md H-55): each session with a quota gets an image file
``<session-dir>/workspace.img`` of ``disk_mb`` MiB, formatted ext4 and loop-mounted on the
host at ``<session-dir>/workspace`` (``nosuid,nodev,discard``). The kernel (bind mount in a
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
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from interpreter.errors import KernelStartFailed
from interpreter.tree import CopyReport, copy_tree, remove_tree

log = logging.getLogger(__name__)

IMAGE_NAME = "workspace.img"
#: Smallest quota that still holds an ext4 filesystem with room for files.
MIN_DISK_MB = 8
#: ``discard``: space freed in the workspace (a deleted file) is freed in the sparse image
#: too, so that the host gets it back (without it, a session that wrote and deleted a few
#: GiB kept them on the data disk, which could keep the service at 507 storage_full).
_MOUNT_OPTIONS = "loop,nosuid,nodev,discard"
#: Where an image is mounted when it is not mounted as the workspace: to merge its files
#: into a workspace directory that has some, or to fill a new image.
SIDE_MOUNT = ".workspace-image"
#: A new image while it is filled (renamed to :data:`IMAGE_NAME` once full).
NEW_IMAGE = "workspace.img.new"
#: An image that could not be mounted to take its files out (kept for ``e2fsck``).
UNMOUNTABLE = "workspace.img.unmountable"
#: What a file of the image is kept as next to a different one at its path in the
#: workspace directory (:func:`interpreter.tree.copy_tree` ``keep_both``).
FROM_IMAGE = ".from-image"
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
    _clear_side(session_dir)
    if _has_entries(workspace):
        # Files in the directory the quota is mounted on would be hidden by it: a copy of
        # a live data directory (``cp -a`` copies a mounted workspace's files into the
        # directory under it). The image's files join them, then all go into a new image.
        if image.exists():
            _merge_image(session_dir, workspace)
            image.unlink()
        _fill_new_image(session_dir, workspace, size_mb)
        return
    fresh = not image.exists()
    if fresh:
        _make_image(image, size_mb)
    _run(["mount", "-o", _MOUNT_OPTIONS, str(image), str(workspace)], "mount")
    if fresh:
        with contextlib.suppress(OSError):
            (workspace / "lost+found").rmdir()  # the kernel's workspace starts empty


def _make_image(image: Path, size_mb: int) -> None:
    with open(image, "xb") as fh:
        fh.truncate(size_mb << 20)
    os.chmod(image, 0o600)
    # No reserved blocks and no journal: a scratch workspace keeps nearly all of
    # its size for files (29 of 32 MiB, 1013 of 1024 MiB); a host crash means fsck.
    _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", str(image)], "format")


def _fill_new_image(session_dir: Path, workspace: Path, size_mb: int) -> None:
    """Mount a new image on ``workspace`` holding the files its directory holds.

    Each step leaves something the next :func:`attach` finishes: the files stay in the
    directory until the image that holds them all is in place.

    Raises:
        KernelStartFailed: they do not fit (the directory keeps them; no quota).
    """
    new, side = session_dir / NEW_IMAGE, session_dir / SIDE_MOUNT
    _make_image(new, size_mb)
    side.mkdir(mode=0o755)
    try:
        _run(["mount", "-o", _MOUNT_OPTIONS, str(new), str(side)], "mount")
        try:
            with contextlib.suppress(OSError):
                (side / "lost+found").rmdir()
            copy_tree(workspace, side, _owner(workspace), skip_too_deep=True)
        finally:
            _unmount(side)
    except OSError as exc:
        new.unlink()
        log.error("disk quota of %s: its workspace's files do not fit: %s", session_dir.name, exc)
        raise KernelStartFailed(
            "The workspace's files do not fit in its disk quota; they are kept, without one."
        ) from exc
    finally:
        side.rmdir()
    os.rename(new, image_path(session_dir))
    _empty(workspace)
    _run(["mount", "-o", _MOUNT_OPTIONS, str(image_path(session_dir)), str(workspace)], "mount")
    log.warning(
        "session %s: its workspace's files were in the directory its disk quota is mounted "
        "on; moved them into the quota",
        session_dir.name,
    )


def _merge_image(session_dir: Path, workspace: Path) -> None:
    """Copy the files of the image (not mounted) into the directory ``workspace``, which
    has files of its own; where both have a path with different content, the image's is
    kept as ``<name>.from-image``. Logs one warning saying so. An image that cannot be
    mounted is renamed :data:`UNMOUNTABLE` (for e2fsck) and its files left in it."""
    image, side = image_path(session_dir), session_dir / SIDE_MOUNT
    side.mkdir(mode=0o755)
    try:
        try:
            _run(["mount", "-o", f"ro,{_MOUNT_OPTIONS}", str(image), str(side)], "mount")
        except KernelStartFailed:
            os.rename(image, session_dir / UNMOUNTABLE)
            log.warning(
                "session %s: its workspace directory has files and its disk quota's image "
                "could not be mounted to add its files to them; the image is kept as %s",
                session_dir.name,
                UNMOUNTABLE,
            )
            return
        lost = workspace / "lost+found"
        had_lost = lost.exists()
        try:
            report = copy_tree(
                side, workspace, _owner(workspace), skip_too_deep=True, keep_both=FROM_IMAGE
            )
        finally:
            _unmount(side)
        if not had_lost:
            # The filesystem's own (an image copied while mounted may still have the one
            # attach removed): not the user's; kept if e2fsck put files in it.
            with contextlib.suppress(OSError):
                lost.rmdir()
    finally:
        side.rmdir()
    _log_merge(session_dir.name, report)


def _log_merge(session_id: str, report: CopyReport) -> None:
    differ = ""
    if report.kept_both:
        shown = ", ".join(report.kept_both[:5]) + (", ..." if len(report.kept_both) > 5 else "")
        differ = (
            f"; {len(report.kept_both)} differed from the workspace's file at their path and "
            f"are kept next to it as <name>{FROM_IMAGE}: {shown}"
        )
    log.warning(
        "session %s: its workspace directory had files while its disk quota was not mounted "
        "(a copy of a live data directory?): %d files of the quota's image were added to "
        "them%s",
        session_id,
        report.files,
        differ,
    )
    if report.too_deep:
        log.warning(
            "session %s: %d directories of the image nested too deep were left out",
            session_id,
            report.too_deep,
        )


def _has_entries(directory: Path) -> bool:
    try:
        with os.scandir(directory) as it:
            return any(True for _ in it)
    except FileNotFoundError:
        return False


def _owner(workspace: Path) -> tuple[int, int]:
    st = os.stat(workspace)
    return st.st_uid, st.st_gid


def _unmount(path: Path) -> None:
    try:
        _run(["umount", str(path)], "unmount")
    except KernelStartFailed:
        _run(["umount", "-l", str(path)], "unmount")


def _clear_side(session_dir: Path) -> None:
    """Undo what an interrupted merge or fill left: the side mount, a half-filled image."""
    side = session_dir / SIDE_MOUNT
    if is_mounted(side):
        _unmount(side)
    with contextlib.suppress(FileNotFoundError):
        side.rmdir()
    with contextlib.suppress(FileNotFoundError):
        (session_dir / NEW_IMAGE).unlink()


def _empty(directory: Path) -> None:
    """Remove everything in ``directory`` (not itself)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in os.listdir(fd):
            if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                remove_tree(fd, name)
            else:
                os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


#: Copies a workspace tree without following what the kernel planted
#: (``interpreter.workspace.copy_tree_safely``).
Copier = Callable[[Path, Path], object]


def detach(session_dir: Path, workspace: Path, *, copy: Copier | None = None) -> None:
    """Unmount ``workspace`` and remove its image; with ``copy`` its files stay, copied into a
    plain directory at the same path. A no-op without an image or mount."""
    image = image_path(session_dir)
    kept = session_dir / ".workspace-kept"
    _clear_side(session_dir)
    if copy is not None and image.exists() and not is_mounted(workspace):
        if _has_entries(workspace):
            # Files in the directory under the mount point (a copy of a live data
            # directory): the image's files join them.
            _merge_image(session_dir, workspace)
            _remove(kept)  # a copy an earlier, failed detach left
        else:
            # Not mounted any more (the host restarted): mount it once more to keep its
            # files.
            workspace.mkdir(mode=0o755, parents=True, exist_ok=True)
            with contextlib.suppress(KernelStartFailed):
                _run(["mount", "-o", _MOUNT_OPTIONS, str(image), str(workspace)], "mount")
    if is_mounted(workspace):
        if copy is not None:
            _remove(kept)  # a copy an earlier, failed detach left
            copy(workspace, kept)
        # Still busy (a kernel process that outlived its broker): detached at once; the
        # filesystem and its loop device go once the last user lets go.
        _unmount(workspace)
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
