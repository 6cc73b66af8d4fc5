"""A file arriving into a workspace piece by piece, never whole in memory.

The bytes go to a temporary file in the workspace's top directory (the same filesystem, so
the workspace's quota counts them and the final rename is atomic); :meth:`Upload.commit`
makes the target's missing parent directories, renames the file into place and answers the
entry as stored, under the name that listings show: the NFKC-normalised path, or an
existing entry's own name when the path names it exactly (:meth:`Workspace.resolve`). An
upload that fails or is aborted leaves nothing: no temporary file and no directory.

Every step goes through the workspace's :class:`~interpreter.write_gate.WriteGate`, where
the upload is registered until it is committed or aborted: once the session closes, the
next step raises (409 ``session_closed``) and the upload is aborted, so an upload is never
answered as stored in a workspace that is not kept.

Everything here is synchronous; the API calls it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import threading
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path

from interpreter.errors import BadRequest, PayloadTooLarge, WorkspaceChanged
from interpreter.models import FileEntry
from interpreter.workspace import Workspace, file_path, os_error

#: Prefix of the temporary files uploads write (in the workspace's top directory).
TEMP_PREFIX = ".upload-"
#: A whole temporary file's name, as :class:`Upload` makes it.
_TEMP_NAME = re.compile(r"\.upload-[0-9a-f]{16}\.tmp")
#: Times a commit makes the target's directories and renames, when code in the session
#: removes a directory on the way each time (measured: a loop doing nothing but remove and
#: make it again wins about one race in three).
COMMIT_ATTEMPTS = 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_leftovers(workspace: Path) -> int:
    """Remove the temporary files of uploads a stopped broker left in the top directory of
    ``workspace`` (none can be arriving before a broker serves it); returns how many. A
    broker killed during an upload left its part for good: in listings, in the kernel's
    view and counted in the quota."""
    removed = 0
    try:
        entries = list(os.scandir(workspace))
    except OSError:
        return 0
    for entry in entries:
        if not _TEMP_NAME.fullmatch(entry.name):
            continue
        try:
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed += 1
        except OSError:
            continue
    return removed


class Upload:
    """One upload in progress: :meth:`write` pieces, then :meth:`commit` or :meth:`abort`.

    Raises (from the constructor) the workspace's error when it is read-only, and 400/404
    when the target cannot be a file (a parent is a file or a link, the name a directory).
    """

    def __init__(self, workspace: Workspace, path: str, limit: int) -> None:
        # Resolved once: an existing entry named exactly so is replaced, else the NFKC name.
        self.parts = workspace.resolve(file_path(path))
        self.path = path
        self.limit = limit
        self.size = 0
        self._tmp = f"{TEMP_PREFIX}{secrets.token_hex(8)}.tmp"
        self._root = -1
        self._fd = -1
        self._workspace = workspace
        self._lock = threading.Lock()
        with workspace.gate.writing():
            try:
                workspace.check_target(self.parts)
                self._root = os.open(workspace.root, _DIR_FLAGS)
                self._fd = os.open(
                    self._tmp,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o644,
                    dir_fd=self._root,
                )
                workspace.chown_like_root(self._tmp, self._root)
                workspace.gate.register(self)
            except OSError as exc:
                self.abort()
                raise workspace.write_error(exc, path) from exc
            except BaseException:
                self.abort()
                raise

    @property
    def temp_name(self) -> str:
        return self._tmp

    @property
    def name(self) -> str:
        """The path the file is stored under: the listed name of the entry the path names
        exactly, or the NFKC-normalised path (:meth:`Workspace.resolve`)."""
        return "/".join(self.parts)

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``; past the limit nothing more is written."""
        self.size += len(chunk)
        if self.size > self.limit:
            raise PayloadTooLarge(f"Upload exceeds the limit of {self.limit} bytes.")
        with self._workspace.gate.writing():
            view = memoryview(chunk)
            try:
                while view:
                    written = os.write(self._fd, view)
                    view = view[written:]
            except OSError as exc:
                raise self._workspace.write_error(exc, self.path) from exc

    def check(self) -> None:
        """Raise what :meth:`commit` would for its target, changing nothing."""
        self._workspace.gate.check()
        try:
            self._workspace.check_target(self.parts)
        except OSError as exc:
            raise os_error(exc, self.name) from exc

    def commit(self) -> FileEntry:
        """Make the file visible under its name (replacing any file there); its entry.

        Code in the session may remove the target's directory while the upload arrives, or
        between the directory's making and the rename: the directories are made again (a
        few times). If it removed the upload's temporary file, or won every time, nothing is
        stored: 409 ``workspace_changed``, never a 404 for a path the upload was to create."""
        try:
            with self._workspace.gate.writing():
                try:
                    os.fsync(self._fd)
                    # Its entry as stored (a rename keeps size and times): read now, as
                    # the session's code may move or remove the file once it is in place.
                    st = os.fstat(self._fd)
                    os.close(self._fd)
                    self._fd = -1
                    name = self.parts[-1]
                    for attempt in range(1, COMMIT_ATTEMPTS + 1):
                        # Checked first: no directory is made for a file that is gone.
                        if not self._temp_is_there():
                            raise WorkspaceChanged(
                                f"'{self.name}' was not stored: its upload's temporary file "
                                f"({self._tmp}) was removed from the workspace while it "
                                "arrived, most likely by code running in the session. "
                                "Upload it again."
                            )
                        try:
                            self._rename_into_place(name)
                            break
                        except FileNotFoundError:
                            if attempt == COMMIT_ATTEMPTS:
                                raise WorkspaceChanged(
                                    f"'{self.name}' was not stored: a directory on its path "
                                    f"was removed each of the {COMMIT_ATTEMPTS} times it was "
                                    "made, most likely by code running in the session. "
                                    "Upload it again once that code is done."
                                ) from None
                except OSError as exc:
                    raise self._workspace.write_error(exc, self.path) from exc
        finally:
            self.abort()
        return FileEntry(
            name=name,
            path=self.name,
            type="file",
            size=st.st_size,
            modified_at=datetime.fromtimestamp(st.st_mtime, UTC),
        )

    def _rename_into_place(self, name: str) -> None:
        with self._workspace.walk(self.parts[:-1], create=True) as dfd:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    raise BadRequest(f"'{self.name}' is a directory.")
            except FileNotFoundError:
                pass
            # rename() replaces a symlink at ``name`` itself; it never follows it.
            os.rename(self._tmp, name, src_dir_fd=self._root, dst_dir_fd=dfd)
            self._tmp = ""

    def _temp_is_there(self) -> bool:
        try:
            os.stat(self._tmp, dir_fd=self._root, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def abort(self) -> None:
        """Remove the temporary file (if not committed) and let go of the descriptors.
        Idempotent, and safe from another thread (a session closing)."""
        with self._lock:
            if self._fd >= 0:
                with suppress(OSError):
                    os.close(self._fd)
                self._fd = -1
            if self._root >= 0:
                if self._tmp:
                    with suppress(OSError):
                        os.unlink(self._tmp, dir_fd=self._root)
                with suppress(OSError):
                    os.close(self._root)
                self._root = -1
        self._workspace.gate.unregister(self)
