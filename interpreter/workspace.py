"""Safe file access inside a session's workspace (docs/security.md H-50, H-51, decision 8).

Every path from a client is normalised (NFKC) *before* it is checked, must be relative, and
may not contain ``..``, ``.``, empty components, NUL or backslashes. A kernel can make names
that are not NFKC (``cafe`` + U+0301, the ligature U+FB01, fullwidth U+FF21), and listings
show names as they are, so the path is also taken as given (:meth:`Workspace.resolve`): its
leading components that name existing entries exactly (and pass the same checks as they
are) are used as they are, and only the rest of it is the NFKC form. A listed name thus
reaches its own entry, never the one its NFKC form names, while a new name is written
NFKC-normalised. The path is then walked one component at a time with ``O_NOFOLLOW`` opens
relative to a directory descriptor, so a symlink planted by the kernel (to ``/etc``, to
another session, anywhere) is refused rather than followed, and a rename race cannot lead
outside. Only regular files are served.

A name on disk that is not valid UTF-8 (a kernel can make one) is shown with each invalid
byte sequence as U+FFFD (:func:`display_name`); a path component with U+FFFD that names no
file as it is reaches the one entry of its directory shown exactly that way, else the one
whose shown name's NFKC form it is (downloads, listings, deletions).

Writes (uploads, deletions) go through the workspace's :class:`~interpreter.write_gate.
WriteGate`: a closed session's workspace is read-only.

Everything here is synchronous; the API calls it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import stat
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, Literal

from interpreter.errors import (
    BadRequest,
    DiskQuotaExceeded,
    FileNotFoundInWorkspace,
    InterpreterError,
    PathNotAllowed,
    PayloadTooLarge,
    StorageFull,
)
from interpreter.models import FileEntry, FileList
from interpreter.tree import MAX_COPY_DEPTH, copy_sparse, copy_tree, remove_tree
from interpreter.write_gate import WriteGate

__all__ = [
    "Workspace",
    "copy_sparse",
    "copy_tree_safely",
    "display_name",
    "given_parts",
    "split_path",
]

log = logging.getLogger(__name__)

MAX_PATH_CHARS = 1024
#: Bidirectional formatting characters: they make a name display as another one.
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
#: Holes a download may have (size minus the blocks really allocated) before it is refused.
SPARSE_SLACK = 16 << 20
MAX_NAME_BYTES = 255
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: What a listing shows for each byte sequence of a name that is not UTF-8.
REPLACEMENT = "\ufffd"
#: What the filesystem itself keeps at the root of a workspace that is its own ext4
#: filesystem (a disk quota, :mod:`interpreter.quota`): not the user's, not listed.
_FS_OWN = frozenset({"lost+found"})


def display_name(name: str) -> str:
    """The name as listings show it: ``name`` from the filesystem (undecodable bytes as
    surrogate escapes) with each invalid byte sequence replaced by U+FFFD."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "replace")
    return name


def split_path(path: str, *, allow_root: bool = False) -> list[str]:
    """Validate a client-supplied workspace path and return its components, NFKC-normalised
    (the checks apply to the normalised form)."""
    if "\x00" in path:
        raise PathNotAllowed("Path must not contain NUL characters.")
    return _checked_parts(unicodedata.normalize("NFKC", path), allow_root=allow_root)


def file_path(path: str) -> str:
    """``path``, when it can be the name of a file to write; 400 when it ends in '/'.

    Listings take ``data/`` for ``data``, but a file written to ``report/`` was a file
    named ``report``, where the client meant a file in that directory.
    """
    if path.endswith("/") and path.strip("/"):
        shown = path[:200]
        raise BadRequest(
            f"'{shown}' ends in '/', so it names a directory, not a file: give the file's "
            f"name, e.g. '{shown.rstrip('/')}/out.csv'."
        )
    return path


def given_parts(path: str) -> list[str] | None:
    """The components of ``path`` exactly as given, when that is not its NFKC form and they
    pass every check of :func:`split_path` as they are; else None."""
    if unicodedata.is_normalized("NFKC", path):
        return None
    try:
        return _checked_parts(path, allow_root=True)
    except PathNotAllowed:
        return None


def _checked_parts(text: str, *, allow_root: bool) -> list[str]:
    """The components of ``text`` once every check passes (PathNotAllowed naming the one
    that does not)."""
    if "\x00" in text:
        raise PathNotAllowed("Path must not contain NUL characters.")
    if len(text) > MAX_PATH_CHARS:
        raise PathNotAllowed(f"Path is longer than {MAX_PATH_CHARS} characters.")
    _check_characters(text)
    if "\\" in text:
        raise PathNotAllowed("Use '/' to separate path components, not '\\'.")
    if text.startswith("/"):
        raise PathNotAllowed("Path must be relative to the workspace, not absolute.")
    stripped = text.strip("/")
    if not stripped:
        if allow_root:
            return []
        raise PathNotAllowed("Path is empty; name a file inside the workspace.")
    parts = stripped.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise PathNotAllowed(
                "Path must not contain '..', '.' or empty components; "
                "give a plain path inside the workspace."
            )
        if len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            raise PathNotAllowed(f"A path component is longer than {MAX_NAME_BYTES} bytes.")
        try:
            part.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PathNotAllowed("Path must be valid Unicode.") from exc
    return parts


def _check_characters(path: str) -> None:
    """Refuse control characters (CR, LF, ESC, ...) and bidirectional controls, naming one."""
    for char in path:
        if unicodedata.category(char) == "Cc":
            raise PathNotAllowed(
                f"Path contains the control character U+{ord(char):04X}; file names may not "
                "contain control characters (CR, LF, tab, escape, ...)."
            )
        if char in BIDI_CONTROLS:
            raise PathNotAllowed(
                f"Path contains the bidirectional control U+{ord(char):04X}, which makes a "
                "name display as another; remove it."
            )


def _os_error(exc: OSError, path: str) -> Exception:
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return PathNotAllowed(f"'{path}' goes through a symbolic link, which is not allowed.")
    if exc.errno == errno.ENOTDIR:
        return FileNotFoundInWorkspace(f"'{path}': a parent is not a directory.")
    if exc.errno == errno.ENOENT:
        return FileNotFoundInWorkspace(f"No file '{path}' in the workspace.")
    if exc.errno == errno.EISDIR:
        return BadRequest(f"'{path}' is a directory.")
    if exc.errno == errno.ENOTEMPTY:
        return BadRequest(f"Directory '{path}' is not empty.")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull("The service's data disk has no space left for this file.")
    return BadRequest(f"Cannot access '{path}' ({errno.errorcode.get(exc.errno or 0, 'error')}).")


class Workspace:
    """The workspace directory of one session.

    Args:
        root: the directory.
        gate: admits its writes; a closed session's workspace gets a closed one.
    """

    def __init__(self, root: Path, gate: WriteGate | None = None) -> None:
        self.root = root
        self.gate = gate if gate is not None else WriteGate()

    @classmethod
    def read_only(cls, root: Path, refused: Callable[[], InterpreterError]) -> Workspace:
        """A workspace whose every write raises ``refused()`` (a closed session's)."""
        return cls(root, WriteGate(refused=refused))

    @contextmanager
    def _walk(self, parts: list[str], *, create: bool = False) -> Iterator[int]:
        """Yield a descriptor of the directory holding ``parts``' last component."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for part in parts:
                part = _lookup(fd, part)
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except NotADirectoryError:
                    # O_NOFOLLOW|O_DIRECTORY on a symlink fails with ENOTDIR: say why.
                    if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                        raise OSError(errno.ELOOP, "symbolic link") from None
                    raise
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                        self._chown_like_root(part, fd)
                    except FileExistsError:
                        pass  # made by a concurrent upload into the same folder: use it
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    def resolve(self, path: str, *, allow_root: bool = False) -> list[str]:
        """The components of the entry the client path ``path`` names.

        The path must pass :func:`split_path` (its NFKC form is checked, as always). When it
        is not in NFKC form, its leading components that name existing entries exactly as
        given (each passing the same checks as it is) are kept as given; the rest of it is
        the NFKC form. So a name as a listing shows it (a kernel may make names that are not
        NFKC) reaches that entry and never the one its NFKC form names, and a name that
        does not exist is the NFKC one (what an upload creates).
        """
        normal = split_path(path, allow_root=allow_root)
        given = given_parts(path)
        if given is None or given == normal:
            return normal
        matched = self._exact_prefix(given)
        if matched == len(given):
            return given
        # '/' never combines with its neighbours: the rest's NFKC form is the normal form's.
        return given[:matched] + split_path("/".join(given[matched:]))

    def _exact_prefix(self, given: list[str]) -> int:
        """How many leading components of ``given`` name existing entries exactly, each
        before the last a directory (not followed if a link: the walk refuses it)."""
        try:
            fd = os.open(self.root, _DIR_FLAGS)
        except OSError:
            return 0
        try:
            for i, part in enumerate(given):
                name = _exact(fd, part)
                if name is None:
                    return i
                if i == len(given) - 1:
                    break
                try:
                    nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    return i + 1  # a file or a link: the walk of these parts says so
                os.close(fd)
                fd = nxt
            return len(given)
        finally:
            os.close(fd)

    def check_target(self, parts: list[str]) -> None:
        """Raise OSError when a file cannot be written at ``parts``, changing nothing: a
        parent that exists is not a directory (or is a link), or the name is a directory.
        Parents that do not exist yet are fine (a commit makes them)."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for part in parts[:-1]:
                part = _lookup(fd, part)
                try:
                    st = os.stat(part, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    return
                if stat.S_ISLNK(st.st_mode):
                    raise OSError(errno.ELOOP, "symbolic link")
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    return  # removed since (by the session's code): made again at commit
                os.close(fd)
                fd = nxt
            with suppress(FileNotFoundError):
                st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    raise OSError(errno.EISDIR, "is a directory")
        finally:
            os.close(fd)

    def _chown_like_root(self, name: str, dir_fd: int) -> None:
        """Give files the broker creates to the workspace's owner (the kernel's uid)."""
        if os.geteuid() != 0:
            return
        st = os.stat(self.root)
        os.chown(name, st.st_uid, st.st_gid, dir_fd=dir_fd, follow_symlinks=False)

    # -- operations ------------------------------------------------------------------------

    def listing(
        self, path: str = "", *, after: str | None = None, limit: int | None = None
    ) -> FileList:
        """The entries of the directory ``path``: directories first, each kind by name.

        A page: at most ``limit`` entries, those after the place ``after`` names (a
        ``next`` of an earlier page: ``d/NAME`` or ``f/NAME``, an entry's kind and name,
        which need not exist any more); ``next`` is set when entries were left out.
        """
        start = None if after is None else _cursor_key(after)
        parts = self.resolve(path, allow_root=True)
        try:
            with self._walk(parts) as fd:
                entries = []
                hidden: frozenset[str] = frozenset()
                if not parts:
                    # The filesystem's own entries, and uploads' files still arriving.
                    hidden = self.gate.temp_names()
                    if os.path.ismount(self.root):
                        hidden |= _FS_OWN
                with os.scandir(fd) as it:
                    for entry in it:
                        if entry.name in hidden:
                            continue
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue  # gone since it was listed (another upload's temp file)
                        entries.append(_entry([*parts, display_name(entry.name)], st))
        except OSError as exc:
            if exc.errno == errno.ENOTDIR and self._is_file(parts):
                raise BadRequest(
                    f"'{path}' is a file, not a directory: read it as a file, or list its "
                    "directory."
                ) from exc
            raise _os_error(exc, path) from exc
        entries.sort(key=_order)
        if start is not None:
            entries = [e for e in entries if _order(e) > start]
        following = None
        if limit is not None and len(entries) > limit:
            entries = entries[:limit]
            last = entries[-1]
            following = f"{'d' if last.type == 'directory' else 'f'}/{last.name}"
        return FileList(path="/".join(parts), entries=entries, next=following)

    def _is_file(self, parts: list[str]) -> bool:
        """Whether ``parts`` names an existing entry that is not a directory."""
        if not parts:
            return False
        try:
            with self._walk(parts[:-1]) as dfd:
                st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        except OSError:
            return False
        return not stat.S_ISDIR(st.st_mode)

    def stat(self, path: str) -> FileEntry:
        """The entry at ``path`` (``""``: the workspace itself); a symlink is described,
        not followed (type ``other``)."""
        parts = self.resolve(path, allow_root=True)
        try:
            if not parts:
                return _entry([], os.stat(self.root))
            with self._walk(parts[:-1]) as dfd:
                return _entry(parts, os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False))
        except OSError as exc:
            raise _os_error(exc, path) from exc

    def make_dir(self, path: str) -> bool:
        """Create the directory ``path`` and its missing parents. False when it already
        exists; 400 when something other than a directory is there."""
        parts = self.resolve(path)
        with self.gate.writing():
            try:
                with self._walk(parts[:-1], create=True) as dfd:
                    try:
                        os.mkdir(parts[-1], 0o755, dir_fd=dfd)
                    except FileExistsError:
                        st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
                        if stat.S_ISDIR(st.st_mode):
                            return False
                        raise BadRequest(f"'{path}' exists and is not a directory.") from None
                    self._chown_like_root(parts[-1], dfd)
            except OSError as exc:
                raise self.write_error(exc, path) from exc
            return True

    def rename(self, source: str, destination: str) -> None:
        """Move a file, symlink or directory within the workspace (the destination's
        missing parents are created; an existing file there is replaced, as by mv)."""
        src, dst = self.resolve(source), self.resolve(destination)
        if dst[: len(src)] == src:
            raise BadRequest(f"Cannot move '{source}' into itself ('{destination}').")
        # The path an error names: the destination's while its directories are walked (a
        # link on its way named the source, which sent the user to the wrong path).
        blame = source
        with self.gate.writing():
            try:
                with self._walk(src[:-1]) as sfd:
                    os.stat(src[-1], dir_fd=sfd, follow_symlinks=False)  # a missing source: 404
                    blame = destination
                    with self._walk(dst[:-1], create=True) as dfd:
                        blame = source
                        try:
                            # rename() moves a symlink itself and replaces one at the destination.
                            os.rename(src[-1], dst[-1], src_dir_fd=sfd, dst_dir_fd=dfd)
                        except OSError as exc:
                            if exc.errno not in (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY):
                                raise
                            raise BadRequest(
                                f"Cannot move '{source}' onto '{destination}': one is a directory "
                                "and the other is not, or the destination directory is not empty."
                            ) from exc
            except OSError as exc:
                raise self.write_error(exc, blame) from exc

    def open_read(self, path: str, max_bytes: int | None = None) -> tuple[BinaryIO, int]:
        """Open a regular file for reading; the caller closes it."""
        parts = self.resolve(path)
        try:
            with self._walk(parts[:-1]) as dfd:
                fd = os.open(
                    _lookup(dfd, parts[-1]),
                    os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                    dir_fd=dfd,
                )
        except OSError as exc:
            raise _os_error(exc, path) from exc
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            if stat.S_ISDIR(st.st_mode):
                raise BadRequest(f"'{path}' is a directory, not a file: list its files instead.")
            raise PathNotAllowed(f"'{path}' is not a regular file.")
        if max_bytes is not None and st.st_size > max_bytes:
            os.close(fd)
            raise PayloadTooLarge(
                f"'{path}' is {st.st_size} bytes; downloads are limited to {max_bytes} bytes "
                "(INTERP_MAX_DOWNLOAD_BYTES): ask for a part with a Range header."
            )
        allocated = st.st_blocks * 512
        if st.st_size - allocated > SPARSE_SLACK:
            os.close(fd)
            raise PayloadTooLarge(
                f"'{path}' is sparse: {st.st_size} bytes long but only {allocated} bytes are "
                "stored; mostly holes, it is not sent (read the part you need in the session)."
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), st.st_size

    def write(self, path: str, chunks: Iterable[bytes]) -> int:
        """Create or replace a file atomically (parents created). Returns its size."""
        parts = self.resolve(file_path(path))
        name = parts[-1]
        tmp = f".upload-{secrets.token_hex(8)}.tmp"
        with self.gate.writing():
            try:
                with self._walk(parts[:-1], create=True) as dfd:
                    fd = os.open(
                        tmp,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                        0o644,
                        dir_fd=dfd,
                    )
                    size = 0
                    try:
                        with os.fdopen(fd, "wb") as fh:
                            for chunk in chunks:
                                fh.write(chunk)
                                size += len(chunk)
                            fh.flush()
                            os.fsync(fh.fileno())
                        self._chown_like_root(tmp, dfd)
                        try:
                            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                            if stat.S_ISDIR(st.st_mode):
                                raise BadRequest(f"'{path}' is a directory.")
                        except FileNotFoundError:
                            pass
                        # rename() replaces a symlink at ``name`` itself; it never follows it.
                        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                    except BaseException:
                        with suppress(OSError):
                            os.unlink(tmp, dir_fd=dfd)
                        raise
            except OSError as exc:
                raise self.write_error(exc, path) from exc
        return size

    def write_error(self, exc: OSError, path: str) -> Exception:
        """The error for a failed write: out of space in a workspace that is its own
        filesystem is its disk quota (507 disk_quota_exceeded), else as for any access."""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT) and os.path.ismount(self.root):
            return self._quota_exceeded(path)
        return _os_error(exc, path)

    # Used by streamed uploads (interpreter/upload.py).
    walk = _walk
    chown_like_root = _chown_like_root

    def _quota_exceeded(self, path: str) -> DiskQuotaExceeded:
        st = os.statvfs(self.root)
        total, free = (st.f_blocks * st.f_frsize) >> 20, (st.f_bavail * st.f_frsize) >> 20
        if st.f_favail == 0:
            return DiskQuotaExceeded(
                f"'{path}' does not fit in the session's workspace: it holds as many files as "
                f"its disk quota allows ({st.f_files}); nothing was written. Delete files, or "
                "create a session with a larger limits.disk_mb."
            )
        return DiskQuotaExceeded(
            f"'{path}' does not fit in the session's workspace disk quota ({free} MiB free of "
            f"{total} MiB); nothing was written. Delete files, or create a session with a "
            "larger limits.disk_mb."
        )

    def delete(self, path: str) -> None:
        """Delete a file, a symlink (not its target) or a directory tree.

        A path that names nothing as given and differs from its NFKC form by more than
        canonical equivalence (``ﬁle.txt`` after that file is gone: a retried deletion)
        names nothing: it never falls back to the other entry (``file.txt``) its NFKC form
        names. A decomposed ``café.txt`` still reaches the composed one an upload made."""
        parts = self.resolve(path)
        given = given_parts(path)
        if (
            given is not None
            and parts != given
            and unicodedata.normalize("NFC", path) != unicodedata.normalize("NFKC", path)
        ):
            raise _os_error(FileNotFoundError(errno.ENOENT, "not found"), path)
        with self.gate.writing():
            try:
                with self._walk(parts[:-1]) as dfd:
                    name = _lookup(dfd, parts[-1])
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        remove_tree(dfd, name)
                    else:
                        os.unlink(name, dir_fd=dfd)
            except OSError as exc:
                raise _os_error(exc, path) from exc


def _lookup(dir_fd: int, part: str) -> str:
    """The entry of ``dir_fd`` that the path component ``part`` names: ``part`` itself,
    or, when ``part`` shows U+FFFD and names nothing as it is, the one entry shown exactly
    as ``part`` (:func:`display_name`), else the one whose shown name's NFKC form ``part``
    is (400 when several are shown so)."""
    if REPLACEMENT not in part:
        return part
    try:
        os.stat(part, dir_fd=dir_fd, follow_symlinks=False)
        return part
    except FileNotFoundError:
        pass
    return _shown_as(dir_fd, part, nfkc=True) or part


def _exact(dir_fd: int, part: str) -> str | None:
    """The name of the entry of ``dir_fd`` that ``part`` names exactly as given: ``part``
    itself, or the one name that is not UTF-8 and is shown as ``part``; None if none."""
    try:
        os.stat(part, dir_fd=dir_fd, follow_symlinks=False)
        return part
    except FileNotFoundError:
        pass
    except OSError:
        return None
    return _shown_as(dir_fd, part, nfkc=False) if REPLACEMENT in part else None


def _shown_as(dir_fd: int, part: str, *, nfkc: bool) -> str | None:
    """The one name of ``dir_fd`` that is not UTF-8 and is shown as ``part`` (with
    ``nfkc``, when none is shown exactly so: whose shown name's NFKC form is ``part``);
    400 when several are."""
    odd = [(name, shown) for name in os.listdir(dir_fd) if (shown := display_name(name)) != name]
    found = [name for name, shown in odd if shown == part]
    if not found and nfkc:
        found = [name for name, shown in odd if unicodedata.normalize("NFKC", shown) == part]
    if len(found) > 1:
        raise BadRequest(
            f"{len(found)} names in this directory are not valid UTF-8 and show as "
            f"'{part}'; rename them in the session to reach them."
        )
    return found[0] if found else None


os_error = _os_error


def _entry(parts: list[str], st: os.stat_result) -> FileEntry:
    """The entry of the workspace path ``parts`` (``[]``: the workspace) from its lstat."""
    kind: Literal["file", "directory", "other"] = (
        "directory" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    )
    return FileEntry(
        name=parts[-1] if parts else "",
        path="/".join(parts),
        type=kind,
        size=st.st_size,
        modified_at=datetime.fromtimestamp(st.st_mtime, UTC),
    )


def copy_tree_safely(src: Path, dst: Path, *, skip_too_deep: bool = True) -> int:
    """Copy regular files and directories of a workspace; skip links and special files.

    Used to fork a session and to keep a closed session's files: nothing a kernel planted
    (a symlink to a host file, a FIFO) is followed or reproduced, and no depth of tree makes
    it recurse (:mod:`interpreter.tree`). Directories nested deeper than
    :data:`~interpreter.tree.MAX_COPY_DEPTH` levels are left out and logged, or with
    ``skip_too_deep=False`` raise :class:`~interpreter.tree.TreeTooDeep`. Returns the number
    of files copied.
    """
    dst.mkdir(parents=True, exist_ok=True)
    st = os.stat(dst)
    # Copies belong to whoever owns the destination workspace (the kernel's uid).
    owner = (st.st_uid, st.st_gid) if os.geteuid() == 0 else None
    report = copy_tree(src, dst, owner, skip_too_deep=skip_too_deep)
    if report.too_deep:
        log.warning(
            "workspace copy: %d directories nested more than %d levels deep were left out",
            report.too_deep,
            MAX_COPY_DEPTH,
        )
    return report.files


def _order(entry: FileEntry) -> tuple[bool, str]:
    """Where ``entry`` comes in a listing: directories first, then by name."""
    return (entry.type != "directory", entry.name)


def _cursor_key(after: str) -> tuple[bool, str]:
    """The place in a listing that a ``next`` (``d/NAME``, ``f/NAME``) names."""
    kind, slash, name = after.partition("/")
    if kind not in ("d", "f") or not slash or not name or "/" in name:
        raise BadRequest(
            f"after={after[:80]!r} is not a place in a listing: give the 'next' of the "
            "previous page (d/NAME or f/NAME) as it was."
        )
    return (kind == "f", name)
