"""A file arriving into a workspace piece by piece, never whole in memory.

The bytes go to a temporary file beside the target (the same filesystem, so the workspace's
quota counts them and the final rename is atomic); :meth:`Upload.commit` renames it into
place and answers the entry as stored, under the normalised name that listings show.
Everything here is synchronous; the API calls it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import os
import secrets
import stat
from contextlib import suppress
from datetime import UTC, datetime

from interpreter.errors import BadRequest, PayloadTooLarge
from interpreter.models import FileEntry
from interpreter.workspace import Workspace, os_error, split_path

#: Prefix of the temporary files uploads write (beside their target, until renamed).
TEMP_PREFIX = ".upload-"


class Upload:
    """One upload in progress: :meth:`write` pieces, then :meth:`commit` or :meth:`abort`."""

    def __init__(self, workspace: Workspace, path: str, limit: int) -> None:
        self.parts = split_path(path)
        self.path = path
        self.limit = limit
        self.size = 0
        self._tmp = f"{TEMP_PREFIX}{secrets.token_hex(8)}.tmp"
        self._dfd = -1
        self._workspace = workspace
        self._fd = -1
        try:
            with workspace.walk(self.parts[:-1], create=True) as dfd:
                self._dfd = os.dup(dfd)
            self._fd = os.open(
                self._tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o644,
                dir_fd=self._dfd,
            )
            workspace.chown_like_root(self._tmp, self._dfd)
        except OSError as exc:
            self.abort()
            raise os_error(exc, path) from exc
        except BaseException:
            self.abort()
            raise

    @property
    def name(self) -> str:
        """The normalised path the file is stored under."""
        return "/".join(self.parts)

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``; past the limit nothing more is written."""
        self.size += len(chunk)
        if self.size > self.limit:
            raise PayloadTooLarge(f"Upload exceeds the limit of {self.limit} bytes.")
        view = memoryview(chunk)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as exc:
            raise self._workspace.write_error(exc, self.path) from exc

    def commit(self) -> FileEntry:
        """Make the file visible under its name (replacing any file there); its entry."""
        try:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
            name = self.parts[-1]
            try:
                if stat.S_ISDIR(os.stat(name, dir_fd=self._dfd, follow_symlinks=False).st_mode):
                    raise BadRequest(f"'{self.name}' is a directory.")
            except FileNotFoundError:
                pass
            # rename() replaces a symlink at ``name`` itself; it never follows it.
            os.rename(self._tmp, name, src_dir_fd=self._dfd, dst_dir_fd=self._dfd)
            self._tmp = ""
            st = os.stat(name, dir_fd=self._dfd, follow_symlinks=False)
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

    def abort(self) -> None:
        """Remove the temporary file (if not committed) and let go of the descriptors."""
        if self._fd >= 0:
            with suppress(OSError):
                os.close(self._fd)
            self._fd = -1
        if self._dfd >= 0:
            if self._tmp:
                with suppress(OSError):
                    os.unlink(self._tmp, dir_fd=self._dfd)
            with suppress(OSError):
                os.close(self._dfd)
            self._dfd = -1
