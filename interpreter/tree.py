"""Copying and removing whole workspace trees, without recursion and without following links.

A kernel can make any tree: directories nested thousands of levels deep, symlinks to host
files, FIFOs. Both walks here are loops over an explicit stack of directory descriptors
(``openat`` with ``O_NOFOLLOW`` one level at a time), so no depth can exhaust Python's
recursion limit and no path grows past ``PATH_MAX``.

* :func:`copy_tree` copies regular files and directories, with their modification times
  (a fork's files, a closed session's files out of its quota filesystem), and skips
  symlinks, special files and the temporary files of uploads in progress. Hard links stay
  links: a file linked a thousand times inside a 1 GB workspace is copied once, not a
  thousand times onto the host's disk.
  It holds two descriptors per level, so it goes at most :data:`MAX_COPY_DEPTH` levels
  deep: below that it either refuses (:class:`TreeTooDeep`) or skips what is deeper and
  says how much.
* :func:`remove_tree` removes any tree with a bounded number of descriptors: a directory
  deeper than :data:`MAX_REMOVE_DEPTH` levels is first moved up to the top of the tree
  being removed.

Everything here blocks; async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from interpreter.errors import Conflict

#: Deepest directory level a copy descends to (two descriptors are open per level).
MAX_COPY_DEPTH = 256
#: Longest relative path a later hard link is made through (``linkat`` from the copy's
#: root); the first copy of a file with a longer path gets a short extra name for it in a
#: holding directory, removed when the copy ends.
MAX_LINK_PATH = 1024
#: Deepest level a removal holds open; deeper directories are moved up first.
MAX_REMOVE_DEPTH = 64
#: The temporary files of uploads (``interpreter.upload``): never copied.
UPLOAD_TEMP = re.compile(r"\.upload-[0-9a-f]{16}\.tmp")
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class TreeTooDeep(Conflict):
    """A tree to copy has directories nested deeper than :data:`MAX_COPY_DEPTH`."""

    code = "workspace_too_deep"


#: How many other names :func:`copy_tree` tries for a copy kept next to a different file.
_MAX_KEPT_NAMES = 100


@dataclass
class CopyReport:
    """What :func:`copy_tree` did: files copied, directories left out for their depth, and
    (merging) the paths written under another name because the destination had something
    else at their own path."""

    files: int = 0
    too_deep: int = 0
    kept_both: list[str] = field(default_factory=list)


@dataclass
class _Level:
    src: int
    dst: int
    subdirs: list[str] = field(default_factory=list)
    path: str = ""

    def child(self, name: str) -> str:
        return f"{self.path}/{name}" if self.path else name


@dataclass
class _Copied:
    """Files with more than one link copied so far, by (device, inode): a path of their
    first copy relative to the destination's root, which later names are linked to."""

    root: int
    first: dict[tuple[int, int], str] = field(default_factory=dict)
    holding: str | None = None

    def remember(self, level: _Level, name: str, st: os.stat_result) -> None:
        path = level.child(name)
        if len(path) > MAX_LINK_PATH:
            if self.holding is None:
                self.holding = f".copy-links-{secrets.token_hex(8)}"
                os.mkdir(self.holding, 0o700, dir_fd=self.root)
            path = f"{self.holding}/{st.st_ino}-{st.st_dev}"
            os.link(name, path, src_dir_fd=level.dst, dst_dir_fd=self.root)
        self.first[(st.st_dev, st.st_ino)] = path

    def close(self) -> None:
        try:
            if self.holding is not None:
                with suppress(FileNotFoundError):
                    remove_tree(self.root, self.holding)
        finally:
            os.close(self.root)


def copy_tree(
    src: Path,
    dst: Path,
    owner: tuple[int, int] | None,
    *,
    skip_too_deep: bool,
    keep_both: str | None = None,
) -> CopyReport:
    """Copy the regular files and directories under ``src`` into ``dst`` (made if missing).

    Files and directories made belong to ``owner`` (uid, gid) when given. A directory below
    :data:`MAX_COPY_DEPTH` levels raises :class:`TreeTooDeep`, or with ``skip_too_deep`` is
    left out (counted in the report). Raises OSError as the filesystem does (ENOSPC, ...).

    With ``keep_both`` (a suffix) the copy merges into what ``dst`` holds and changes none
    of it: a file already there with the same content is not copied again; where ``dst``
    has something else at a path (other content, a directory for a file, a link), the
    copy is written next to it as ``<name><keep_both>`` (``-2``, ``-3``, ... appended when
    that is taken by yet another). Merging again copies nothing new.
    """
    report = CopyReport()
    dst.mkdir(mode=0o755, parents=True, exist_ok=True)
    stack: list[_Level] = []
    try:
        stack.append(_Level(os.open(src, DIR_FLAGS), os.open(dst, DIR_FLAGS)))
        if owner is not None and keep_both is None:  # a merge changes nothing that is there
            os.fchown(stack[0].dst, *owner)
        copied = _Copied(os.dup(stack[0].dst))
        try:
            _copy_levels(stack, owner, report, copied, keep_both, skip_too_deep=skip_too_deep)
        finally:
            copied.close()
    finally:
        for level in stack:
            _close(level)
    return report


def _copy_levels(
    stack: list[_Level],
    owner: tuple[int, int] | None,
    report: CopyReport,
    copied: _Copied,
    keep_both: str | None,
    *,
    skip_too_deep: bool,
) -> None:
    stack[0].subdirs = _copy_files(stack[0], owner, report, copied, keep_both)
    while stack:
        level = stack[-1]
        if not level.subdirs:
            if keep_both is None:  # its entries all made: its times are the original's
                _same_times(level.src, level.dst)
            _close(stack.pop())
            continue
        name = level.subdirs.pop()
        if len(stack) >= MAX_COPY_DEPTH:
            if not skip_too_deep:
                raise TreeTooDeep(
                    f"The workspace has directories nested more than {MAX_COPY_DEPTH} "
                    "levels deep, which are not copied."
                )
            report.too_deep += 1
            continue
        child = _enter(level, name, owner, report, keep_both)
        if child is None:
            continue  # replaced by something else meanwhile: not a directory to copy
        stack.append(child)
        child.subdirs = _copy_files(child, owner, report, copied, keep_both)


def _enter(
    parent: _Level,
    name: str,
    owner: tuple[int, int] | None,
    report: CopyReport,
    keep_both: str | None,
) -> _Level | None:
    try:
        src = os.open(name, DIR_FLAGS, dir_fd=parent.src)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None
        raise
    try:
        target, made = name, True
        if keep_both is None:
            with suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent.dst)
            dst = os.open(name, DIR_FLAGS, dir_fd=parent.dst)
        else:
            target, dst, made = _merge_dir(parent.dst, name, keep_both)
            if target != name:
                report.kept_both.append(parent.child(target))
    except BaseException:
        os.close(src)
        raise
    if owner is not None and made:
        os.fchown(dst, *owner)
    return _Level(src, dst, path=parent.child(target))


def _merge_dir(dir_fd: int, name: str, keep_both: str) -> tuple[str, int, bool]:
    """The directory to merge ``name`` into: ``name`` when it is one (or is made), else
    the first of its other names that is one (or is made); its name, descriptor, and
    whether it was made."""
    for candidate in _names(name, keep_both):
        made = True
        try:
            os.mkdir(candidate, 0o755, dir_fd=dir_fd)
        except FileExistsError:
            made = False
        try:
            return candidate, os.open(candidate, DIR_FLAGS, dir_fd=dir_fd), made
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
    raise OSError(errno.EEXIST, f"no free name for a copy of {name!r}")


def _names(name: str, keep_both: str) -> list[str]:
    """``name``, then the names a copy kept next to something else at ``name`` gets."""
    names = [name]
    for n in range(1, _MAX_KEPT_NAMES + 1):
        tail = keep_both if n == 1 else f"{keep_both}-{n}"
        base = name
        while len(os.fsencode(base + tail)) > 255 and base:
            base = base[:-1]
        names.append(base + tail)
    return names


def _copy_files(
    level: _Level,
    owner: tuple[int, int] | None,
    report: CopyReport,
    copied: _Copied,
    keep_both: str | None,
) -> list[str]:
    """Copy the regular files of one directory; its subdirectories' names."""
    subdirs = []
    with os.scandir(level.src) as it:
        entries = list(it)
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            subdirs.append(entry.name)
        elif stat.S_ISREG(st.st_mode) and not UPLOAD_TEMP.fullmatch(entry.name):
            if st.st_nlink > 1 and _link_again(level, entry.name, st, copied, keep_both):
                report.files += 1
                continue
            written: str | None = None
            if keep_both is None:
                if _copy_file(level, entry.name, st.st_size, owner):
                    written = entry.name
                report.files += 1
            else:
                written = _merge_file(level, entry.name, st.st_size, owner, report, keep_both)
            if written is not None and st.st_nlink > 1:
                copied.remember(level, written, st)
    subdirs.reverse()  # popped from the end: copied in listing order
    return subdirs


def _link_again(
    level: _Level, name: str, st: os.stat_result, copied: _Copied, keep_both: str | None
) -> bool:
    """Make ``name`` a hard link to the copy of a file already copied under another name;
    False when none was copied yet (or, merging, ``name`` is taken: merged as a file)."""
    first = copied.first.get((st.st_dev, st.st_ino))
    if first is None:
        return False
    if keep_both is None:
        with suppress(FileNotFoundError):
            os.unlink(name, dir_fd=level.dst)  # a file of that name copied before
    try:
        os.link(first, name, src_dir_fd=copied.root, dst_dir_fd=level.dst)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.EMLINK, errno.EEXIST):
            return False  # its first copy is gone, has too many links, or the name is taken
        raise
    return True


def _copy_file(level: _Level, name: str, size: int, owner: tuple[int, int] | None) -> bool:
    """Copy one file; False when it was gone."""
    try:
        fin = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=level.src)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP):
            return False  # gone or replaced by a link meanwhile
        raise
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fout = os.open(name, flags, 0o644, dir_fd=level.dst)
        try:
            copy_sparse(fin, fout, size)
            if owner is not None:
                os.fchown(fout, *owner)
            _same_times(fin, fout)
        finally:
            os.close(fout)
    finally:
        os.close(fin)
    return True


def _merge_file(
    level: _Level,
    name: str,
    size: int,
    owner: tuple[int, int] | None,
    report: CopyReport,
    keep_both: str,
) -> str | None:
    """Copy one file unless the destination has it (same content) at its name or at one of
    its other names; else under the first free one of those. The name written, if any."""
    try:
        fin = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=level.src)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP):
            return None
        raise
    try:
        for candidate in _names(name, keep_both):
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                fout = os.open(candidate, flags, 0o644, dir_fd=level.dst)
            except FileExistsError:
                if _same_file(fin, level.dst, candidate):
                    return None  # already there
                continue
            try:
                copy_sparse(fin, fout, size)
                if owner is not None:
                    os.fchown(fout, *owner)
                _same_times(fin, fout)
            finally:
                os.close(fout)
            report.files += 1
            if candidate != name:
                report.kept_both.append(level.child(candidate))
            return candidate
        raise OSError(errno.EEXIST, f"no free name for a copy of {name!r}")
    finally:
        os.close(fin)


def _same_file(fd: int, dir_fd: int, name: str) -> bool:
    """Whether ``name`` in ``dir_fd`` is a regular file with the content of ``fd``."""
    try:
        other = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError:
        return False  # a link, a directory, ...
    try:
        st, mine = os.fstat(other), os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != mine.st_size:
            return False
        offset = 0
        while offset < st.st_size:
            a, b = os.pread(fd, 1 << 20, offset), os.pread(other, 1 << 20, offset)
            if a != b:
                return False
            if not a:
                break
            offset += len(a)
        return True
    finally:
        os.close(other)


def _same_times(src: int, dst: int) -> None:
    """Give the copy ``dst`` the access and modification times of ``src`` (both fds): a
    workspace copied out of its quota at a close or a restart kept every file, each shown
    as modified at that moment."""
    st = os.fstat(src)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))


def _close(level: _Level) -> None:
    for fd in (level.src, level.dst):
        if fd >= 0:
            os.close(fd)
    level.src = level.dst = -1


def copy_sparse(src: int, dst: int, size: int) -> int:
    """Copy the file ``src`` to ``dst`` (both fds) keeping its holes; returns the bytes
    written.

    Only the data regions are copied (``SEEK_DATA``/``SEEK_HOLE``), so a sparse file a
    kernel made (``truncate(1 << 40)``) costs the copy what it really occupies, not its
    apparent size: a plain copy of it would fill the host's disk with zeros.
    """
    written = 0
    offset = 0
    # (A filesystem without hole tracking reports the whole file as one data region.)
    while offset < size:
        try:
            start = os.lseek(src, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data after offset: the rest is a hole
                break
            raise
        end = os.lseek(src, start, os.SEEK_HOLE)
        written += _copy_range(src, dst, start, end)
        offset = end
    os.ftruncate(dst, size)
    return written


def _copy_range(src: int, dst: int, start: int, end: int) -> int:
    done = 0
    while start + done < end:
        chunk = os.pread(src, min(1 << 20, end - start - done), start + done)
        if not chunk:
            break
        view = memoryview(chunk)
        while view:
            n = os.pwrite(dst, view, start + done)
            view = view[n:]
            done += n
    return done


@dataclass
class _Doomed:
    fd: int
    name: str
    subdirs: list[str] = field(default_factory=list)


def remove_tree(parent_fd: int, name: str) -> None:
    """Remove the directory ``name`` in ``parent_fd`` and everything under it.

    Links are removed, never followed. At most :data:`MAX_REMOVE_DEPTH` directories are
    open at once: a directory deeper than that is renamed to the top of the tree first.
    Raises OSError (FileNotFoundError when ``name`` is not there).
    """
    top = _Doomed(os.open(name, DIR_FLAGS, dir_fd=parent_fd), name)
    stack = [top]
    try:
        top.subdirs = _unlink_files(top.fd)
        while stack:
            level = stack[-1]
            if not level.subdirs:
                level.subdirs = _unlink_files(level.fd)  # made meanwhile?
                if level.subdirs:
                    continue
                stack.pop()
                os.close(level.fd)
                level.fd = -1
                holder = stack[-1].fd if stack else parent_fd
                os.rmdir(level.name, dir_fd=holder)
                continue
            child = level.subdirs.pop()
            if len(stack) >= MAX_REMOVE_DEPTH:
                moved = f".rm-{secrets.token_hex(8)}"
                try:
                    os.rename(child, moved, src_dir_fd=level.fd, dst_dir_fd=top.fd)
                except FileNotFoundError:
                    continue
                top.subdirs.append(moved)
                continue
            try:
                fd = os.open(child, DIR_FLAGS, dir_fd=level.fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                os.unlink(child, dir_fd=level.fd)  # no longer a directory
                continue
            stack.append(_Doomed(fd, child))
            stack[-1].subdirs = _unlink_files(fd)
    finally:
        for level in stack:
            if level.fd >= 0:
                os.close(level.fd)


def _unlink_files(fd: int) -> list[str]:
    """Unlink everything in the directory ``fd`` but directories; their names."""
    subdirs = []
    with os.scandir(fd) as it:
        entries = list(it)
    for entry in entries:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            if not is_dir:
                os.unlink(entry.name, dir_fd=fd)
        except FileNotFoundError:
            continue
        if is_dir:
            subdirs.append(entry.name)
    return subdirs
